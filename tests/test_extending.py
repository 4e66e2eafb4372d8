"""Extension points (docs/extending.md), in a real run of a pytester project against the fake
OpenAI-compatible server: a third-party engine adapter installed as a distribution (its
``*.dist-info`` with an entry point in the group ``pytest_specdec.engines``, on the run's
``sys.path``), a second engine added through the ``pytest_specdec_engines`` hook, and a
conftest implementing the other ``pytest_specdec_*`` hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def install(project: pytest.Pytester, module: str, source: str, dist_info: dict[str, str]) -> None:
    """An adapter "installed" for the project's runs: its module and its ``*.dist-info`` in a
    folder on the runs' PYTHONPATH."""
    site = project.path / "site"
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(source)
    name = dist_info["METADATA"].split("Name: ")[1].split()[0].replace("-", "_")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    for file, text in dist_info.items():
        (info / file).write_text(text)
    path = os.environ.get("PYTHONPATH", "")
    if str(site) not in path.split(os.pathsep):
        project._monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join(p for p in (str(site), path) if p)
        )


@pytest.fixture
def project(suite_project: pytest.Pytester) -> pytest.Pytester:
    install(suite_project, "echo_adapter", ADAPTER, DIST_INFO)
    suite_project.makeconftest(CONFTEST)
    return suite_project


def run(project: pytest.Pytester, url: str, engine: str, out: str, *extra: str) -> pytest.RunResult:
    return project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-server-url", url, "--specdec-engine", engine,
        "--spec-config", "plain", "--specdec-runs", "2", "--specdec-no-warmup",
        "--specdec-results", out, "-p", "no:cacheprovider", "-k", "haiku", *extra, timeout=120,
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
            "*engine 'echo' is registered twice: by entry point echo_adapter:EchoEngine of "
            "distribution echo-adapter 1.0 and by pytest plugin *conftest.py*"
        ]
    )


BROKEN = {
    "METADATA": "Metadata-Version: 2.1\nName: calibserve\nVersion: 1.0\n",
    "entry_points.txt": "[pytest_specdec.engines]\ncalibserve = calibserve_adapter:Engine\n",
}
BROKEN_SOURCE = "import os\nos.environ['NO_SUCH_KEY']\n"
NAMED = ("engine adapter 'calibserve' (entry point calibserve_adapter:Engine of distribution "
         "calibserve 1.0) failed to import: KeyError: 'NO_SUCH_KEY'; fix or uninstall "
         "calibserve")  # fmt: skip
UNUSED = f"{NAMED} (this run does not use engine 'calibserve' and goes on)"
# the ini of a project that escalates every warning, as this repository's pyproject does
WARNINGS_ARE_ERRORS = "[pytest]\naddopts = --strict-markers\nfilterwarnings =\n    error\n"


def test_a_broken_adapter_the_run_does_not_use_is_reported_where_warnings_are_errors(
    project: pytest.Pytester,
) -> None:
    """A broken distribution that registers an engine stops no run that does not use it,
    whatever the project's ini does with warnings: it is named in the report header and in
    the terminal summary (which -q still shows), never through the warnings machinery, and
    once under xdist."""
    install(project, "calibserve_adapter", BROKEN_SOURCE, BROKEN)
    project.makeini(WARNINGS_ARE_ERRORS)
    with FaultServer("ok", tokens=8) as server:
        result = run(project, server.url, "echo", "r.json")
        quiet = run(project, server.url, "echo", "q.json", "-q")
        spread = run(project, server.url, "echo", "x.json", "-n", "2")
    for done in (result, quiet, spread):
        out = done.stdout.str()
        assert done.ret == pytest.ExitCode.OK, out + done.stderr.str()
        assert "INTERNALERROR" not in out and "warnings summary" not in out, out
        assert out.count(f"note: {UNUSED}") == 1, out
    result.stdout.fnmatch_lines([f"specdec: {UNUSED}", "*1 passed*"])
    spread.stdout.fnmatch_lines([f"specdec: {UNUSED}"])
    assert f"specdec: {UNUSED}" not in quiet.stdout.str()  # -q shows no header
    for name in ("r.json", "q.json", "x.json"):
        (cfg,) = json.loads((project.path / name).read_text())["configs"]
        assert [r["ok"] for r in cfg["runs"] if r["phase"] == "measure"] == [True, True]


@pytest.mark.engine
def test_an_adapter_that_fails_to_import_is_named_and_breaks_only_its_own_runs(
    suite_project: pytest.Pytester, models: dict[str, Path]
) -> None:
    install(suite_project, "calibserve_adapter", BROKEN_SOURCE, BROKEN)
    suite_project.makeini(WARNINGS_ARE_ERRORS)  # the README's command, run in this repository
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-engine", "llamacpp", "--spec-config", "baseline",
        "--specdec-runs", "1", "--specdec-no-warmup", "--specdec-max-tokens", "16",
        "--specdec-results", str(out), "-k", "haiku", "-p", "no:cacheprovider", timeout=300,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([f"specdec: {UNUSED}", f"note: {UNUSED}", "*1 passed*"])
    runs = json.loads(out.read_text())["configs"][0]["runs"]
    assert any(r["phase"] == "measure" and r["ok"] and r["tok_per_s"] > 0 for r in runs)
    # a run that uses it is a usage error naming it
    used = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-engine", "calibserve", "--co", timeout=60
    )
    assert used.ret == pytest.ExitCode.USAGE_ERROR
    assert NAMED in used.stderr.str(), used.stderr.str()
    # specdec doctor lists every engine, this one as not loading, and exits 0
    env = {**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"]}
    doctor = subprocess.run([sys.executable, "-m", "pytest_specdec.cli", "doctor"],
                            cwd=suite_project.path, env=env, capture_output=True, text=True,
                            timeout=120, check=False)  # fmt: skip
    assert doctor.returncode == 0, doctor.stderr
    lines = doctor.stdout.splitlines()
    assert any(x.startswith("no  engine calibserve ") and x.endswith(NAMED) for x in lines)
    assert any(line.startswith("ok  llama.cpp ") for line in lines), doctor.stdout
    # other commands go on and warn
    listed = subprocess.run([sys.executable, "-m", "pytest_specdec.cli", "configs", "list",
                             "--engine", "llamacpp"], cwd=suite_project.path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert listed.returncode == 0 and "baseline" in listed.stdout, listed.stderr
    assert f"specdec: warning: {NAMED}" in listed.stderr
