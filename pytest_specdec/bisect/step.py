"""One step of a bisect: the middle candidate and the bad endpoint measured against the good
candidate in interleaved server sessions (good, candidate, bad, good, candidate, bad, ...),
each judged by the verdict engine at the looks of its sequential plan.

Sessions go where they are needed: a candidate far from the threshold is decided at the first
look (two sessions a side), one near it takes more looks, up to the plan's last; a candidate
still INCONCLUSIVE there is skipped, as ``git bisect skip`` does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from pytest_specdec.bisect.candidates import BisectError
from pytest_specdec.bisect.search import BAD, GOOD, SKIP
from pytest_specdec.verdict.judge import Judgement
from pytest_specdec.verdict.numbers import t_cdf
from pytest_specdec.verdict.planning import SequentialPlan, sequential_plan
from pytest_specdec.verdict.stats import Outcome, Verdict, VerdictPolicy

FIRST_LOOK = 2  # Welch on session means needs two sessions a side
BOOT_FAILED = "BOOT-FAILED"
UNJUDGEABLE = "UNJUDGEABLE"
NOT_SLOWER = "NOT-SLOWER"  # INCONCLUSIVE, but the CI's lower end is above 1 - δ
NEARER_GOOD = "NEARER-GOOD"  # significantly above the midpoint between good and bad endpoint
NEARER_BAD = "NEARER-BAD"  # significantly below it
CANDIDATE, BAD_ENDPOINT = "candidate", "bad endpoint"


class BootFailed(Exception):
    """A candidate's server did not boot (or its build failed); the text has the log tail."""


class Measurer(Protocol):
    """What a step needs from a machine (or from the simulation in bench/bisect_sim.py)."""

    def start_step(self, index: int, names: Sequence[str]) -> None: ...

    def session(self, name: str) -> float: ...  # one server session; seconds; BootFailed

    def judge(self, name: str, good: str, policy: VerdictPolicy) -> Judgement: ...

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


def _look(m: Measurer, plan: StepPlan, good: str, check: Check, bad: Check | None = None) -> bool:
    """Judge ``check`` now; True when its comparison is finished. A candidate is first placed
    on the good or the bad side of the step (see :func:`nearer`), where the bad endpoint has
    been judged REGRESSED; else by its own verdict against δ."""
    judgement = m.judge(check.name, good, plan.policy)
    check.verdict = summarize(judgement)
    check.outcome = judgement.outcome if judgement.suite else UNJUDGEABLE
    if judgement.suite is None:
        check.detail = judgement.message
        return True
    side = nearer(check.verdict, bad, plan.policy.alpha) if bad is not None else None
    if side is not None:
        check.outcome = side
        return True
    if not_slower(judgement.suite):
        check.outcome = NOT_SLOWER
    return plan.done(judgement)


def nearer(cand: dict[str, Any], bad: Check, alpha: float) -> str | None:
    """Which side of the step the candidate is on: its log ratio against the good candidate,
    tested one-sidedly against the midpoint between the good (0) and the bad endpoint's log
    ratio, at the plan's per-look alpha (the two estimates' variances added, the midpoint's a
    quarter of the bad endpoint's; Welch-Satterthwaite df). None while neither side is shown,
    or when the bad endpoint is not (yet) judged REGRESSED; the candidate's own verdict
    against δ decides then."""
    b = bad.verdict or {}
    if bad.outcome != Outcome.REGRESSED.value or not b.get("se_log") or not cand.get("se_log"):
        return None
    mid = math.log(b["ratio"]) / 2
    var_c, var_b = cand["se_log"] ** 2, b["se_log"] ** 2 / 4
    se = math.sqrt(var_c + var_b)
    t = (math.log(cand["ratio"]) - mid) / se
    df_c, df_b = max(cand.get("df") or 1.0, 1.0), max(b.get("df") or 1.0, 1.0)
    df = (var_c + var_b) ** 2 / (var_c**2 / df_c + var_b**2 / df_b)
    if t_cdf(-t, df) < alpha:
        return NEARER_GOOD
    if t_cdf(t, df) < alpha:
        return NEARER_BAD
    return None


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
    open_ = [c for c in (cand, bad) if c is not None]
    k = 0
    while open_:
        k += 1
        _good_session(m, step)
        open_ = [c for c in open_ if _session(m, step, c)]
        if k in plan.looks:  # the bad endpoint first: the candidate is placed against it
            bad_done = bad in open_ and _look(m, plan, step.good, bad)
            if cand in open_ and _look(m, plan, step.good, cand, bad):  # type: ignore[arg-type]
                open_.remove(cand)  # type: ignore[arg-type]
            if bad_done and cand not in open_:  # the bad endpoint rides along with the candidate
                open_.remove(bad)
        if not confirm_bad and bad in open_ and cand not in open_:
            if k not in plan.looks and bad.sessions >= FIRST_LOOK:
                _look(m, plan, step.good, bad)  # judged with the sessions it has
            open_.remove(bad)
