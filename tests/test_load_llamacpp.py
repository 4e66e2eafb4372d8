"""Load levels on the real engine tier: a real llama-server with parallel slots (``-np``),
booted by the plugin on the CPU, measured at several client counts in rounds, stored as
baseline cells per level, judged per level on a rerun, and A/B against a plain config for the
speedup curve's crossover. Outcomes never hinge on two measurements reading alike: the runs
fail only on what is certain (errors, accept length, which is exact at temperature 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine

CONFIGS = """
[configs.np2]
engine = "llamacpp"
description = "No speculation, two parallel slots."
args = ["-np", "2", "-c", "4096"]

[configs.draft-np2]
engine = "llamacpp"
description = "The Q4_0 draft, 4 tokens a step, two parallel slots."
draft = "draft"
args = ["-np", "2", "-c", "4096", "--spec-type", "draft-simple", "--spec-draft-n-max", "4"]
"""
# Few, short, fixed-length requests: every round does the same work, fast on two cores.
SHORT = ("--specdec-max-tokens", "12", "--specdec-ignore-eos", "--specdec-workload", "two.jsonl",
         "-p", "no:cacheprovider")  # fmt: skip


def _results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["configs"]}


def test_levels_are_stored_per_level_then_each_judged_on_a_rerun(
    two_prompt_project: pytest.Pytester,
) -> None:
    project = two_prompt_project
    configs = project.makefile(".toml", load=CONFIGS)
    # the levels, the rounds and the baselines' folder from a suite file extending the suite's
    suite = project.path / "suites" / "load.toml"
    suite.write_text('[suite]\nextends = "specdec.toml"\nconcurrency = [4, 1, 2]\nrounds = 2\n'
                     'baseline_dir = "bl"\n')  # fmt: skip
    first, second = project.path / "first.json", project.path / "second.json"
    common = ("suites/test_concurrency.py", "--specdec-config-file", str(configs),
              "--spec-config", "np2,draft-np2", "--specdec-suite-file", str(suite),
              *SHORT)  # fmt: skip
    stored = project.runpytest_subprocess(
        *common, "--specdec-update-baselines", "--specdec-results", str(first)
    )
    assert stored.ret == pytest.ExitCode.OK, stored.stdout.str()
    doc = _by_name(_results(first))
    for name in ("np2", "draft-np2"):
        rounds = doc[name]["extra"]["load"]
        # a warm-up round (0) first at each level, kept and marked, then the measured rounds
        assert sorted({(r["clients"], r["round"]) for r in rounds}) == [
            (c, n) for c in (1, 2, 4) for n in (0, 1, 2)]  # fmt: skip
        assert [r["warmup"] for r in rounds if r["round"] == 0] == [True] * 3
        for r in rounds:  # every client covered both prompts, each decoding exactly 12 tokens
            assert r["requests"] == 2 * r["clients"] and r["failed"] == 0 and not r["errors"]
            assert r["output_tokens"] == 12 * r["requests"]
            assert r["output_tok_per_s"] == pytest.approx(r["output_tokens"] / r["wall_s"])
            assert r["ttft_s"]["p50"] <= r["ttft_s"]["p99"]
            rows = [dict(zip(r["row_fields"], row, strict=True)) for row in r["rows"]]
            assert sorted((x["client"], x["prompt"]) for x in rows) == sorted(
                (c, p) for c in range(r["clients"]) for p in ("count", "story"))  # fmt: skip
            assert all(x["output_tokens"] == 12 and x["error"] is None for x in rows)
            host = r["engine"]["host"]  # the host's CPU over the round, read from /proc
            assert 0 <= host["steal"] <= 1 and 0 < host["busy"] <= 1
            assert host["engine_cpu_s"] > 0 and host["busiest"]["name"] == "llama-server"
            # where its decoding threads ran: CPUs of this machine, the busiest one's among them
            cpus = {t["cpu"] for t in host["busy_threads"]}
            assert cpus <= set(range(os.cpu_count() or 1)) and host["busiest"]["on_cpu"] in cpus
            # the load client (this pytest process) read apart from the engine
            assert 0 < host["client"]["thread"] <= host["client"]["cpus"]
        assert not [x for x in doc[name]["runs"] if x["phase"] == "load"]  # rows, not records
        assert doc[name]["extra"]["cost"][0]["load_s"] > 0
    spec = [r for r in doc["draft-np2"]["extra"]["load"] if not r["warmup"]]
    assert all(r["accept_length"] and r["accept_source"] == "metrics-delta" for r in spec)
    assert all(r["accept_length"] is None for r in doc["np2"]["extra"]["load"])
    stored.stdout.fnmatch_lines([
        "np2: load levels: closed-loop clients*2 rounds per level; requests at once: 2 (-np)",
        "clients*out tok/s*decode p50/p99*TTFT*accept*engine*",
        "np2 at 4 clients: queued*",  # 4 clients, 2 slots: by the engine's count or its flags
        "*draft-np2: crossover (tonight): * against np2: *",
        "*np2: */bl/*np2--*.json: 0 → 1 sessions; load levels 1, 2, 4 clients",
    ])  # fmt: skip
    baseline = next((project.path / "bl").rglob("draft-np2--*.json"))
    (session,) = json.loads(baseline.read_text())["sessions"]
    assert session["suite"] is None and set(session["levels"]) == {"1", "2", "4"}
    assert session["levels"]["4"]["n"] == 2 and session["levels"]["4"]["accept_length"] > 1
    # the host's pace: the load client's CPU seconds per measured round, kept with each level
    assert all(session["levels"][c]["client_cpu_s"] > 0 for c in ("1", "2", "4"))

    # The rerun: every level judged against its stored cell (one stored session: provisional);
    # the speedup curve against np2 tonight and in the stored baselines. Its exit status rests
    # on accept length only, which greedy decoding repeats exactly.
    rerun = project.runpytest_subprocess(
        *common, "--specdec-results", str(second), "--specdec-fail-on", "accept-regressed"
    )
    assert rerun.ret == pytest.ExitCode.OK, rerun.stdout.str()
    rerun.stdout.fnmatch_lines([
        "load levels (aggregate output tok/s per level; Holm across every level of the run):",
        "config*clients*verdict*ratio*p raw / Holm*MDE*",
        "*draft-np2: crossover (stored baselines): *",
    ])  # fmt: skip
    verdicts = {v["config"]: v for v in _results(second)["verdicts"]}
    assert set(verdicts) == {"np2", "draft-np2"}
    for v in verdicts.values():
        assert v["status"] == "load-only"
        levels = v["load"]["levels"]
        assert set(levels) == {"1", "2", "4"}
        for lv in levels.values():
            verdict = lv["verdict"]
            assert verdict["outcome"] in ("REGRESSED", "IMPROVED", "UNCHANGED", "INCONCLUSIVE")
            assert verdict["provisional"] and verdict["p_adjusted"] is not None
            assert verdict["ci_low"] <= verdict["ratio"] <= verdict["ci_high"]
            # tonight's client CPU seconds a round set beside the stored level's, in its text
            pace = lv["pace"]
            assert pace["new"] > 0 and pace["reference"] > 0
            assert pace["ratio"] == pytest.approx(pace["new"] / pace["reference"])
            assert f"the host's pace: the load client spent {pace['ratio']:.2f}x" in lv["message"]
    accept = verdicts["draft-np2"]["load"]["levels"]["4"]["accept"]
    assert accept["new"] == pytest.approx(accept["reference"])  # greedy: the same steps
    assert verdicts["draft-np2"]["load"]["crossover"]["reference"] == "np2"


def test_ab_per_level_with_sessions_runs_every_level_in_every_session(
    two_prompt_project: pytest.Pytester,
) -> None:
    project = two_prompt_project
    configs = project.makefile(".toml", load=CONFIGS)
    out = project.path / "ab.json"
    result = project.runpytest_subprocess(
        "suites/test_concurrency.py", "--specdec-config-file", str(configs),
        "--spec-config", "np2,draft-np2", "--specdec-reference", "np2", "--specdec-sessions",
        "2", "--specdec-concurrency", "1,2", "--specdec-results", str(out),
        "--specdec-markdown", "report.md", "--specdec-fail-on", "accept-regressed",
        "--specdec-rounds", "2", *SHORT,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    doc = _by_name(_results(out))
    sessions = {(r["session"], r["clients"]) for r in doc["draft-np2"]["extra"]["load"]
                if not r["warmup"]}  # fmt: skip
    assert sessions == {(s, c) for s in (1, 2) for c in (1, 2)}  # each level in each session
    (verdict,) = _results(out)["verdicts"]
    assert verdict["load"]["against"] == "reference np2"
    for lv in verdict["load"]["levels"].values():
        assert lv["verdict"]["method"] == "welch" and not lv["verdict"]["provisional"]
        assert lv["cause"] == "speculation"  # against plain decoding: tokens per step, step cost
    result.assert_outcomes(passed=4 + 4 + 1, skipped=1)  # 2 configs x 2 levels x 2 sessions
    report = (project.path / "report.md").read_text()
    assert "### Load levels" in report and "xychart-beta" in report
    assert "Speedup over np2" in report and "`draft-np2`" in report


def test_two_speculative_configs_give_a_comparison_curve(
    two_prompt_project: pytest.Pytester,
) -> None:
    """A speculative config against a speculative reference (4 drafted tokens a step against
    2): each level is an A/B, and the curve is drawn as a comparison, told as where the config
    stops being the faster, never as where speculation stops paying."""
    project = two_prompt_project
    two = CONFIGS.replace("[configs.np2]", "[configs.draft2-np2]").replace(
        'description = "No speculation, two parallel slots."\nargs = ["-np", "2", "-c", "4096"]',
        'description = "The Q4_0 draft, 2 tokens a step, two parallel slots."\ndraft = "draft"\n'
        'args = ["-np", "2", "-c", "4096", "--spec-type", "draft-simple", '
        '"--spec-draft-n-max", "2"]',
    )
    configs = project.makefile(".toml", load=two)
    out = project.path / "cmp.json"
    result = project.runpytest_subprocess(
        "suites/test_concurrency.py", "--specdec-config-file", str(configs),
        "--spec-config", "draft2-np2,draft-np2", "--specdec-reference", "draft2-np2",
        "--specdec-concurrency", "1,2", "--specdec-rounds", "2", "--specdec-results", str(out),
        "--specdec-markdown", "report.md", "--specdec-fail-on", "accept-regressed", *SHORT,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (verdict,) = _results(out)["verdicts"]
    crossover = verdict["load"]["crossover"]
    assert verdict["load"]["against"] == "reference draft2-np2"
    assert crossover["kind"] == "comparison" and crossover["reference"] == "draft2-np2"
    assert "pay" not in crossover["text"] and "against draft2-np2" in crossover["text"]
    report = (project.path / "report.md").read_text()
    assert "Speedup over draft2-np2" in report and "crossover (tonight): " in report


def test_a_round_whose_requests_fail_is_an_error_never_a_number(
    two_prompt_project: pytest.Pytester,
) -> None:
    """Requests cut off by a request timeout far below a 64-token decode on any CPU: the
    round records the errors and no throughput, each client stops at its failed request, the
    level stops after the round, its test fails, its verdict cannot be made, and the baseline
    refuses the session."""
    project = two_prompt_project
    configs = project.makefile(".toml", load=CONFIGS)
    out = project.path / "r.json"
    result = project.runpytest_subprocess(
        "suites/test_concurrency.py", "--specdec-config-file", str(configs),
        "--spec-config", "np2", "--specdec-concurrency", "2", "--specdec-no-warmup",
        "--specdec-request-timeout", "0.02", "--specdec-max-tokens", "64", "--specdec-ignore-eos",
        "--specdec-rounds", "2", "--specdec-workload", "two.jsonl", "--specdec-results", str(out),
        "--specdec-update-baselines", "--specdec-baseline-dir", "bl", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*round 1: client * request timed out after 0.02 s*",
        "*round 1: the level stopped here: its 1 later round(s) were not run*",
        "*np2: NOT UPDATED: np2: not added to the baseline: 0 failed run(s) and 1 failed load "
        "round(s)*",
    ])  # fmt: skip
    (only,) = _results(out)["configs"][0]["extra"]["load"]  # no warm-up, no round 2
    assert only["output_tok_per_s"] is None and only["requests"] == only["failed"] == 2
    rows = [dict(zip(only["row_fields"], row, strict=True)) for row in only["rows"]]
    assert sorted(x["client"] for x in rows) == [0, 1]  # one request a client, then it stopped
    assert all("timed out" in x["error"] for x in rows)
    assert not (project.path / "bl").exists() or not list((project.path / "bl").rglob("*.json"))


def test_adaptive_sessions_boot_on_until_decided_and_a_budget_stops_them(
    two_prompt_project: pytest.Pytester,
) -> None:
    """With no baseline nothing can be decided, so adaptive sessions that store one all boot,
    while a run that stores none stops after the first. A real boot and one level take far
    more than 0.06 s on any machine, so with a budget of 0.001 minutes a second session is
    skipped, saying why (the budget is checked first); the level's gate runs
    after the last session all the same, booted or not."""
    project = two_prompt_project
    configs = project.makefile(".toml", load=CONFIGS)
    first, second = project.path / "first.json", project.path / "second.json"
    common = ("suites/test_concurrency.py", "--specdec-config-file", str(configs),
              "--spec-config", "np2", "--specdec-sessions", "2", "--specdec-adaptive",
              "--specdec-concurrency", "1", "--specdec-rounds", "2", "--specdec-baseline-dir",
              "bl", "-rs", *SHORT)  # fmt: skip
    stored = project.runpytest_subprocess(
        *common, "--specdec-update-baselines", "--specdec-results", str(first)
    )
    assert stored.ret == pytest.ExitCode.OK, stored.stdout.str()
    stored.assert_outcomes(passed=2, skipped=1)  # both sessions' level; no baseline to judge
    stored.stdout.fnmatch_lines([
        "np2: bl/*np2--*.json: 0 → 2 sessions; load levels 1 clients",
        "SKIPPED*np2: no baseline for np2 at *; this run creates it",
    ])  # fmt: skip
    (config,) = _results(first)["configs"]
    assert {r["session"] for r in config["extra"]["load"]} == {1, 2}
    # Judged against it, within a budget: the gate runs though its session was skipped (np2
    # has no accept length, so nothing it measures can fail accept-regressed)
    judged = project.runpytest_subprocess(
        *common, "--specdec-max-minutes", "0.001", "--specdec-results", str(second),
        "--specdec-fail-on", "accept-regressed",
    )  # fmt: skip
    assert judged.ret == pytest.ExitCode.OK, judged.stdout.str()
    judged.assert_outcomes(passed=2, skipped=1)
    judged.stdout.fnmatch_lines([
        "SKIPPED*np2: budget: 1 session(s) held the machine * min; another (about * min) would "
        "pass --specdec-max-minutes 0.001",
    ])  # fmt: skip
    (config,) = _results(second)["configs"]
    assert len(config["extra"]["cost"]) == 1 and config["extra"]["cost"][0]["total_s"] > 0
    assert {r["session"] for r in config["extra"]["load"]} == {1}
    (verdict,) = _results(second)["verdicts"]
    assert verdict["load"]["levels"]["1"]["verdict"]["method"] == "welch-provisional"
    # Against no baseline, storing none: no further session could judge anything, so the second
    # is skipped after the first
    unjudged = project.runpytest_subprocess(
        *common, "--specdec-baseline-dir", "none", "--specdec-results", str(project.path / "u.json")
    )  # fmt: skip
    assert unjudged.ret == pytest.ExitCode.OK, unjudged.stdout.str()
    unjudged.assert_outcomes(passed=1, skipped=2)
    unjudged.stdout.fnmatch_lines([
        "SKIPPED*np2: stopped after 1 session(s): no baseline to judge against, and this run "
        "stores none (--specdec-update-baselines stores one)",
    ])  # fmt: skip
