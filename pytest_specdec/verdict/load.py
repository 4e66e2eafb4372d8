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

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from pytest_specdec.core.configs import is_speculative
from pytest_specdec.measure.levels import client_cpu_s, levels_of, phase_means, rounds_of
from pytest_specdec.verdict.baselines import Baseline
from pytest_specdec.verdict.compare import (
    attribute,
    borrowed_spread,
    history_verdict,
    session_verdict,
)
from pytest_specdec.verdict.crossover import WORDS, Crossover, crossover_of
from pytest_specdec.verdict.sessions import level_accept, level_sessions, round_errors
from pytest_specdec.verdict.stats import Verdict, VerdictPolicy, adjust_verdicts
from pytest_specdec.verdict.work import (
    host_or_kernel,
    pace_change,
    pace_text,
    phase_changes,
    phase_text,
    work_verdict,
)

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
    # The load client's CPU seconds per round, tonight's against the stored (new, reference,
    # ratio): the host's pace. None: not read on either side.
    pace: dict[str, float] | None = None

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
            if self.pace is not None:
                tail += f"; {pace_text(self.pace)}"
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
            "pace": self.pace,
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

    def paying_lost(self, provisional: bool | None = None) -> list[str]:
        """Levels where the stored baselines' curve paid (its CI above 1) and tonight's curve
        loses (its CI below 1): speculation no longer pays there (over a speculative reference:
        the config is no longer the faster). ``provisional``: only the
        levels where either curve's point is provisional (True) or neither is (False)."""
        if self.crossover is None or self.baseline_crossover is None:
            return []
        before = {p.clients: p for p in self.baseline_crossover.points}
        lost = [(p, before[p.clients]) for p in self.crossover.points
                if p.state == "loses" and p.clients in before
                and before[p.clients].state == "pays"]  # fmt: skip
        words = WORDS[self.crossover.kind]
        lost_what = words["lost"].format(ref=self.crossover.reference)
        return [
            f"{lost_what} at {p.clients} clients: {p.ratio:.3f}x "
            f"[{p.ci_low:.3f}, {p.ci_high:.3f}] of {self.crossover.reference} tonight, where the "
            f"baseline {words['was']} {b.ratio:.3f}x [{b.ci_low:.3f}, {b.ci_high:.3f}]"
            + (" (provisional: one session a side)" if p.provisional or b.provisional else "")
            for p, b in lost
            if provisional is None or (p.provisional or b.provisional) == provisional
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
            pace=pace_change(client_cpu_s(rounds),
                             [float(c["client_cpu_s"]) for c in cells if c.get("client_cpu_s")]),
        ).explain()  # fmt: skip
    held = {int(c) for s in baseline.sessions for c in (s.get("levels") or {})}
    unmeasured = sorted(held - set(levels_of(config)))
    if unmeasured:  # a level the baseline judges that this run did not measure
        out.notes.append(f"not measured tonight, though the baseline holds them: "
                         f"{', '.join(map(str, unmeasured))} clients")  # fmt: skip
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
    out = _empty(config, against)
    if out is None and not levels_of(reference):
        why = f"the reference {reference.get('name')} measured no load level to judge against"
        return LoadJudgement(NO_DATA, why, against)
    out = out or _empty(reference, against)
    if out is not None:
        return out
    out = LoadJudgement(JUDGED, "", against)
    out.levels = {
        lv.clients: lv for lv in speedup_levels(config, reference, policy, out.notes)
    }  # fmt: skip
    if not out.levels:
        out.status, out.message = NO_DATA, "no level measured by both configs"
        return out
    if is_speculative(config.get("config") or {}):  # a curve of a speculative config only
        out.crossover = crossover_of(
            str(reference.get("name")), list(out.levels.values()), curve_kind(reference)
        )
    return out.explain()


def curve_kind(reference: Mapping[str, Any]) -> str:
    """A speculative config's curve over ``reference``: ``speedup`` over plain decoding,
    ``comparison`` over another speculative config (verdict/crossover.py)."""
    return "comparison" if is_speculative(reference.get("config") or {}) else "speedup"


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
