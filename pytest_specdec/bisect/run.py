"""The search: steps until the first bad candidate is named, none is found, or the evidence
cannot decide; a conclusion drawn from the finished steps alone, so a resumed bisect reaches
the same one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specdec.bisect.candidates import Candidate
from pytest_specdec.bisect.search import BAD, Bounds, bounds, next_index, suspects
from pytest_specdec.bisect.step import (
    BAD_ENDPOINT,
    CANDIDATE,
    NOT_PLACED,
    NOT_SLOWER,
    Measurer,
    StepPlan,
    StepRecord,
    run_step,
)
from pytest_specdec.verdict.stats import Outcome

FOUND, NONE, UNDECIDED = "found", "none", "undecided"
FINE = (Outcome.UNCHANGED.value, Outcome.IMPROVED.value, NOT_SLOWER)


@dataclass(frozen=True)
class Search:
    candidates: Sequence[Candidate]
    good: int
    bad: int

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.candidates]


@dataclass
class Conclusion:
    status: str  # FOUND | NONE | UNDECIDED
    reason: str
    first_bad: str | None = None
    verdict: dict[str, Any] | None = None
    suspects: list[str] = field(default_factory=list)


def marks(search: Search, steps: Sequence[StepRecord]) -> dict[int, str]:
    """Each measured candidate's mark (good, bad or skip); a later step overrides."""
    out: dict[int, str] = {}
    for step in steps:
        check = step.check(CANDIDATE)
        if check is not None:
            out[search.names.index(check.name)] = check.mark
    return out


def current_bounds(search: Search, steps: Sequence[StepRecord]) -> Bounds:
    return bounds(search.good, search.bad, marks(search, steps))


def _latest_regressed(name: str, steps: Sequence[StepRecord]) -> dict[str, Any] | None:
    """The verdict to report for the first bad: its latest as a candidate (90% CI), else its
    latest as the bad endpoint (CI at the plan's per-look alpha)."""
    found = [
        (c.role == CANDIDATE, s.index, c.verdict) for s in steps for c in s.checks
        if c.name == name and c.mark == BAD and c.verdict is not None
    ]  # fmt: skip
    return max(found, key=lambda f: (f[0], f[1]))[2] if found else None


def _endpoint_problem(search: Search, steps: Sequence[StepRecord]) -> Conclusion | None:
    """The bad endpoint must reproduce at step 1 and must not turn fine later."""
    first = steps[0].check(BAD_ENDPOINT)
    good = search.names[search.good]
    assert first is not None  # every step checks the bad endpoint
    text = (first.verdict or {}).get("explanation") or first.detail or "not judged"
    if first.outcome in FINE:
        return Conclusion(NONE, f"the bad endpoint {first.name} does not regress against the "
                          f"good one {good}: {text}")  # fmt: skip
    if first.outcome != Outcome.REGRESSED.value:
        return Conclusion(UNDECIDED, f"the bad endpoint {first.name} could not be confirmed "
                          f"against {good} in {first.sessions} sessions a side: {text}; "
                          "raise --max-sessions, or bisect on a quieter machine")  # fmt: skip
    for step in steps[1:]:
        check = step.check(BAD_ENDPOINT)
        if check is not None and check.outcome in FINE:
            return Conclusion(UNDECIDED, f"{check.name}, judged bad before, reads "
                              f"{check.outcome} against {good} at step {step.index}: the "
                              "measurements disagree (noise, or the machine changed); rerun "
                              "with a larger --max-sessions")  # fmt: skip
    return None


def retry_index(search: Search, steps: Sequence[StepRecord], b: Bounds) -> int | None:
    """Once only skipped candidates are left: the one nearest the middle that was not placed
    in its only step (a fresh step with today's endpoints is a fresh draw of the noise; a
    candidate that did not boot or could not be judged is not retried)."""
    tries: dict[str, list[str | None]] = {}
    for step in steps:
        check = step.check(CANDIDATE)
        if check is not None:
            tries.setdefault(check.name, []).append(check.outcome)
    again = [i for i in b.skipped if tries.get(search.names[i]) == [NOT_PLACED]]
    mid = (b.lo + b.hi) // 2
    return min(again, key=lambda i: (abs(i - mid), i)) if again else None


def next_candidate(search: Search, steps: Sequence[StepRecord]) -> int | None:
    """The candidate the next step measures: the middle of the range, else a skipped one
    worth a second step; None when nothing is left to measure."""
    b = current_bounds(search, steps)
    nxt = next_index(b)
    return nxt if nxt is not None else retry_index(search, steps, b)


def conclude(search: Search, steps: Sequence[StepRecord]) -> Conclusion | None:
    """What the finished steps establish; None while another step is needed."""
    if not steps:
        return None
    problem = _endpoint_problem(search, steps)
    if problem is not None:
        return problem
    b = current_bounds(search, steps)
    if next_candidate(search, steps) is not None:
        return None
    names = search.names
    if b.skipped:
        listed = [names[i] for i in suspects(b)]
        return Conclusion(UNDECIDED, "only skipped candidates are left: the first bad is one "
                          f"of {', '.join(listed)}", suspects=listed)  # fmt: skip
    first = names[b.hi]
    reason = f"{names[b.lo]} is the last good candidate and {first} the first bad"
    return Conclusion(FOUND, reason, first, _latest_regressed(first, steps), [first])


def bisect(
    search: Search, measurer: Measurer, plan: StepPlan, steps: list[StepRecord],
    save: Callable[[list[StepRecord]], None],
) -> Conclusion:  # fmt: skip
    """Run steps after the finished ``steps`` until a conclusion; ``save`` after each."""
    names = search.names
    while (done := conclude(search, steps)) is None:
        b = current_bounds(search, steps)
        nxt = next_candidate(search, steps)
        candidate = names[nxt] if nxt is not None else None
        step = run_step(
            measurer, plan, len(steps) + 1, names[search.good], candidate, names[b.hi],
            confirm_bad=not steps,
        )  # fmt: skip
        steps.append(step)
        save(steps)
    return done
