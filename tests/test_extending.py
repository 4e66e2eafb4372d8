"""Extension points (docs/extending.md), in a real run of a pytester project against the fake
OpenAI-compatible server: a third-party engine adapter installed as a distribution (its
``*.dist-info`` with an entry point in the group ``pytest_specdec.engines``, on the run's
``sys.path``), a second engine added through the ``pytest_specdec_engines`` hook, and a
conftest implementing the other ``pytest_specdec_*`` hooks."""

from __future__ import annotations

import json
import os

import pytest
from fault_server import FaultServer

ADAPTER = '''
"""A third-party engine adapter: an OpenAI-compatible server of the "echo" family."""
from pytest_specdec.engines.openai import OpenAIEngine


class EchoEngine(OpenAIEngine):
    name = "echo"
    readiness_path = "/health"
    speculative_configs = True

    def version(self):
        return "echo 1.0"


class HookEngine(EchoEngine):
    name = "echo-hook"
'''

DIST_INFO = {
    "METADATA": "Metadata-Version: 2.1\nName: echo-adapter\nVersion: 1.0\n",
    "entry_points.txt": "[pytest_specdec.engines]\necho = echo_adapter:EchoEngine\n",
    "top_level.txt": "echo_adapter\n",
}

CONFTEST = """
import json
from pathlib import Path

from echo_adapter import HookEngine


def pytest_specdec_engines():
    return {"echo-hook": HookEngine}


def pytest_specdec_hardware(config):
    return {"rack": "r7"}


def pytest_specdec_results(config, document):
    document["written_by_hook"] = document.get("written_by_hook", 0) + 1


def pytest_specdec_judgements(config, judgements):
    Path("judgements.json").write_text(json.dumps([j.to_dict() for j in judgements]))


def pytest_specdec_report(config, document):
    out = Path("echo-report.txt")
    out.write_text(" ".join(c["name"] for c in document["configs"]))
    return [f"echo report: {out}"]
"""


@pytest.fixture
def project(suite_project: pytest.Pytester) -> pytest.Pytester:
    site = suite_project.path / "site"
    (site / "echo_adapter.py").parent.mkdir()
    (site / "echo_adapter.py").write_text(ADAPTER)
    info = site / "echo_adapter-1.0.dist-info"
    info.mkdir()
    for name, text in DIST_INFO.items():
        (info / name).write_text(text)
    suite_project.makeconftest(CONFTEST)
    path = os.environ.get("PYTHONPATH")
    suite_project._monkeypatch.setenv(  # the run's interpreter sees the "installed" adapter
        "PYTHONPATH", str(site) + (os.pathsep + path if path else "")
    )
    return suite_project


def run(project: pytest.Pytester, url: str, engine: str, out: str) -> pytest.RunResult:
    return project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-server-url", url, "--specdec-engine", engine,
        "--spec-config", "plain", "--specdec-runs", "2", "--specdec-no-warmup",
        "--specdec-results", out, "-p", "no:cacheprovider", "-k", "haiku", timeout=120,
    )  # fmt: skip


def test_a_third_party_engine_and_the_hooks_work_in_a_real_run(project: pytest.Pytester) -> None:
    with FaultServer("ok", tokens=8) as server:
        result = run(project, server.url, "echo", "r.json")
        hooked = run(project, server.url, "echo-hook", "h.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    doc = json.loads((project.path / "r.json").read_text())
    (cfg,) = doc["configs"]
    assert cfg["engine"] == "echo"
    runs = [r for r in cfg["runs"] if r["phase"] == "measure"]
    assert [r["output_tokens"] for r in runs] == [8, 8] and all(r["ok"] for r in runs)
    assert doc["written_by_hook"] == 1  # each write starts from a fresh document
    assert doc["host"]["fields"] == {"rack": "r7"}
    (judged,) = json.loads((project.path / "judgements.json").read_text())
    assert judged["config"] == "plain"
    assert (project.path / "echo-report.txt").read_text() == "plain"
    result.stdout.fnmatch_lines(["*echo report: echo-report.txt*"])
    assert hooked.ret == pytest.ExitCode.OK, hooked.stdout.str()
    assert json.loads((project.path / "h.json").read_text())["configs"][0]["engine"] == "echo-hook"


def test_an_engine_registered_twice_is_a_usage_error_naming_both(
    project: pytest.Pytester,
) -> None:
    project.makeconftest(
        "from echo_adapter import EchoEngine\n\n"
        "def pytest_specdec_engines():\n    return {'echo': EchoEngine}\n"
    )
    result = project.runpytest_subprocess("suites/test_throughput.py", "--co", timeout=60)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*engine 'echo' is registered twice: by entry point echo_adapter:EchoEngine "
            "(echo-adapter) and by pytest plugin *conftest.py*"
        ]
    )
