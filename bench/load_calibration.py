"""Load-level verdicts under simulation: false alarms and misses when every level of every config
is judged each night, with Holm across all of them.

A night measures ``configs`` configs at ``levels`` load levels, ``rounds`` rounds a level, in one
server session per config. Noise in log space: a boot effect shared by every level of a session
(``shared``), a per-level session effect (``between``), and round-to-round noise (``within``).
The history holds ``k`` past sessions per level. A change of ``drop`` hits the levels from
``hit_from`` clients on (a kernel that slows only large batches); the others stay as they were.
Judged with the suite's own functions: the prediction interval with ``k`` >= 5 stored sessions,
provisional Welch below, or with ``donors`` > 0 the spread borrowed from a config stored beside
it with that many sessions of the same noise; Holm across every (config, level) verdict
(verdict/load.py).

    python bench/load_calibration.py               # the table in docs/statistics.md
    python bench/load_calibration.py --trials 300  # quicker, coarser
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_specdec.verdict.compare import history_verdict
from pytest_specdec.verdict.stats import (
    Outcome,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    adjust_verdicts,
    pooled_spread,
)

LEVELS = (1, 4, 16, 64)


@dataclass(frozen=True)
class Scenario:
    k: int  # stored sessions per level
    within: float
    between: float
    shared: float = 0.0
    rounds: int = 4
    configs: int = 4
    drop: float = 0.0
    hit_from: int = 16  # the levels a drop hits: clients >= this
    donors: int = 0  # a plain config stored beside each with this many sessions (0: none)


@dataclass(frozen=True)
class Rates:
    false_alarm_nights: float  # nights with any REGRESSED level where nothing changed
    power: float  # hit levels found REGRESSED
    unchanged_unhit: float  # levels the drop missed, found UNCHANGED
    mde: float  # median MDE of a level verdict


def _sessions(rng: np.random.Generator, sc: Scenario, n: int) -> np.ndarray:
    """ln(tok/s) of ``n`` sessions: shape (n, levels, rounds)."""
    boot = rng.normal(0.0, sc.shared, (n, 1, 1))
    level = rng.normal(0.0, sc.between, (n, len(LEVELS), 1))
    rounds = rng.normal(0.0, sc.within, (n, len(LEVELS), sc.rounds))
    base = np.log(np.array([100.0 * c**0.8 for c in LEVELS]))[None, :, None]
    return base + boot + level + rounds  # type: ignore[no-any-return]


def night(rng: np.random.Generator, sc: Scenario, policy: VerdictPolicy) -> list[list[Outcome]]:
    """One night: per config, the outcome of each level after Holm across them all."""
    verdicts = []
    donor = _sessions(rng, sc, sc.donors) if sc.donors else None
    for _ in range(sc.configs):
        past, new = _sessions(rng, sc, sc.k), _sessions(rng, sc, 1)[0]
        hit = np.array([c >= sc.hit_from for c in LEVELS])
        new = new + np.where(hit, math.log1p(-sc.drop), 0.0)[:, None]
        verdicts += [_level_verdict(past, new, donor, i, sc, policy) for i in range(len(LEVELS))]
    adjusted = adjust_verdicts(verdicts, policy)
    n = len(LEVELS)
    return [[v.outcome for v in adjusted[c * n : (c + 1) * n]] for c in range(sc.configs)]


def _summaries(sessions: np.ndarray, i: int, rounds: int) -> list[SessionSummary]:
    return [SessionSummary(rounds, float(s[i].mean()), float(s[i].std(ddof=1))) for s in sessions]


def _level_verdict(
    past: np.ndarray, new: np.ndarray, donor: np.ndarray | None, i: int, sc: Scenario,
    policy: VerdictPolicy,
) -> Verdict:  # fmt: skip
    """Level ``i`` of one config judged against its ``past`` sessions (and a donor's spread)."""
    history = _summaries(past, i, sc.rounds)
    raw = np.exp(past[:, i, :]).ravel().tolist()
    spread = None
    if donor is not None and sc.k < policy.min_history:
        others = [("plain", _summaries(donor, i, sc.rounds))]
        spread = pooled_spread(others, policy.min_history, own=history)
    return history_verdict([np.exp(new[i]).tolist()], history, raw, policy, spread)


POLICY = VerdictPolicy()


def rates(sc: Scenario, trials: int, seed: int, policy: VerdictPolicy = POLICY) -> Rates:
    rng = np.random.default_rng(seed)
    hit = [c >= sc.hit_from for c in LEVELS]
    alarms = found = hits = unchanged = unhit = 0
    mdes: list[float] = []
    for _ in range(trials):
        outcomes = night(rng, sc, policy)
        flat = [o for cfg in outcomes for o in cfg]
        alarms += any(o is Outcome.REGRESSED for o in flat)
        for cfg in outcomes:
            for o, h in zip(cfg, hit, strict=True):
                hits += h
                found += h and o is Outcome.REGRESSED
                unhit += not h
                unchanged += (not h) and o is Outcome.UNCHANGED
    # the MDE of one level verdict does not depend on the change: a night without one
    v = night_mde(np.random.default_rng(seed + 1), sc, policy)
    mdes.append(v)
    return Rates(alarms / trials, found / hits if hits else 0.0,
                 unchanged / unhit if unhit else 0.0, float(np.median(mdes)))  # fmt: skip


def night_mde(rng: np.random.Generator, sc: Scenario, policy: VerdictPolicy) -> float:
    donor = _sessions(rng, sc, sc.donors) if sc.donors else None
    past, new = _sessions(rng, sc, sc.k), _sessions(rng, sc, 1)[0]
    return _level_verdict(past, new, donor, 0, sc, policy).mde


SCENARIOS = [
    Scenario(k=1, within=0.01, between=0.005),
    Scenario(k=1, within=0.01, between=0.02),
    Scenario(k=5, within=0.01, between=0.01, shared=0.01),
    Scenario(k=10, within=0.01, between=0.01, shared=0.01),
    Scenario(k=10, within=0.02, between=0.02, shared=0.02),
    Scenario(k=20, within=0.02, between=0.02, shared=0.02),
    Scenario(k=1, within=0.01, between=0.02, donors=10),
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"{len(LEVELS)} levels x 4 configs a night, 4 rounds a level, Holm across all 16; "
          f"{args.trials} nights per cell, seed {args.seed}")  # fmt: skip
    print(
        "| history K | within / between (shared) CV | false-alarm nights | power 10% drop at "
        "16, 64 | UNCHANGED at 1, 4 | MDE of a level |"
    )
    print("|---|---|---|---|---|---|")
    for i, sc in enumerate(SCENARIOS):
        null = rates(sc, args.trials, args.seed + 10 * i)
        drop = rates(Scenario(**{**sc.__dict__, "drop": 0.10}), args.trials, args.seed + 10 * i + 5)
        noise = f"{sc.within:.0%} / {sc.between:.1%} ({sc.shared:.0%})"
        k = f"{sc.k}, spread of {sc.donors} beside it" if sc.donors else str(sc.k)
        print(f"| {k} | {noise} | {null.false_alarm_nights:.1%} | {drop.power:.2f} | "
              f"{drop.unchanged_unhit:.2f} | {null.mde:.1%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
