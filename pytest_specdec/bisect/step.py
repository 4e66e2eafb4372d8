"""One step of a bisect: the middle candidate and the bad endpoint measured against the good
candidate in interleaved server sessions (good, candidate, bad, good, candidate, bad, ...),
looked at on the sequential plan's looks: the bad endpoint judged by the verdict engine, the
candidate placed on one side of the step (:mod:`pytest_specdec.bisect.place`).

Sessions go where they are needed: a candidate of a large step is placed at the first look
(two sessions a side), one of a small step takes more looks, up to the plan's last; a
candidate not placed there is skipped, as ``git bisect skip`` does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from pytest_specdec.bisect.candidates import BisectError
from pytest_specdec.bisect.place import NEARER_BAD, NEARER_GOOD, place
from pytest_specdec.bisect.search import BAD, GOOD, SKIP
from pytest_specdec.verdict.judge import Judgement
from pytest_specdec.verdict.planning import SequentialPlan, sequential_plan
from pytest_specdec.verdict.stats import Outcome, Verdict, VerdictPolicy

FIRST_LOOK = 2  # Welch on session means needs two sessions a side
BOOT_FAILED = "BOOT-FAILED"
UNJUDGEABLE = "UNJUDGEABLE"
NOT_SLOWER = "NOT-SLOWER"  # INCONCLUSIVE, but the CI's lower end is above 1 - δ
NOT_PLACED = "NOT-PLACED"  # a candidate on neither side of the step at the last look: skipped
CANDIDATE, BAD_ENDPOINT = "candidate", "bad endpoint"


class BootFailed(Exception):
    """A candidate's server did not boot (or its build failed); the text has the log tail."""


class Measurer(Protocol):
    """What a step needs from a machine (or from the simulation in bench/bisect_sim.py)."""

    def start_step(self, index: int, names: Sequence[str]) -> None: ...

    def session(self, name: str) -> float: ...  # one server session; seconds; BootFailed

    def judge(self, name: str, good: str, policy: VerdictPolicy) -> Judgement: ...

    def session_logs(self, name: str) -> list[float]: ...  # ln of each session's suite score

    def end_step(self) -> None: ...


def looks_for(max_sessions: int) -> tuple[int, ...]:
    """Looks at 2, 3, 4, 6, 8, 12, 16, ... sessions a side, ending at ``max_sessions``."""
    if max_sessions < FIRST_LOOK:
        raise BisectError(
            f"--max-sessions {max_sessions}: a step compares session means, which needs at "
            f"least {FIRST_LOOK} sessions a side; give --max-sessions {FIRST_LOOK} or more"
        )
    looks, k = [2, 3], 4
    while k < max_sessions:
        looks += [k, k + k // 2]
        k *= 2
    return (*sorted({x for x in looks if x < max_sessions}), max_sessions)


@dataclass(frozen=True)
class StepPlan:
    """The sequential plan of every comparison of a step, and the policy it judges with."""

    sequential: SequentialPlan
    base: VerdictPolicy

    @property
    def looks(self) -> tuple[int, ...]:
        return self.sequential.looks

    @property
    def policy(self) -> VerdictPolicy:
        return self.sequential.policy(self.base)

    @property
    def endpoint_policy(self) -> VerdictPolicy:
        """The bad endpoint's: its UNCHANGED (TOST) and NOT-SLOWER (the CI's lower end above
        1 - δ) stop the plan as REGRESSED does, so they too are judged at the per-look alpha,
        with a CI at 1 - 2·alpha (99.6% for looks up to 32 sessions), not at the 90% CI that
        a single look uses: repeated at every look, that one would call a real drop fine too
        often."""
        policy = self.policy
        return replace(policy, ci_level=1 - 2 * policy.alpha)

    def done(self, judgement: Judgement) -> bool:
        suite = judgement.suite
        return suite is None or self.sequential.stop(suite) or not_slower(suite)


def not_slower(v: Verdict) -> bool:
    """No drop of δ or more: the CI's lower end (a one-sided test at (1 - ci_level)/2, the
    lower half of the verdict engine's TOST) lies above 1 - δ. A bisect for a regression
    needs no more: a candidate faster than the good one by more than δ is not the culprit."""
    return v.outcome is Outcome.INCONCLUSIVE and v.ci_low > 1 - v.delta


def step_plan(base: VerdictPolicy, max_sessions: int) -> StepPlan:
    """Welch looks on session means at one calibrated per-look alpha. No futility stop: a
    candidate that reads faster is not yet shown to be within δ of the good one."""
    plan = sequential_plan(base, looks_for(max_sessions), kind="welch")
    return StepPlan(replace(plan, futility=None), base)


def _accept_change(judgement: Judgement) -> float | None:
    pairs = [(a.get("new"), a.get("reference")) for a in judgement.accept.values()]
    logs = [math.log(n / r) for n, r in pairs if n and r]
    return math.exp(statistics.fmean(logs)) - 1 if logs else None


def _accept_mean(judgement: Judgement, side: str) -> float | None:
    """Geometric mean over prompts of one side's accept length (None where none reported)."""
    values = [float(v) for a in judgement.accept.values() if (v := a.get(side))]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarize(judgement: Judgement) -> dict[str, Any]:
    """What a step keeps of a judgement: the suite verdict's numbers, accept length, cause."""
    v: Verdict | None = judgement.suite
    return {
        "outcome": judgement.outcome,
        "ratio": v.ratio if v else None,
        "ci_low": v.ci_low if v else None,
        "ci_high": v.ci_high if v and math.isfinite(v.ci_high) else None,
        "ci_level": v.ci_level if v else None,
        "p_regress": v.p_regress if v else None,
        "delta": v.delta if v else None,
        "se_log": v.se_log if v and math.isfinite(v.se_log) else None,
        "df": v.df if v else None,
        "accept_change": _accept_change(judgement),
        "accept_new": _accept_mean(judgement, "new"),
        "accept_reference": _accept_mean(judgement, "reference"),
        "cause": judgement.cause,
        "explanation": judgement.message,
    }


@dataclass
class Check:
    """One comparison of a step: ``name`` against the good candidate."""

    name: str
    role: str  # CANDIDATE | BAD_ENDPOINT
    sessions: int = 0
    seconds: float = 0.0
    outcome: str | None = None  # a verdict outcome, BOOT_FAILED or UNJUDGEABLE
    verdict: dict[str, Any] | None = None
    detail: str | None = None  # why it could not be judged (a boot's log tail)

    @property
    def mark(self) -> str:
        if self.outcome in (Outcome.REGRESSED.value, NEARER_BAD):
            return BAD
        if self.outcome in (Outcome.UNCHANGED.value, Outcome.IMPROVED.value, NOT_SLOWER,
                            NEARER_GOOD):  # fmt: skip
            return GOOD
        return SKIP


@dataclass
class StepRecord:
    """A finished step, as the state file keeps it."""

    index: int
    good: str
    good_sessions: int = 0
    good_seconds: float = 0.0
    checks: list[Check] = field(default_factory=list)

    def check(self, role: str) -> Check | None:
        return next((c for c in self.checks if c.role == role), None)

    @property
    def seconds(self) -> float:
        return self.good_seconds + sum(c.seconds for c in self.checks)

    @property
    def sessions(self) -> int:
        return self.good_sessions + sum(c.sessions for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRecord:
        checks = [Check(**c) for c in data.get("checks", [])]
        return cls(data["index"], data["good"], data["good_sessions"], data["good_seconds"], checks)


def _session(m: Measurer, step: StepRecord, check: Check) -> bool:
    """One more session of ``check``'s candidate; False (and the check closed) if it fails."""
    try:
        check.seconds += m.session(check.name)
    except BootFailed as exc:
        if check.role == BAD_ENDPOINT:
            raise BisectError(
                f"the bad endpoint {check.name} did not boot at step {step.index}: {exc}\n"
                "fix: pick another --bad, or repair that candidate's server/env/args"
            ) from None
        check.outcome, check.detail = BOOT_FAILED, str(exc)
        return False
    check.sessions += 1
    return True


def _judge(m: Measurer, policy: VerdictPolicy, good: str, check: Check) -> Judgement | None:
    """``check``'s verdict against the good candidate, kept on the check; None (and the check
    closed as UNJUDGEABLE) when no verdict can be given."""
    judgement = m.judge(check.name, good, policy)
    check.verdict = summarize(judgement)
    if judgement.suite is None:
        check.outcome, check.detail = UNJUDGEABLE, judgement.message
        return None
    check.outcome = judgement.outcome
    return judgement


def _look_bad(m: Measurer, plan: StepPlan, good: str, bad: Check) -> bool:
    """The bad endpoint's own verdict against δ; True when its comparison is finished."""
    judgement = _judge(m, plan.endpoint_policy, good, bad)
    if judgement is None:
        return True
    assert judgement.suite is not None
    if not_slower(judgement.suite):
        bad.outcome = NOT_SLOWER
    return plan.done(judgement)


def _look_candidate(
    m: Measurer, plan: StepPlan, good: str, cand: Check, bad: Check, known: bool, last: bool
) -> bool:
    """Place the candidate on the good or the bad side of the step
    (:func:`pytest_specdec.bisect.place.place`); True when that is done, or at the last look
    (NOT-PLACED: skipped). ``known``: the step was shown in an earlier step of the bisect;
    otherwise the candidate is placed once the bad endpoint reads REGRESSED in this one."""
    if _judge(m, plan.policy, good, cand) is None:
        return True
    assert cand.verdict is not None
    if known or bad.outcome == Outcome.REGRESSED.value:
        g, c, b = (m.session_logs(name) for name in (good, cand.name, bad.name))
        found = place(g, c, b, plan.policy.alpha, last=last)
        if found is not None:
            cand.verdict["placement"] = found.to_dict()
            if found.side is not None:
                cand.outcome = found.side
                return True
    if last:
        cand.outcome = NOT_PLACED
    return last


def _good_session(m: Measurer, step: StepRecord) -> None:
    try:
        step.good_seconds += m.session(step.good)
    except BootFailed as exc:
        raise BisectError(
            f"the good endpoint {step.good} did not boot at step {step.index}: {exc}\n"
            "fix: pick another --good, or repair that candidate's server/env/args"
        ) from None
    step.good_sessions += 1


def run_step(
    m: Measurer, plan: StepPlan, index: int, good: str, candidate: str | None, bad: str,
    confirm_bad: bool,
) -> StepRecord:  # fmt: skip
    """Measure ``candidate`` (if any) and ``bad`` against ``good``. With ``confirm_bad`` the
    bad endpoint's comparison runs to its own stop; otherwise it rides along with the
    candidate's sessions and closes with it (or earlier, once decided)."""
    step = StepRecord(index, good)
    cand = Check(candidate, CANDIDATE) if candidate is not None else None
    check_bad = Check(bad, BAD_ENDPOINT)
    step.checks = [c for c in (cand, check_bad) if c is not None]
    m.start_step(index, [good, *(c.name for c in step.checks)])
    try:
        _measure(m, plan, step, cand, check_bad, confirm_bad or cand is None)
    finally:
        m.end_step()
    return step


def _measure(
    m: Measurer, plan: StepPlan, step: StepRecord, cand: Check | None, bad: Check,
    confirm_bad: bool,
) -> None:  # fmt: skip
    """Sessions G C B G C B ... with a look at each of the plan's counts: the bad endpoint
    first, then the candidate against it. The first step confirms the bad endpoint (to its
    own stop; a bad endpoint that does not regress ends the step); later steps know the step
    and measure the bad endpoint as long as the candidate."""
    open_ = [c for c in (cand, bad) if c is not None]
    k = 0
    while open_:
        k += 1
        _good_session(m, step)
        open_ = [c for c in open_ if _session(m, step, c)]
        if k in plan.looks:
            bad_done = bad in open_ and _look_bad(m, plan, step.good, bad)
            if confirm_bad and bad_done and bad.outcome != Outcome.REGRESSED.value:
                if cand in open_:
                    cand.outcome = NOT_PLACED  # nothing to place it against
                return
            last = k == plan.looks[-1]
            known = not confirm_bad
            if (
                cand is not None
                and cand in open_
                and _look_candidate(m, plan, step.good, cand, bad, known, last)
            ):
                open_.remove(cand)
            if bad_done and cand not in open_:  # the bad endpoint rides along with the candidate
                open_.remove(bad)
        if not confirm_bad and bad in open_ and cand not in open_:
            if k not in plan.looks and bad.sessions >= FIRST_LOOK:
                _look_bad(m, plan, step.good, bad)  # judged with the sessions it has
            open_.remove(bad)
