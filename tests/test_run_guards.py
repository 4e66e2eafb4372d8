"""What a run refuses before it measures: outputs it could not write or must not replace,
one config named twice, a load level given twice; and what an external server and a missing
suite file are taken to be."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from pytest_specdec.core.configs import ConfigError, load_registry
from pytest_specdec.core.outputs import output_problems
from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.driver.boot import resolve_configs, served_model

NO_REPORTS: dict[str, Path | None] = {}


def test_outputs_that_cannot_be_written_are_named_with_their_flag(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "adir").mkdir()
    results = ("--specdec-results", tmp_path / "r.json")
    assert output_problems(results, NO_REPORTS, {"--specdec-log-dir": tmp_path / "logs"}) == []
    cases = {
        ("--specdec-results", tmp_path / "adir"): "--specdec-results {p} is a folder",
        ("--specdec-results", afile / "r.json"): f"--specdec-results {{p}}: {afile} is a file",
    }
    for (flag, path), message in cases.items():
        (found,) = output_problems((flag, path), NO_REPORTS, {})
        assert found.startswith(message.format(p=path)), found
    (found,) = output_problems(results, {"--specdec-markdown": afile / "r.md"}, {})
    assert found.startswith(f"--specdec-markdown {afile / 'r.md'}: {afile} is a file")
    (found,) = output_problems(results, {}, {"--specdec-log-dir": afile})
    assert found == f"--specdec-log-dir {afile} is a file, not a folder: name a folder"
    (found,) = output_problems(results, {"--specdec-chart": tmp_path / "c.svg"}, {})
    assert "the chart is a PNG" in found
    (found,) = output_problems(results, {"--specdec-benchmark-json": results[1]}, {})
    assert "is the results file (--specdec-results)" in found


def test_every_report_the_options_define_is_checked_before_the_run() -> None:
    """The run checks each report path it can write before it measures (state.REPORT_FLAGS);
    options and state sit in one layer and import neither the other, so the two lists are
    held equal here: a report option added to one alone would go unchecked or undefined."""
    from pytest_specdec.options import REPORT_OPTIONS
    from pytest_specdec.state import REPORT_FLAGS

    assert tuple(flag for flag, _ in REPORT_OPTIONS) == REPORT_FLAGS


def test_a_results_path_holding_another_kind_of_file_is_refused(tmp_path: Path) -> None:
    """``--specdec-results`` named a baseline file: the run replaced it, and the baseline's
    history was gone (an earlier run's results are kept as ``.prev``; a file of another kind
    had nothing to keep it). A report named after a results file is refused too."""
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"schema": 1, "key": {}, "sessions": []}')
    (found,) = output_problems(("--specdec-results", baseline), NO_REPORTS, {})
    assert "exists and is not a pytest-specdec results file" in found
    assert "move that file aside" in found
    runs = tmp_path / "night.json"
    atomic_write_json(runs, {"schema": 1, "configs": [], "workload": {}})
    assert output_problems(("--specdec-results", runs), NO_REPORTS, {}) == []
    (found,) = output_problems(
        ("--specdec-results", tmp_path / "r.json"), {"--specdec-markdown": runs}, {}
    )
    assert "holds a run's results, which the report would replace" in found


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--specdec-results", "BASELINE"), "*--specdec-results *baseline.json exists and is "
         "not a pytest-specdec results file*"),
        (("--specdec-log-dir", "BASELINE"), "*--specdec-log-dir *baseline.json is a file*"),
        (("--specdec-baseline-dir", "BASELINE"), "*--specdec-baseline-dir *is a file*"),
        (("--spec-config", "llamacpp:baseline,baseline"),
         "*--spec-config names llamacpp:baseline twice ('llamacpp:baseline' and 'baseline')*"),
        (("--specdec-concurrency", "1,1"), "*'1,1' names 1 twice: give each client count once*"),
        (("--specdec-concurrency", "1,,2"), "*'1,,2' is not a comma list of whole numbers*"),
        (("--spec-config", ""), "*--spec-config '' names no config*"),
        (("--specdec-reference", "baseline"),
         "*--specdec-reference baseline is the only config, so nothing is judged against it*"),
        (("--specdec-top-p", "0.95"), "*--specdec-top-p 0.95 applies to sampled requests, and "
         "at --specdec-temperature 0 (the default) every request is greedy*"),
        (("--specdec-seed", "3"), "*--specdec-seed 3 applies to sampled requests*add "
         "--specdec-temperature T (e.g. 0.8), or drop --specdec-seed*"),
        (("--specdec-docker-image", "lmsysorg/sglang:v0.5.17"),
         "*--specdec-docker-image lmsysorg/sglang:v0.5.17 is for the container the Docker "
         "launcher starts*add --specdec-launcher docker, or drop --specdec-docker-image*"),
    ],
)  # fmt: skip
def test_the_run_refuses_before_it_boots(
    suite_project: pytest.Pytester, args: tuple[str, str], message: str
) -> None:
    """Each used to be found after every measurement (a traceback at the session's end,
    the report lost), or not at all: a config measured twice into one record."""
    baseline = suite_project.path / "baseline.json"
    baseline.write_text('{"schema": 1, "key": {}, "sessions": []}')
    flag, value = args
    value = str(baseline) if value == "BASELINE" else value
    result = suite_project.runpytest_subprocess("suites", flag, value)
    assert result.ret in (pytest.ExitCode.USAGE_ERROR, 2), result.stdout.str()
    result.stderr.fnmatch_lines([message])
    assert baseline.read_text() == '{"schema": 1, "key": {}, "sessions": []}'
    assert not list(suite_project.path.rglob("*.log"))  # no engine was started


def test_one_config_in_two_spellings_or_two_engines_is_refused() -> None:
    registry = load_registry([])
    (cfg,) = resolve_configs(["llamacpp:baseline"], "llamacpp", registry, False)
    assert cfg.qualified_name == "llamacpp:baseline"
    with pytest.raises(ConfigError, match="names two configs called baseline"):
        resolve_configs(["llamacpp:baseline", "sglang:baseline"], "llamacpp", registry, False)


def test_an_external_server_is_keyed_by_the_model_it_serves() -> None:
    """``--specdec-server-url`` without ``--specdec-model``: the model the server names in
    /v1/models is the key's (every external server used to share the key ``external``, so
    a server restarted with another model was judged against the first one's history)."""

    def serve(body: object, status: int = 200) -> httpx.AsyncClient:
        handler = lambda request: httpx.Response(status, json=body)  # noqa: E731
        return httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(handler))

    answers: list[tuple[object, int, str | None]] = [
        ({"data": [{"id": "SmolLM2.Q4_1.gguf"}, {"id": "b"}]}, 200, "SmolLM2.Q4_1.gguf"),
        ({"data": []}, 200, None),
        ({"data": [{"id": " "}]}, 200, None),
        ({"data": [{"id": "m"}]}, 404, None),
        (["not", "an", "object"], 200, None),
    ]
    for body, status, want in answers:
        assert asyncio.run(served_model(serve(body, status))) == want, body


def test_lint_uses_the_parser_virtualenv_where_this_python_has_no_sglang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``specdec configs lint sglang:...`` after ./scripts/setup: the parser it installed
    is used where no interpreter is set and this one has no SGLang (the README's command
    failed with "No module named 'sglang'")."""
    import importlib.util

    from pytest_specdec.core.suitefile import EngineSettings
    from pytest_specdec.engines import sglang

    for version in ("0.5.9", "0.5.17"):
        python = tmp_path / f"sglang-{version}-venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECDEC_SGLANG_PYTHON", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    newest = str(tmp_path / "sglang-0.5.17-venv" / "bin" / "python")
    assert sglang._lint_python(EngineSettings(), "/usr/bin/python3") == newest
    assert sglang._lint_python(EngineSettings(python="/opt/py"), "/opt/py") == "/opt/py"
    monkeypatch.setenv("SPECDEC_SGLANG_PYTHON", "/opt/env-py")
    assert sglang._lint_python(EngineSettings(), "/opt/env-py") == "/opt/env-py"


def test_bisect_refuses_a_suite_file_that_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped ``--suite-file`` used to be ignored for the built-in defaults, and the
    failure blamed the good endpoint; without the option a folder with no suite file reads
    the built-in suite, as a pytest run there does."""
    from pytest_specdec.bisect.app import Request, _setup
    from pytest_specdec.bisect.candidates import BisectError, Candidate
    from pytest_specdec.core.suitefile import builtin_suite_file, load_suite_settings

    candidates = [Candidate("a", 0, server="/bin/true"), Candidate("b", 1, server="/bin/true")]
    monkeypatch.chdir(tmp_path)
    missing = Request(tmp_path / "c.toml", "baseline", suite_file=tmp_path / "typo.toml")
    with pytest.raises(BisectError, match=r"--suite-file .*typo.toml is not a file"):
        _setup(missing, candidates)
    setup = _setup(Request(tmp_path / "c.toml", "baseline", engine="llamacpp"), candidates)
    builtin = load_suite_settings(builtin_suite_file())
    assert setup.suite.files == builtin.files and setup.settings.config_names == ("baseline",)


def test_bisect_names_a_missing_model_before_it_boots_anything(tmp_path: Path) -> None:
    """A suite file whose target model is not there used to fail at the first boot, as "the
    good endpoint did not boot … pick another --good": the model is checked first, and the
    message says where a bisect takes it from (it has no --specdec-model)."""
    from pytest_specdec.bisect.app import Request, _setup
    from pytest_specdec.bisect.candidates import BisectError, Candidate

    suite = tmp_path / "specdec.toml"
    suite.write_text('[suite]\nengine = "llamacpp"\n[models.llamacpp]\ntarget = "gone.gguf"\n')
    candidates = [Candidate("a", 0, server="/bin/true"), Candidate("b", 1, server="/bin/true")]
    with pytest.raises(BisectError) as caught:
        _setup(Request(tmp_path / "c.toml", "baseline", suite_file=suite), candidates)
    message = str(caught.value)
    assert "target model" in message and "gone.gguf does not exist" in message
    assert f"suite file's [models.llamacpp]: {suite}" in message
    assert "good endpoint" not in message
