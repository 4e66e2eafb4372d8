"""Verdicts at load levels, and where speculation stops paying.

Each load level of a config is judged as a prompt is: its rounds' aggregate output tok/s are
its runs, server sessions the unit, a prediction interval against a long enough stored history
(the level's cells in the config's baseline); a short one borrows the spread between sessions
from the configs stored beside it, or else is Welch on rounds (provisional either way); against
``--specdec-reference``, A/B per level. Holm runs across every (config, level) verdict of a run.
At each level the change is split into accept length and verify steps per second (as for the
suite score, compare.attribute): a kernel that slows only large batches is told from a drafter
that got worse. Where the engine times its forward phases on the GPU, the steps' pace is split
once more: the GPU's own work per round against the round's wall time, slower kernels told from
a host that prepared batches slower. That work is also judged on its own at each level
(``work``): on an H200 it repeated within 0.04-0.9% from boot to boot where throughput spread up
to 4.5% with the host's pace, so it finds a slower kernel under load that throughput cannot.

The *speedup curve* of a speculative config is its throughput over a plain config's (the
reference, or a config without speculation measured in the same run) at each level, with its
CI; the *crossover* is the client count where that curve falls to 1 (crossover.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from pytest_specdec.core.configs import is_speculative
from pytest_specdec.measure.levels import levels_of, phase_means, rounds_of
from pytest_specdec.verdict.baselines import Baseline
from pytest_specdec.verdict.compare import (
    attribute,
    borrowed_spread,
    factor_facts,
    history_verdict,
    session_verdict,
)
from pytest_specdec.verdict.crossover import Crossover, crossover_of
from pytest_specdec.verdict.sessions import level_accept, level_sessions, round_errors
from pytest_specdec.verdict.stats import (
    SessionSummary,
    Verdict,
    VerdictPolicy,
    adjust_verdicts,
    against_history_sessions,
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

JUDGED = "judged"
NO_DATA = "no-data"
UNJUDGEABLE = "unjudgeable"


@dataclass
class LevelJudgement:
    """One load level of one config: the verdict on its aggregate output tok/s, the accept
    length beside it and the cause, and what the engine did at that level."""

    clients: int
    verdict: Verdict | None
    message: str
    accept: dict[str, float | None] = field(default_factory=dict)  # new, reference, change
    cause: str | None = None
    cause_text: str | None = None
    # GPU seconds per round by forward phase, tonight's against the stored ones (same config):
    # name -> new, reference, change
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    round_wall_s: float | None = None  # tonight's mean wall time of a measured round
    # The GPU's own work per round judged on its own, as a rate (rounds per GPU-second of every
    # phase but the host-paced ones): below 1 the kernels took longer. None: not timed.
    work: Verdict | None = None

    def explain(self) -> LevelJudgement:
        if self.verdict is not None:
            self.cause, self.cause_text = attribute(self.verdict, {"level": self.accept})
            self.cause, self.cause_text = host_or_kernel(
                self.verdict, self.cause, self.cause_text, self.phases, self.round_wall_s,
                self.accept.get("change"),
            )  # fmt: skip
            tail = f"; {self.cause_text}" if self.cause_text else ""
            if self.phases:
                tail += f"; GPU time per round by phase: {phase_text(self.phases)}"
            if self.work is not None:
                tail += f"; the GPU's own work: {work_text(self.work)}"
            who = f"{self.clients} client{'s' * (self.clients != 1)}"
            self.message = f"{who}: {self.verdict.explanation}{tail}"
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "outcome": self.verdict.outcome.value if self.verdict else None,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "message": self.message,
            "accept": self.accept,
            "cause": self.cause,
            "cause_text": self.cause_text,
            "phases": self.phases,
            "work": self.work.to_dict() if self.work else None,
        }


def work_text(v: Verdict) -> str:
    """``REGRESSED 0.863x [0.857, 0.869], MDE 0.4%``: a GPU-work verdict in a level's line."""
    tag = v.outcome.value + (" (provisional)" if v.provisional else "")
    return f"{tag} {v.ratio:.3f}x [{v.ci_low:.3f}, {v.ci_high:.3f}], MDE {v.mde:.1%}"


@dataclass
class LoadJudgement:
    """Every load level of one config, judged against one thing (its baseline or a reference),
    with the speedup curve's crossover where a plain config was measured at those levels."""

    status: str
    message: str
    against: str
    levels: dict[int, LevelJudgement] = field(default_factory=dict)
    crossover: Crossover | None = None  # tonight's speedup curve
    baseline_crossover: Crossover | None = None  # the stored baselines' speedup curve
    notes: list[str] = field(default_factory=list)

    def verdicts(self) -> list[Verdict]:
        """Every level's verdicts: on throughput, and on the GPU's own work where judged."""
        out = [lv.verdict for lv in self.levels.values() if lv.verdict is not None]
        return out + [lv.work for lv in self.levels.values() if lv.work is not None]

    def outcomes(self) -> str:
        """``REGRESSED at 16, 64; UNCHANGED at 1, 4``: the levels grouped by outcome."""
        groups: dict[str, list[str]] = {}
        for lv in self.levels.values():
            if lv.verdict is not None:
                tag = lv.verdict.outcome.value + (" (provisional)" * lv.verdict.provisional)
                groups.setdefault(tag, []).append(str(lv.clients))
        return "; ".join(f"{k} at {', '.join(v)}" for k, v in groups.items()) or self.status

    def explain(self) -> LoadJudgement:
        if self.status == JUDGED:
            self.message = f"load levels against {self.against}: {self.outcomes()}"
        return self

    def paying_lost(self) -> list[str]:
        """Levels where the stored baselines' curve paid (its CI above 1) and tonight's curve
        loses (its CI below 1): speculation no longer pays there."""
        if self.crossover is None or self.baseline_crossover is None:
            return []
        before = {p.clients: p for p in self.baseline_crossover.points}
        return [
            f"speculation no longer pays at {p.clients} clients: {p.ratio:.3f}x "
            f"[{p.ci_low:.3f}, {p.ci_high:.3f}] of {self.crossover.reference} tonight, where the "
            f"baseline paid {before[p.clients].ratio:.3f}x [{before[p.clients].ci_low:.3f}, "
            f"{before[p.clients].ci_high:.3f}]"
            for p in self.crossover.points
            if p.state == "loses" and p.clients in before and before[p.clients].state == "pays"
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "against": self.against,
            "levels": {str(k): v.to_dict() for k, v in self.levels.items()},
            "crossover": self.crossover.to_dict() if self.crossover else None,
            "baseline_crossover": (
                self.baseline_crossover.to_dict() if self.baseline_crossover else None
            ),
            "notes": self.notes,
        }


def _accept_change(new: float | None, ref: float | None) -> dict[str, float | None]:
    return {"new": new, "reference": ref, "change": new / ref - 1 if new and ref else None}


def phase_changes(
    new: Mapping[str, float], stored: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """Each forward phase timed on both sides: tonight's GPU seconds per round, the stored
    sessions' mean, and the change (phases on one side only are left out)."""
    out = {}
    for name, value in new.items():
        before = [float(s[name]) for s in stored if s.get(name) is not None]
        ref = statistics.fmean(before) if before else 0.0
        if ref > 0:
            change = round(value / ref - 1, 6) + 0.0  # no "-0.0%" for equal times
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
    return replace(verdict, provisional=len(stored) < policy.min_history)


def phase_text(phases: Mapping[str, Mapping[str, float]]) -> str:
    """``extend +139.7% (0.474 -> 1.136 s), target_verify +0.0% (...)``: the phase whose
    seconds moved most first, so the phase where the time went leads (a short phase that
    doubled does not outrank a long one that grew by half)."""
    ordered = sorted(phases.items(), key=lambda kv: -abs(kv[1]["new"] - kv[1]["reference"]))
    return ", ".join(f"{name} {p['change']:+.1%} ({p['reference']:.3f} -> {p['new']:.3f} s)"
                     for name, p in ordered)  # fmt: skip


def _empty(config: Mapping[str, Any], against: str) -> LoadJudgement | None:
    """A judgement that ends before any test: nothing measured, or failed rounds."""
    if not levels_of(config):
        return LoadJudgement(NO_DATA, "no load levels measured", against)
    errors = round_errors(config)
    if errors:
        return LoadJudgement(UNJUDGEABLE, "; ".join(errors), against)
    return None


def judge_load_history(
    config: Mapping[str, Any], baseline: Baseline, policy: VerdictPolicy,
    lenders: Callable[[], Sequence[Baseline]] = tuple,
) -> LoadJudgement:  # fmt: skip
    """Each level against the level's stored history in ``baseline``; a level with a short
    history borrows the spread between sessions from ``lenders`` (the other configs stored
    with the same settings, read when one asks) where they have a long one."""
    against = f"baseline ({len(baseline.sessions)} sessions)"
    out = _empty(config, against)
    if out is not None:
        return out
    out = LoadJudgement(JUDGED, "", against)
    for clients in levels_of(config):
        history = baseline.level_history(clients)
        new = level_sessions(config, clients)
        if not history:
            out.notes.append(f"{clients} clients: not in the baseline yet (no stored rounds)")
            continue
        if not new:
            out.notes.append(f"{clients} clients: no usable round")
            continue
        raw = [v for s in baseline.level_sessions(clients) for v in s]
        cells = baseline.level_cells(clients)
        stored = [c.get("accept_length") for c in cells]
        accepts = [float(a) for a in stored if a]
        level = partial(Baseline.level_history, clients=clients)
        spread = borrowed_spread(history, lenders, level, policy)
        verdict = history_verdict(new, history, raw, policy, spread)
        accept = _accept_change(
            level_accept(config, clients), statistics.fmean(accepts) if accepts else None
        )
        rounds = rounds_of(config, clients)
        phases = phase_changes(
            phase_means(rounds),
            [c["phase_s"] for c in cells if c.get("phase_s")],
        )
        walls = [r.wall_s for r in rounds if r.ok and not r.warmup and r.wall_s > 0]
        out.levels[clients] = LevelJudgement(
            clients, verdict, "", accept, phases=phases,
            round_wall_s=statistics.fmean(walls) if walls else None,
            work=work_verdict(rounds, cells, policy),
        ).explain()  # fmt: skip
    if not out.levels:
        out.status, out.message = NO_DATA, "; ".join(out.notes) or "no level to judge"
        return out
    return out.explain()


def judge_load_reference(
    config: Mapping[str, Any], reference: Mapping[str, Any], policy: VerdictPolicy
) -> LoadJudgement:
    """Each level A/B against the reference config's rounds at the same level; the levels'
    ratios are the speedup curve, and its crossover is found."""
    against = f"reference {reference.get('name')}"
    out = _empty(config, against) or _empty(reference, against)
    if out is not None:
        return out
    out = LoadJudgement(JUDGED, "", against)
    out.levels = {
        lv.clients: lv for lv in speedup_levels(config, reference, policy, out.notes)
    }  # fmt: skip
    if not out.levels:
        out.status, out.message = NO_DATA, "no level measured by both configs"
        return out
    if is_speculative(config.get("config") or {}) and not is_speculative(
        reference.get("config") or {}
    ):  # a speedup curve is speculation over plain decoding, nothing else
        out.crossover = crossover_of(str(reference.get("name")), list(out.levels.values()))
    return out.explain()


def speedup_levels(
    config: Mapping[str, Any], plain: Mapping[str, Any], policy: VerdictPolicy,
    notes: list[str] | None = None,
) -> list[LevelJudgement]:  # fmt: skip
    """``config`` against ``plain`` at each level both measured (session verdicts)."""
    out = []
    for clients in levels_of(config):
        new, ref = level_sessions(config, clients), level_sessions(plain, clients)
        if not new or not ref:
            if notes is not None:
                notes.append(f"{clients} clients: not measured by both configs")
            continue
        if (
            notes is not None
            and (len(new) < 2 or len(ref) < 2)
            and not any("provisional" in n for n in notes)
        ):
            notes.append("one server session per side at each level: the A/B is provisional")
        accept = _accept_change(level_accept(config, clients), level_accept(plain, clients))
        out.append(LevelJudgement(clients, session_verdict(new, ref, policy), "", accept).explain())
    return out


def stored_speedups(
    config: Baseline, plain: Baseline, levels: Sequence[int], policy: VerdictPolicy
) -> list[LevelJudgement]:
    """The stored baselines' speedup curve: ``config``'s stored rounds over ``plain``'s."""
    out = []
    for clients in levels:
        new, ref = config.level_sessions(clients), plain.level_sessions(clients)
        if new and ref:
            out.append(LevelJudgement(clients, session_verdict(new, ref, policy), ""))
    return out


def plain_config(results: Mapping[str, Any], config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The config of the run that ``config``'s speedup curve is taken against: the run's
    reference, else the first config without speculation that measured load levels (None for
    a config without speculation, or when there is none)."""
    if not is_speculative(config.get("config") or {}):
        return None
    configs = [c for c in results.get("configs", []) if c.get("name") != config.get("name")]
    reference = (results.get("options") or {}).get("reference")
    for c in configs:
        if c.get("name") == reference and levels_of(c):
            return c  # type: ignore[no-any-return]
    return next(
        (c for c in configs if not is_speculative(c.get("config") or {}) and levels_of(c)), None
    )


def adjust_load(judgements: Sequence[LoadJudgement], policy: VerdictPolicy) -> None:
    """Holm across every level verdict of the run (one family, whatever the config), and
    across every level's GPU-work verdict (another), in place."""
    levels = [lv for j in judgements for lv in j.levels.values() if lv.verdict is not None]
    adjusted = adjust_verdicts([lv.verdict for lv in levels if lv.verdict], policy)
    for lv, verdict in zip(levels, adjusted, strict=True):
        lv.verdict = verdict
    worked = [lv for j in judgements for lv in j.levels.values() if lv.work is not None]
    # the GPU-work verdicts are a family of their own, as the acceptance verdicts are
    for lv, work in zip(worked, adjust_verdicts([lv.work for lv in worked if lv.work], policy),
                        strict=True):  # fmt: skip
        lv.work = work
    for lv in levels:
        lv.explain()
    for j in judgements:
        j.explain()


def with_level_alpha(policy: VerdictPolicy, levels: int) -> VerdictPolicy:
    """The policy of one level verdict during the run: Bonferroni over the levels (stricter
    than the Holm across them at the end of the run)."""
    return replace(policy, alpha=policy.alpha / max(1, levels))
