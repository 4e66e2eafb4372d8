"""The acceptance verdict and speculative sampling end to end on the real CPU engine.

Accept length does not depend on how busy the machine is: the drafter change here (drafts of
at most 1 token instead of 4) lowers it whatever else runs beside the suite, and the verdict
on it is asked for alone (--specdec-fail-on accept-regressed), so the outcome never hinges on
throughput.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

pytestmark = pytest.mark.engine


@pytest.fixture
def project(two_prompt_project: pytest.Pytester) -> pytest.Pytester:
    return two_prompt_project


def _run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-workload", "two.jsonl", "--specdec-runs", "3",
        "--specdec-max-tokens", "24", "--spec-config", "draft-d4", "--specdec-results", "r.json",
        "--specdec-fail-on", "accept-regressed", "-p", "no:cacheprovider", "-rs", *args,
    )  # fmt: skip


def _acceptance(project: pytest.Pytester) -> dict[str, Any]:
    (verdict,) = json.loads((project.path / "r.json").read_text())["verdicts"]
    return dict(verdict["acceptance"])


def test_a_worse_drafter_fails_on_accept_length(project: pytest.Pytester) -> None:
    first = _run(project, "--specdec-baseline-dir", "bl", "--specdec-update-baselines")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    (stored,) = (project.path / "bl").rglob("*.json")
    cells = json.loads(stored.read_text())["sessions"][0]["prompts"]
    assert all(len(c["accept_runs"]) == 3 for c in cells.values())  # per request, for noise

    rerun = _run(project, "--specdec-baseline-dir", "bl", "--junitxml", "same.xml")
    assert rerun.ret == pytest.ExitCode.OK, rerun.stdout.str()
    same = _acceptance(project)
    assert same["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), same["message"]
    if same["suite"]["method"] == "exact":  # greedy decoding repeated every accept length
        assert same["noise"].startswith("zero:") and "no test is needed" in same["message"]

    worse = project.makefile(
        ".toml",
        worse='[configs.draft-d4]\nengine = "llamacpp"\ndraft = "draft"\n'
        'args = ["--spec-type", "draft-simple", "--spec-draft-n-max", "1"]\n',
    )
    failed = _run(project, "--specdec-baseline-dir", "bl", "--specdec-config-file", str(worse),
                  "--specdec-allow-mismatch", "--junitxml", "worse.xml")  # fmt: skip
    assert failed.ret == pytest.ExitCode.TESTS_FAILED, failed.stdout.str()
    assert failed.parseoutcomes()["failed"] == 1  # the verdict; the throughput tests pass
    failed.stdout.fnmatch_lines(["*accept verdict*", "*draft-d4: accept length REGRESSED*"])
    acceptance = _acceptance(project)
    assert acceptance["verdict"] == "REGRESSED" and acceptance["suite"]["ratio"] < 0.8
    props = {
        p.get("name"): p.get("value") for p in ET.parse(project.path / "worse.xml").iter("property")
    }
    assert props["specdec_accept_verdict"] == "REGRESSED"
    assert props["specdec_accept_explanation"].startswith("accept length REGRESSED")


def test_sampling_skips_the_lossless_check_and_keeps_its_own_baseline(
    project: pytest.Pytester,
) -> None:
    args = ("--specdec-baseline-dir", "bl", "--specdec-temperature", "0.8", "--specdec-seed", "3")
    first = project.runpytest_subprocess(
        "suites/test_throughput.py", "suites/test_lossless.py", "--specdec-workload", "two.jsonl",
        "--specdec-runs", "3", "--specdec-max-tokens", "24", "--spec-config", "draft-d4",
        "--specdec-results", "r.json", "--specdec-update-baselines", "-p", "no:cacheprovider",
        "-rs", *args,
    )  # fmt: skip
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    first.stdout.fnmatch_lines(["*lossless check: exact equality *does not apply when sampling*"])
    doc = json.loads((project.path / "r.json").read_text())
    assert doc["options"]["temperature"] == 0.8 and doc["options"]["seed"] == 3
    assert not doc["references"]  # no greedy reference was booted
    (stored,) = (project.path / "bl").rglob("*.json")
    assert stored.name.endswith("--t0-8-s3.json")
    key = json.loads(stored.read_text())["key"]
    assert key["sampling"] == {"temperature": 0.8, "top_p": None, "seed": 3}

    second = _run(project, *args)
    assert second.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), second.stdout.str()
    acceptance = _acceptance(project)
    assert acceptance["status"] == "judged" and acceptance["suite"]["ratio"] > 0

    greedy = _run(project, "--specdec-baseline-dir", "bl")
    greedy.stdout.fnmatch_lines(["*no baseline for draft-d4*"])  # not the sampled one
