"""When a config's further sessions are skipped (driver/stopping.py): decided verdicts, one
request and load levels alike, and the machine-time budget. The runner's use of it, with a
real engine, is in tests/test_load_llamacpp.py."""

from __future__ import annotations

import pytest

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
