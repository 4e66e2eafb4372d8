"""The GPU's own work at a load level: the forward phases SGLang's device timer counts per
round, tonight's against the stored sessions', the split of a decided change between the GPU's
work and the host's pace, and the GPU-work verdict (load.py judges the levels with them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_specdec.verdict.compare import factor_facts
from pytest_specdec.verdict.stats import (
    SessionSummary,
    Verdict,
    VerdictPolicy,
    against_history_sessions,
    explain_verdict,
)

# SGLang's device timer counts a prefill forward in CUDA graphs from before its batch is loaded
# on the host (SGLang 0.5.17's model_runner: "it also includes load_batch time"), so `extend`
# carries the host's pace; every other phase is a graph replay, the GPU's work alone.
HOST_PACED_PHASES = frozenset({"extend"})
# Below this share of a decided change in a round's wall time, the GPU's own work did not
# cause it: the host's pace did.
KERNEL_SHARE = 1 / 3
# Stored sessions with phase times a level's GPU-work verdict needs: it is a prediction interval
# on the sessions' means from two on (few sessions widen it; none is pooled over runs).
MIN_WORK_HISTORY = 2


def phase_changes(
    new: Mapping[str, float], stored: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """Each forward phase timed on either side: tonight's GPU seconds per round, the stored
    sessions' mean, and the change (None for a phase timed on one side only, whose seconds
    count 0 on the other: GPU work that is new tonight, or gone). Nothing where one side timed
    no phase at all (the engine's timer off)."""
    out: dict[str, dict[str, Any]] = {}
    if not new or not any(stored):
        return out
    for name in sorted({*new, *(k for s in stored for k in s)}):
        before = [float(s[name]) for s in stored if s.get(name) is not None]
        ref, value = statistics.fmean(before) if before else 0.0, float(new.get(name) or 0.0)
        if ref > 0 or value > 0:
            change = round(value / ref - 1, 6) + 0.0 if ref > 0 and value > 0 else None
            out[name] = {"new": value, "reference": ref, "change": change}
    return out


def gpu_work_change(
    phases: Mapping[str, Mapping[str, float]], ratio: float, round_wall_s: float | None
) -> tuple[float, float] | None:
    """How much a round's wall time changed against the stored rounds (a round holds the same
    tokens on both sides, so the stored round took ``ratio`` times tonight's), and how much of
    that the GPU's own work per round changed: the phases other than ``HOST_PACED_PHASES``.
    None without both."""
    work = [p for name, p in phases.items() if name not in HOST_PACED_PHASES]
    if not work or not round_wall_s or ratio <= 0:
        return None
    return round_wall_s * (1 - ratio), sum(p["new"] - p["reference"] for p in work)


def host_or_kernel(
    verdict: Verdict,
    cause: str | None,
    text: str | None,
    phases: Mapping[str, Mapping[str, float]],
    round_wall_s: float | None,
    accept_change: float | None = None,
) -> tuple[str | None, str | None]:
    """A decided change that the accept length does not explain (cause ``kernel``, or
    ``target`` without speculation) is put on the host when the GPU's own work per round
    moved less than ``KERNEL_SHARE`` of the round's wall time in the same direction: the time
    went to preparing batches and to the gaps between forwards. Otherwise the GPU's share is
    added to the cause. Other causes, and levels without phase times, are left as they are."""
    if cause not in ("kernel", "target") or verdict.outcome.value not in ("REGRESSED", "IMPROVED"):
        return cause, text
    split = gpu_work_change(phases, verdict.ratio, round_wall_s)
    if split is None:
        return cause, text
    wall, work = split
    share = work / wall if wall else 0.0
    facts = (f"the GPU's own work per round (every phase but "
             f"{', '.join(sorted(HOST_PACED_PHASES))}) moved {work:+.3f} s of the round's "
             f"{wall:+.3f} s ({share:.0%})")  # fmt: skip
    if share >= KERNEL_SHARE:
        return cause, f"{text}; {facts}" if text else facts
    steps = ""
    if accept_change is not None and accept_change > -1:
        steps = f"{factor_facts(verdict.ratio, 1 + accept_change)}; "
    return "host", (
        f"cause: host side: {steps}{facts}: the time went to preparing batches and between "
        "forwards, the host's pace, not the kernels"
    )


def gpu_work_s(phase_s: Mapping[str, Any]) -> float | None:
    """GPU seconds of a round's own work: every timed phase but ``HOST_PACED_PHASES``."""
    total = sum(float(v) for k, v in phase_s.items() if k not in HOST_PACED_PHASES)
    return total if total > 0 else None


def work_verdict(
    rounds: Sequence[Any], cells: Sequence[Mapping[str, Any]], policy: VerdictPolicy
) -> Verdict | None:
    """Tonight's rounds' GPU work (as a rate, per server session) against the stored sessions'
    mean GPU work per round at this level: a prediction interval on session means (calibrated
    from ``MIN_WORK_HISTORY`` sessions; provisional below ``policy.min_history``, as any
    level verdict). None where either side has no phase times."""
    tonight: dict[int, list[float]] = {}
    for r in rounds:
        work = gpu_work_s(r.engine.get("phase_s") or {}) if r.ok and not r.warmup else None
        if work:
            tonight.setdefault(r.session, []).append(1.0 / work)
    stored = [w for c in cells if (w := gpu_work_s(c.get("phase_s") or {}))]
    if not tonight or len(stored) < MIN_WORK_HISTORY:
        return None
    new = [SessionSummary.from_values(v) for v in tonight.values()]
    history = [SessionSummary(1, -math.log(w), 0.0) for w in stored]
    verdict = against_history_sessions(new, history, replace(policy, min_history=MIN_WORK_HISTORY))
    if len(stored) >= policy.min_history:
        return verdict
    marked = replace(verdict, provisional=True)
    return replace(marked, explanation=explain_verdict(marked))


# Beyond this change in the load client's CPU seconds for the same requests, the host ran at
# another pace than in the stored sessions (on an H200 the same requests cost the client 2.1 to
# 3.6 s a round at 64 clients over one session's boots, and throughput followed: r = -0.97).
PACE_CHANGE = 0.10


def pace_change(new: float | None, stored: Sequence[float]) -> dict[str, float] | None:
    """Tonight's load-client CPU seconds per round against the stored sessions' mean (None
    without both): ``new``, ``reference`` and ``ratio``."""
    if not new or not stored:
        return None
    ref = statistics.fmean(stored)
    return {"new": new, "reference": ref, "ratio": new / ref} if ref > 0 else None


def pace_text(pace: Mapping[str, float]) -> str:
    """``the host's pace: the load client spent 0.62x the stored rounds' CPU time on the same
    requests (2.09 against 3.36 s a round): a faster host``."""
    ratio = pace["ratio"]
    if ratio < 1 - PACE_CHANGE:
        word = ": a faster host, whose pace also speeds the engine's host side"
    elif ratio > 1 + PACE_CHANGE:
        word = ": a slower host, whose pace also slows the engine's host side"
    else:
        word = ""
    return (f"the host's pace: the load client spent {ratio:.2f}x the stored rounds' CPU time "
            f"on the same requests ({pace['new']:.2f} against {pace['reference']:.2f} s a "
            f"round){word}")  # fmt: skip


def phase_text(phases: Mapping[str, Mapping[str, float]]) -> str:
    """``extend +139.7% (0.474 -> 1.136 s), target_verify +0.0% (...)``: the phase whose
    seconds moved most first, so the phase where the time went leads (a short phase that
    doubled does not outrank a long one that grew by half)."""
    ordered = sorted(phases.items(), key=lambda kv: -abs(kv[1]["new"] - kv[1]["reference"]))
    return ", ".join(f"{name} {_moved(p)} ({p['reference']:.3f} -> {p['new']:.3f} s)"
                     for name, p in ordered)  # fmt: skip


def _moved(phase: Mapping[str, Any]) -> str:
    if not phase["reference"]:
        return "new"
    return "gone" if not phase["new"] else f"{phase['change']:+.1%}"
