"""When a config's further server sessions are skipped: once its verdicts are decided
(``--specdec-adaptive``), or once another session would take its machine time past a budget
(``--specdec-max-minutes``).

A config's verdicts are what its run measured: the one-request verdict (tok/s) where it ran
prompts, and the throughput verdict of every load level it ran. It is decided when each of them
is UNCHANGED, IMPROVED or REGRESSED; a missing verdict (no baseline yet, a failed level) is not
decided, since further sessions are what a first baseline is stored from. Under
``--specdec-reference`` the plain config is the other side of every A/B, so it runs on while
any judged config does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_specdec.verdict.judge import Judgement
from pytest_specdec.verdict.stats import Outcome, Verdict

__all__ = ["budget_reason", "decided_reason", "pending"]


def _open(verdict: Verdict | None) -> bool:
    return verdict is None or verdict.outcome is Outcome.INCONCLUSIVE


def pending(judgement: Judgement, one_request: bool, levels: Iterable[int]) -> list[str]:
    """What of a config's verdict still wants sessions: ``"tok/s"`` when its one-request runs
    were measured (``one_request``) and that verdict is open, and ``"N clients"`` for each
    measured load level (``levels``) whose throughput verdict is. Empty: every one decided."""
    out = ["tok/s"] if one_request and _open(judgement.suite) else []
    judged = judgement.load.levels if judgement.load is not None else {}
    for clients in sorted(set(levels)):
        level = judged.get(clients)
        if level is None or _open(level.verdict):
            out.append(f"{clients} clients")
    return out


def decided_reason(judgement: Judgement, one_request: bool, levels: Iterable[int],
                   sessions: int) -> str | None:  # fmt: skip
    """The skip message once nothing is pending, naming each verdict; else None (also when
    the sessions measured nothing: there is nothing to decide)."""
    measured = sorted(set(levels))
    if not (one_request or measured) or pending(judgement, one_request, measured):
        return None
    said = [f"tok/s {judgement.outcome}"] if one_request else []
    if measured and judgement.load is not None:
        said.append(f"load levels {judgement.load.outcomes()}")
    return f"{judgement.config}: decided after {sessions} session(s): {'; '.join(said)}"


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
