"""When a config's further sessions are skipped (driver/stopping.py): decided verdicts, one
request and load levels alike, and the machine-time budget. The runner's use of it, with a
real engine, is in tests/test_load_llamacpp.py."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.configs import Registry, preset_configs
from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.core.values import positive_float
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings, speedup_curves
from pytest_specdec.driver.stopping import budget_reason, decided_reason, pending
from pytest_specdec.verdict.judge import Judgement
from pytest_specdec.verdict.load import LevelJudgement, LoadJudgement
from pytest_specdec.verdict.stats import Outcome, Verdict, VerdictPolicy, welch_log

POLICY = VerdictPolicy()
SAME = welch_log([99.0, 100.0, 101.0] * 4, [99.0, 100.0, 101.0] * 4, POLICY)
UNSURE = welch_log([90.0, 100.0, 110.0], [90.0, 100.0, 110.0], POLICY)
SLOWER = welch_log([79.0, 80.0, 81.0] * 4, [99.0, 100.0, 101.0] * 4, POLICY)


def _judgement(suite: Verdict | None, levels: dict[int, Verdict | None]) -> Judgement:
    load = LoadJudgement("judged", "", "baseline x", {
        c: LevelJudgement(c, v, "") for c, v in levels.items()
    })  # fmt: skip
    return Judgement("cfg", "judged", "", "baseline x", suite=suite, load=load)


def test_the_verdicts_used_here_are_what_their_names_say() -> None:
    assert SAME.outcome is Outcome.UNCHANGED
    assert UNSURE.outcome is Outcome.INCONCLUSIVE
    assert SLOWER.outcome is Outcome.REGRESSED


def test_every_measured_verdict_must_be_decided() -> None:
    j = _judgement(SAME, {1: SAME, 16: UNSURE, 64: SLOWER})
    assert pending(j, True, [1, 16, 64]) == ["16 clients"]
    assert decided_reason(j, True, [1, 16, 64], 2) is None
    # a level judged but not measured tonight is not asked for; one measured but unjudged is
    assert pending(j, True, [1, 64]) == []
    assert pending(j, False, [1, 4]) == ["4 clients"]


def test_an_open_one_request_verdict_keeps_sessions_coming() -> None:
    j = _judgement(UNSURE, {1: SAME})
    assert pending(j, True, [1]) == ["tok/s"]
    assert pending(j, False, [1]) == []  # a load-only run: the suite verdict is not its
    missing = _judgement(None, {})  # no baseline yet: sessions are what one is stored from
    assert pending(missing, True, []) == ["tok/s"]
    assert pending(missing, False, [4]) == ["4 clients"]


def test_the_decided_message_names_each_verdict() -> None:
    j = _judgement(SAME, {1: SAME, 64: SLOWER})
    said = decided_reason(j, True, [64, 1], 3)
    assert said == (
        "cfg: decided after 3 session(s): tok/s UNCHANGED; load levels UNCHANGED at 1; "
        "REGRESSED at 64"
    )
    assert decided_reason(_judgement(None, {}), False, [], 1) is None  # nothing measured


@pytest.mark.parametrize(
    ("held_s", "limit", "skipped"),
    [
        ([], 15.0, False),  # nothing finished: the first session always runs
        ([{"total_s": None}], 15.0, False),  # a session still running
        ([{"total_s": 240.0}, {"total_s": 300.0}], 15.0, False),  # 9 + 4.5 <= 15
        ([{"total_s": 240.0}, {"total_s": 300.0}, {"total_s": 270.0}], 15.0, True),  # 13.5+4.5
        ([{"total_s": 61.0}], 2.0, True),
    ],
)
def test_the_budget_counts_the_next_session_at_the_mean_of_those_held(
    held_s: list[dict[str, float | None]], limit: float, skipped: bool
) -> None:
    said = budget_reason("cfg", held_s, limit)
    assert (said is not None) is skipped
    if said is not None:
        assert said.startswith("cfg: budget: ") and f"--specdec-max-minutes {limit:g}" in said


def _runner(tmp_path: Path, **settings: Any) -> Runner:
    options = RunSettings(
        results_path=tmp_path / "r.json", log_dir=tmp_path, baseline_dir=tmp_path / "bl",
        engine="llamacpp", config_names=("baseline", "draft-d4"), **settings,
    )  # fmt: skip
    runner = Runner(options, Registry(preset_configs()), SuiteSettings(), load_workload("seed"))
    for cfg in runner.configs:
        runner.records[cfg.name] = ConfigRecord(cfg.name, cfg.engine, cfg.to_dict())
    return runner


def test_the_runner_asks_the_budget_first_and_the_reference_waits_for_the_others(
    tmp_path: Path,
) -> None:
    runner = _runner(tmp_path, adaptive=True, max_minutes=5.0, reference="baseline")
    try:
        draft = runner.records["draft-d4"]
        # nothing measured, nothing over budget: both boot again
        assert runner.skip_reason("draft-d4") is None
        assert runner.skip_reason("baseline") is None
        draft.extra["cost"] = [{"total_s": 200.0}]  # 3.3 + 3.3 min > 5
        assert runner.skip_reason("draft-d4") == (
            "draft-d4: budget: 1 session(s) held the machine 3.33 min; another (about 3.33 min)"
            " would pass --specdec-max-minutes 5"
        )
        # the plain config of the A/B stops with the last judged config, not before
        said = runner.skip_reason("baseline")
        assert said == "baseline: the plain config of draft-d4, each of them stopped"
        draft.extra["cost"] = [{"total_s": 100.0}]
        assert runner.skip_reason("draft-d4") is None
        assert runner.skip_reason("baseline") is None
        # not adaptive: the reference stops on its own budget only
        plain = _runner(tmp_path, max_minutes=5.0, reference="baseline")
        plain.records["draft-d4"].extra["cost"] = [{"total_s": 200.0}]
        assert plain.skip_reason("draft-d4") is not None
        assert plain.skip_reason("baseline") is None
        plain.close()
    finally:
        runner.close()


def test_a_target_mde_keeps_a_verdict_of_no_change_open_until_it_is_reached() -> None:
    assert 0.01 < SAME.mde < 0.05  # twelve runs a side at 1% noise
    j = _judgement(SAME, {1: SAME, 64: SLOWER})
    assert pending(j, True, [1, 64], target_mde=0.05) == []
    assert pending(j, True, [1, 64], target_mde=0.01) == ["tok/s", "1 clients"]  # 64: found
    assert decided_reason(j, True, [1, 64], 2, target_mde=0.01) is None


def test_a_target_mde_without_adaptive_sessions_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--specdec-target-mde", "0.05", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--specdec-target-mde 0.05 decides when adaptive sessions "
            "stop; add --specdec-adaptive (and --specdec-sessions N)"
        ]
    )


def test_adaptive_sessions_with_one_session_are_named_in_the_header(
    pytester: pytest.Pytester,
) -> None:
    """Accepted (a nightly matrix passes one set of flags to every config), and said."""
    pytester.makepyfile("def test_x():\n    pass\n")
    alone = pytester.runpytest("--specdec-adaptive", "-p", "no:cacheprovider")
    assert alone.ret == pytest.ExitCode.OK
    alone.stdout.fnmatch_lines(
        ["specdec: --specdec-adaptive stops sessions early, and --specdec-sessions 1 boots one:*"]
    )
    several = pytester.runpytest(
        "--specdec-adaptive", "--specdec-sessions", "3", "-p", "no:cacheprovider"
    )
    assert several.ret == pytest.ExitCode.OK
    assert "has nothing to stop" not in several.stdout.str()


def test_a_budget_with_a_server_given_by_url_is_refused(pytester: pytest.Pytester) -> None:
    """The plugin boots nothing there, so a budget of its sessions' machine time would be
    silently ignored."""
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(
        "--specdec-max-minutes", "15", "--specdec-server-url", "http://127.0.0.1:8080",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--specdec-max-minutes 15 budgets the machine time of the server sessions the plugin "
        "boots; with --specdec-server-url it boots none (the server's time is yours to budget): "
        "drop one of the two"
    ])  # fmt: skip


def test_the_target_holds_the_mde_the_report_states_not_the_gates() -> None:
    """The gate judges at a Bonferroni alpha (a wider MDE); the report at the run's own."""
    strict = welch_log(
        [99.0, 100.0, 101.0] * 4, [99.0, 100.0, 101.0] * 4, VerdictPolicy(alpha=1e-6)
    )
    assert strict.outcome is Outcome.UNCHANGED and strict.mde > SAME.mde
    gate, report = _judgement(None, {1: strict}), _judgement(None, {1: SAME})
    target = (SAME.mde + strict.mde) / 2
    assert pending(gate, False, [1], target) == ["1 clients"]
    assert pending(gate, False, [1], target, reported=report) == []
    said = decided_reason(gate, False, [1], 2, target, reported=report)
    assert said is not None and said.endswith(f"(no change: MDE {target:.1%} or less)")


@pytest.mark.parametrize(("given", "message"), [
    ("nan", "'nan' is not a finite number; give e.g. 5"),
    ("inf", "'inf' is not a finite number; give e.g. 5"),
    ("0", "'0' must be greater than 0"),
    ("soon", "'soon' is not a number; give e.g. 5"),
])  # fmt: skip
def test_a_budget_that_is_not_a_positive_finite_number_is_refused(given: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        positive_float(given)


def test_the_plain_config_of_a_speedup_curve_waits_for_it_without_a_reference(
    tmp_path: Path,
) -> None:
    """No --specdec-reference: the speedup curve of draft-d4's load levels is taken against
    baseline, the run's plain config, which therefore runs on while draft-d4 does; and draft-d4
    boots two sessions at least, so that its speedup has sessions a side."""
    runner = _runner(tmp_path, adaptive=True, max_minutes=5.0)
    try:
        for name in ("baseline", "draft-d4"):
            runner.records[name].extra["load"] = [{"clients": 1, "round": 1}]
        assert speedup_curves(runner.document()) == {"draft-d4": "baseline"}
        runner.records["baseline"].extra["cost"] = [{"total_s": 200.0}]
        assert runner.skip_reason("baseline") is not None  # its own budget comes first
        runner.records["baseline"].extra["cost"] = []
        assert runner.skip_reason("baseline") is None  # draft-d4 runs on
        runner.records["draft-d4"].extra["cost"] = [{"total_s": 200.0}]
        assert runner.skip_reason("baseline") == (
            "baseline: the plain config of draft-d4, each of them stopped"
        )
        runner.records["draft-d4"].extra["cost"] = []
        runner.records["draft-d4"].extra["sessions"] = [{"session": 1}]
        assert runner.skip_reason("draft-d4") is None  # one session: its speedup is pooled
    finally:
        runner.close()


def test_a_verdict_on_pooled_runs_decides_nothing() -> None:
    """One session a side, or a short history with no spread to borrow: Welch on the pooled
    runs, which cannot tell boots apart, so however sure it reads, more sessions are wanted."""
    pooled = welch_log([79.0, 80.0, 81.0] * 4, [99.0, 100.0, 101.0] * 4, POLICY, provisional=True)
    assert pooled.outcome is Outcome.REGRESSED and pooled.method == "welch-provisional"
    assert pending(_judgement(None, {16: pooled}), False, [16]) == ["16 clients"]
    assert pending(_judgement(None, {16: SLOWER}), False, [16]) == []


def test_a_baseline_of_another_key_stops_the_config_at_once() -> None:
    """A mismatch fails the gate whatever more sessions measure, so none are booted."""
    j = Judgement("cfg", "mismatch", "baseline key differs: engine_version 1 != 2", "baseline x")
    said = decided_reason(j, True, [], 1)
    assert said == "cfg: stopped after 1 session(s): baseline key differs: engine_version 1 != 2"
    assert decided_reason(j, False, [], 1) is None  # nothing measured: nothing said


def _unbaselined(suite: Verdict | None, load_status: str) -> Judgement:
    """A judgement whose one-request verdict has no baseline (``suite`` None) or one, and whose
    load levels are judged or (``load_status`` no-baseline) not."""
    levels = {16: LevelJudgement(16, SAME, "")} if load_status == "judged" else {}
    load = LoadJudgement(load_status, "", "baseline x", levels)
    status = "no-baseline" if suite is None else "judged"
    return Judgement("cfg", status, "no baseline for cfg", "baseline x", suite=suite, load=load)


def test_a_part_with_no_baseline_stops_sessions_only_where_the_run_stores_none() -> None:
    """Storing, sessions are what a first baseline is made of; storing none, no session of the
    run can give a verdict to a part that has no baseline, so it is not waited for."""
    nothing = _unbaselined(None, "no-baseline")
    assert pending(nothing, True, [16]) == ["tok/s", "16 clients"]
    assert decided_reason(nothing, True, [16], 1) is None
    assert pending(nothing, True, [16], stores=False) == []
    assert decided_reason(nothing, True, [16], 1, stores=False) == (
        "cfg: stopped after 1 session(s): no baseline to judge against, and this run stores "
        "none (--specdec-update-baselines stores one)"
    )
    # one part judged: the other is left out, and the message says which had none
    levels_only = _unbaselined(None, "judged")
    assert decided_reason(levels_only, True, [16], 2, stores=False) == (
        "cfg: decided after 2 session(s): tok/s no baseline; load levels UNCHANGED at 16"
    )
    suite_only = _unbaselined(SAME, "no-baseline")
    assert decided_reason(suite_only, True, [16], 2, stores=False) == (
        "cfg: decided after 2 session(s): tok/s UNCHANGED; load levels no baseline"
    )
    # a part with a baseline that is still open keeps sessions coming
    open_levels = _unbaselined(None, "judged")
    open_levels.load.levels[16] = LevelJudgement(16, UNSURE, "")  # type: ignore[union-attr]
    assert pending(open_levels, True, [16], stores=False) == ["16 clients"]
