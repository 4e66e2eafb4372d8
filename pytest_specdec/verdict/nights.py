"""Nights: a config's stored sessions grouped by the run that measured them.

A *night* is one run of the suite (one ``started_at`` on one host): the mean of its sessions'
suite scores (ln tok/s), its mean accept length, its engine version and commit. History
(verdict/history.py) finds change points over a config's nights; the dashboard draws them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Night:
    """One run's sessions of one config, reduced to what the series needs."""

    started_at: str
    mean_log: float  # mean over the night's sessions of their suite mean ln tok/s
    sessions: int
    accept: float | None  # mean accept length over prompts and sessions
    engine_version: str | None
    commit: str | None
    key: str = ""  # the run's key (night_key): its start, and its host where known


def _session_accept(session: Mapping[str, Any]) -> float | None:
    values = [
        float(c["accept_length"])
        for c in (session.get("prompts") or {}).values()
        if isinstance(c, Mapping) and c.get("accept_length")
    ]
    return statistics.fmean(values) if values else None


def night_start(session: Mapping[str, Any]) -> str:
    """When a stored session's run started (``started_at``; ``added_at`` for an entry stored
    without one)."""
    return str(session.get("started_at") or session.get("added_at") or "")


def night_key(session: Mapping[str, Any]) -> str:
    """The run a stored session belongs to: its start, and its host where it names one, so
    that two runners' jobs started in the same second are two nights. ISO 8601 times in UTC
    first: the keys sort as the nights ran."""
    host = session.get("host")
    return f"{night_start(session)} on {host}" if host else night_start(session)


def has_suite(session: Mapping[str, Any]) -> bool:
    """Whether a stored session has a suite score (the load levels alone may have run)."""
    return (session.get("suite") or {}).get("mean_log") is not None


def by_night(
    sessions: Iterable[Mapping[str, Any]], keep: Callable[[Mapping[str, Any]], bool] = has_suite
) -> dict[str, list[Mapping[str, Any]]]:
    """Baseline session entries grouped by run (:func:`night_key`), those ``keep`` takes (by
    default those with a suite score)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for session in sessions:
        if keep(session):
            groups.setdefault(night_key(session), []).append(session)
    return groups


def nights(sessions: Iterable[Mapping[str, Any]]) -> list[Night]:
    """One :class:`Night` per run (see :func:`by_night`), oldest first."""
    groups = by_night(sessions)
    out = []
    for key in sorted(groups):
        group = groups[key]
        accepts = [a for s in group if (a := _session_accept(s)) is not None]
        out.append(
            Night(
                started_at=night_start(group[0]),
                key=key,
                mean_log=statistics.fmean(float(s["suite"]["mean_log"]) for s in group),
                sessions=len(group),
                accept=statistics.fmean(accepts) if accepts else None,
                engine_version=group[-1].get("engine_version"),
                commit=group[-1].get("commit"),
            )
        )
    return out
