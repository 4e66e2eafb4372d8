"""When a config's further sessions are skipped (driver/stopping.py): decided verdicts, one
request and load levels alike, and the machine-time budget. The runner's use of it, with a
real engine, is in tests/test_load_llamacpp.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.configs import Registry, preset_configs
from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings
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
        assert runner.skip_reason("draft-d4", 1) is None
        assert runner.skip_reason("baseline", 1) is None
        draft.extra["cost"] = [{"total_s": 200.0}]  # 3.3 + 3.3 min > 5
        assert runner.skip_reason("draft-d4", 1) == (
            "draft-d4: budget: 1 session(s) held the machine 3.33 min; another (about 3.33 min)"
            " would pass --specdec-max-minutes 5"
        )
        # the plain config of the A/B stops with the last judged config, not before
        said = runner.skip_reason("baseline", 1)
        assert said == "baseline: the reference; every judged config decided or at its budget"
        draft.extra["cost"] = [{"total_s": 100.0}]
        assert runner.skip_reason("draft-d4", 1) is None
        assert runner.skip_reason("baseline", 1) is None
        # not adaptive: the reference stops on its own budget only
        plain = _runner(tmp_path, max_minutes=5.0, reference="baseline")
        plain.records["draft-d4"].extra["cost"] = [{"total_s": 200.0}]
        assert plain.skip_reason("draft-d4", 1) is not None
        assert plain.skip_reason("baseline", 1) is None
        plain.close()
    finally:
        runner.close()
