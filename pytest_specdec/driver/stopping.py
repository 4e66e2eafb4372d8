"""When a config's further server sessions are skipped: once its verdicts are decided
(``--specdec-adaptive``), or once another session would take its machine time past a budget
(``--specdec-max-minutes``).

A config's verdicts are what its run measured: the one-request verdict (tok/s) where it ran
prompts, and the throughput verdict of every load level it ran. It is decided when each of them
is UNCHANGED, IMPROVED or REGRESSED with sessions as its unit, and with
``--specdec-target-mde`` when each verdict of no change also has an MDE within it. A missing
verdict (no baseline yet, a failed level) is not decided, since further sessions are what a
first baseline is stored from; nor is a provisional one made on pooled runs (one session a side
in an A/B, a short history with no spread to borrow), which cannot tell boots apart. Where the
run stores no baseline (no ``--specdec-update-baselines``), a part with no baseline to judge
against (the one-request verdict, or the load levels) is left out: no session of this run
gives it one. A config whose baseline was stored under another key (a mismatch, which fails its
gate) stops at once: no further session changes that. Under
``--specdec-reference`` the plain config is the other side of every A/B, so it runs on while
any judged config does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_specdec.verdict.judge import MISMATCH, NO_BASELINE, Judgement
from pytest_specdec.verdict.methods import SESSION_METHODS
from pytest_specdec.verdict.stats import Outcome, Verdict

__all__ = ["budget_reason", "decided_reason", "pending", "undecided", "unjudgeable"]


def undecided(verdict: Verdict | None, target_mde: float | None,
              reported: Verdict | None = None) -> bool:  # fmt: skip
    """Still wants sessions: no verdict, INCONCLUSIVE, or (with ``target_mde``) a verdict of
    no change whose MDE is above it (a change found is decided at any MDE). ``reported``: the
    same verdict as the report states it (at the run's alpha, without the gate's Bonferroni),
    whose MDE the target holds; ``verdict``'s own where not given."""
    if verdict is None or verdict.outcome is Outcome.INCONCLUSIVE:
        return True
    if verdict.provisional and verdict.method not in SESSION_METHODS:
        return True  # on pooled runs (one session, or a short history): boots are not its unit
    if target_mde is None or verdict.outcome in (Outcome.REGRESSED, Outcome.IMPROVED):
        return False
    return (reported or verdict).mde > target_mde


def unjudgeable(judgement: Judgement, stores: bool) -> tuple[bool, bool]:
    """Whether the one-request verdict and the load levels have no baseline that a further
    session of this run could give them: none stored, and the run stores none (``stores``)."""
    if stores:
        return False, False
    load = judgement.load
    return judgement.status == NO_BASELINE, load is not None and load.status == NO_BASELINE


def pending(
    judgement: Judgement, one_request: bool, levels: Iterable[int],
    target_mde: float | None = None, reported: Judgement | None = None, stores: bool = True,
) -> list[str]:  # fmt: skip
    """What of a config's verdict still wants sessions: ``"tok/s"`` when its one-request runs
    were measured (``one_request``) and that verdict is open, and ``"N clients"`` for each
    measured load level (``levels``) whose throughput verdict is. Empty: every one decided.
    ``judgement`` is as the gate judges; ``reported`` as the report states it (undecided).
    A part with no baseline is open only where the run ``stores`` one."""
    shown = reported or judgement
    no_suite, no_load = unjudgeable(judgement, stores)
    out = []
    if one_request and not no_suite and undecided(judgement.suite, target_mde, shown.suite):
        out.append("tok/s")
    if no_load:
        return out
    judged = judgement.load.levels if judgement.load is not None else {}
    stated = shown.load.levels if shown.load is not None else {}
    for clients in sorted(set(levels)):
        level, said = judged.get(clients), stated.get(clients)
        if level is None or undecided(level.verdict, target_mde, said.verdict if said else None):
            out.append(f"{clients} clients")
    return out


def decided_reason(
    judgement: Judgement, one_request: bool, levels: Iterable[int], sessions: int,
    target_mde: float | None = None, reported: Judgement | None = None, stores: bool = True,
) -> str | None:  # fmt: skip
    """The skip message once nothing is pending, naming each verdict; else None (also when
    the sessions measured nothing: there is nothing to decide)."""
    measured = sorted(set(levels))
    stopped = f"{judgement.config}: stopped after {sessions} session(s)"
    if judgement.status == MISMATCH and (one_request or measured):  # no session changes that
        return f"{stopped}: {judgement.message}"
    if not (one_request or measured) or pending(
        judgement, one_request, measured, target_mde, reported, stores
    ):
        return None
    no_suite, no_load = unjudgeable(judgement, stores)
    if (no_suite or not one_request) and (no_load or not measured):
        return (f"{stopped}: no baseline to judge against, and this run stores none "
                "(--specdec-update-baselines stores one)")  # fmt: skip
    said = [f"tok/s {'no baseline' if no_suite else judgement.outcome}"] if one_request else []
    if measured and judgement.load is not None:
        said.append(f"load levels {'no baseline' if no_load else judgement.load.outcomes()}")
    within = f" (no change: MDE {target_mde:.1%} or less)" if target_mde is not None else ""
    return f"{judgement.config}: decided after {sessions} session(s): {'; '.join(said)}{within}"


def held_minutes(costs: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each finished session's machine time in minutes (``extra.cost``'s ``total_s``)."""
    return [float(c["total_s"]) / 60 for c in costs if c.get("total_s") is not None]


def budget_reason(name: str, costs: Sequence[Mapping[str, Any]], limit: float) -> str | None:
    """The skip message when one more session, estimated as the mean of those held so far,
    would take the config's machine time past ``limit`` minutes; else None (also before any
    session finished: the first always runs)."""
    held = held_minutes(costs)
    if not held:
        return None
    total, mean = sum(held), sum(held) / len(held)
    if total + mean <= limit:
        return None
    return (
        f"{name}: budget: {len(held)} session(s) held the machine {total:.2f} min; another "
        f"(about {mean:.2f} min) would pass --specdec-max-minutes {limit:g}"
    )
