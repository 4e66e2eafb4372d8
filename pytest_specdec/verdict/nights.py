"""Nights: a config's stored sessions grouped by the run that measured them.

A *night* is one run of the suite (one ``started_at`` on one host): the mean of its sessions'
suite scores (ln tok/s), its mean accept length, its engine version and commit. History
(verdict/history.py) finds change points over a config's nights; the dashboard draws them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
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


def night_key(session: Mapping[str, Any]) -> str:
    """The run a stored session belongs to: its start (``started_at``), and its host where it
    names one, so that two runners' jobs started in the same second are two nights. ISO 8601
    times in UTC first: the keys sort as the nights ran."""
    when = str(session.get("started_at") or session.get("added_at") or "")
    host = session.get("host")
    return f"{when} on {host}" if host else when


def by_night(sessions: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Baseline session entries grouped by run (:func:`night_key`); sessions without a suite
    score are left out."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for session in sessions:
        if (session.get("suite") or {}).get("mean_log") is None:
            continue
        groups.setdefault(night_key(session), []).append(session)
    return groups


def nights(sessions: Iterable[Mapping[str, Any]]) -> list[Night]:
    """One :class:`Night` per run (see :func:`by_night`), oldest first."""
    groups = by_night(sessions)
    out = []
    for key in sorted(groups):
        group = groups[key]
        accepts = [a for s in group if (a := _session_accept(s)) is not None]
        when = str(group[0].get("started_at") or group[0].get("added_at") or "")
        out.append(
            Night(
                started_at=when,
                key=key,
                mean_log=statistics.fmean(float(s["suite"]["mean_log"]) for s in group),
                sessions=len(group),
                accept=statistics.fmean(accepts) if accepts else None,
                engine_version=group[-1].get("engine_version"),
                commit=group[-1].get("commit"),
            )
        )
    return out
