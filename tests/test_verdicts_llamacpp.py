"""Verdicts and baselines end to end on the real CPU engine.

Between-session noise on a shared 2-core machine reaches 10-25% (and 1.5x when another process
comes or goes between two runs), so these runs use --specdec-min-delta 0.3, and a rerun with
nothing changed is judged with its provisional verdict reported, not gating: what a rerun
reads is for the simulations of tests/test_calibration.py to decide, not for two real runs to
agree on. The deliberately slower setting (16-token drafts from a draft model as costly as the
target, on an engine held to a quarter of the wall clock) is far beyond 30% on any machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests_support import Throttle

from pytest_specdec.engines.launch import free_port, start_process, stop_process, wait_ready

pytestmark = pytest.mark.engine


@pytest.fixture
def project(two_prompt_project: pytest.Pytester) -> pytest.Pytester:
    return two_prompt_project


def _run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-workload", "two.jsonl", "--specdec-runs", "3",
        "--specdec-max-tokens", "24", "--specdec-min-delta", "0.3",
        "--specdec-baseline-dir", "bl", "-p", "no:cacheprovider", "-rs", *args,
    )  # fmt: skip


def test_update_judge_and_regress(project: pytest.Pytester) -> None:
    first = _run(project, "--specdec-update-baselines")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    first.assert_outcomes(passed=2, skipped=1)  # the verdict: no baseline yet
    first.stdout.fnmatch_lines(["*no baseline for baseline at*", "*baseline update:*",
                                "*0 → 1 sessions*"])  # fmt: skip
    second = _run(project, "--specdec-update-baselines")
    assert second.ret == pytest.ExitCode.OK, second.stdout.str()
    second.stdout.fnmatch_lines(["*1 → 2 sessions*"])
    files = list((project.path / "bl").rglob("*.json"))
    assert len(files) == 1 and len(json.loads(files[0].read_text())["sessions"]) == 2

    judged = _run(project, "--specdec-provisional", "report")
    assert judged.ret == pytest.ExitCode.OK, judged.stdout.str()
    judged.stdout.fnmatch_lines(
        ["*verdicts (suite score*", "baseline: * (provisional): *x (90% CI *MDE*"]
    )

    # Deliberately slower: the same name, now drafting 16 tokens with the Q4_0 draft, which on
    # a CPU costs as much as the target, on an engine that gets a quarter of the wall clock:
    # several times slower than plain decoding on any machine, busy or not.
    slower = project.makefile(
        ".toml",
        slower='[configs.baseline]\nengine = "llamacpp"\ndraft = "draft"\n'
        'args = ["--spec-type", "draft-simple", "--spec-draft-n-max", "16"]\n',
    )
    with Throttle("--metrics"):
        regressed = _run(project, "--specdec-config-file", str(slower), "--specdec-allow-mismatch")
    assert regressed.ret == pytest.ExitCode.TESTS_FAILED, regressed.stdout.str()
    assert regressed.parseoutcomes()["failed"] == 1  # the verdict; the throughput tests pass
    regressed.stdout.fnmatch_lines(
        ["*_ test_verdict[[]baseline[]] _*", "*REGRESSED*drop * ≥ δ 30.0%*",
         "*FORCED comparison across differing key fields:*config_sha256*"]
    )  # fmt: skip
    assert len(json.loads(files[0].read_text())["sessions"]) == 2  # judging never writes


def test_corrupt_baseline_fails_naming_the_file(project: pytest.Pytester) -> None:
    assert _run(project, "--specdec-update-baselines").ret == pytest.ExitCode.OK
    (path,) = list((project.path / "bl").rglob("*.json"))
    path.write_text('{"schema": 1, "key": ')
    result = _run(project)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    relative = path.relative_to(project.path)
    result.stdout.fnmatch_lines([f"*baseline {relative} is not valid JSON*left untouched*"])
    assert path.read_text() == '{"schema": 1, "key": '


def test_external_server_is_baselined_and_judged(
    project: pytest.Pytester, llama_server: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    port = free_port()
    argv = [str(llama_server), "-m", str(models["target"]), "--host", "127.0.0.1",
            "--port", str(port), "--metrics", "-np", "1", "-t", "1"]  # fmt: skip
    proc = start_process(argv, {}, tmp_path / "external.log")
    try:
        import httpx

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_ready(proc, ready, 60)
        url = ("--specdec-server-url", f"http://127.0.0.1:{port}", "--spec-config", "their-build")
        for _ in range(2):
            assert _run(project, *url, "--specdec-update-baselines").ret == pytest.ExitCode.OK
        # kept per the model the server names, not under one key for every external server
        served = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"][0]
        (stored,) = project.path.rglob("their-build--*.json")
        key = json.loads(stored.read_text())["key"]
        assert key["model_name"] == served["id"] and "external" not in stored.name
        judged = _run(project, *url, "--specdec-provisional", "report")
        assert judged.ret == pytest.ExitCode.OK, judged.stdout.str()
        judged.stdout.fnmatch_lines(["*their-build*baseline (2 sessions)*"])
    finally:
        stop_process(proc)


def test_reference_ab_in_one_run(project: pytest.Pytester) -> None:
    result = _run(project, "--spec-config", "ngram", "--specdec-reference", "baseline")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*ngram *reference baseline*", "*one server session per side*provisional*"]
    )


def test_a_short_history_borrows_the_stored_boots_spread(project: pytest.Pytester) -> None:
    """One stored boot of ``ngram`` says nothing of how boots spread; five stored boots of
    ``baseline`` beside it (same machine, engine, target and workload) lend theirs. The night
    is judged on them, provisional, and names the lender, whatever the boots read; once
    ``baseline`` itself is judged, its own five boots make the prediction interval."""
    five = _run(project, "--spec-config", "baseline", "--specdec-sessions", "5",
                "--specdec-update-baselines")  # fmt: skip
    assert five.ret == pytest.ExitCode.OK, five.stdout.str()
    five.stdout.fnmatch_lines(["*baseline: *: 0 → 5 sessions*"])
    one = _run(project, "--spec-config", "ngram", "--specdec-update-baselines")
    assert one.ret == pytest.ExitCode.OK, one.stdout.str()

    judged = _run(project, "--spec-config", "ngram", "--specdec-provisional", "report")
    assert judged.ret == pytest.ExitCode.OK, judged.stdout.str()
    judged.stdout.fnmatch_lines(
        [
            "ngram: * (provisional): *; the spread between sessions (*) borrowed from "
            "baseline (5 sessions)*"
        ]
    )
    own = _run(project, "--spec-config", "baseline")
    assert own.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), own.stdout.str()
    assert "borrowed from" not in own.stdout.str()
    own.stdout.fnmatch_lines(["*baseline (5 sessions)*"])
    verdict = [
        line for line in own.stdout.lines if line.startswith("baseline: ") and "x (90% CI" in line
    ]
    assert verdict and "(provisional)" not in verdict[0], own.stdout.str()
