"""Adaptive load sessions under simulation: how many boots a night takes, and what it buys.

The nightly load job boots up to ``--specdec-sessions`` sessions of a config and stops once
every level's throughput verdict is decided as its gate judges it (``--specdec-adaptive``,
driver/stopping.py: Bonferroni over the configs and levels, at the group-sequential alpha of
``RunSettings.policy``, looks after 1 … N sessions); at the end of the run Holm runs across
every (config, level) verdict at that alpha. This compares
that with a fixed number of sessions a night, with the suite's own functions, on the noise
model of bench/load_calibration.py (a boot effect shared by every level, a per-level session
effect, round-to-round noise; four configs x four levels, four rounds a level).

Per row: false-alarm nights (any level REGRESSED when nothing changed), the share of the levels
hit by a 5% and a 10% drop (at 16 and 64 clients) found REGRESSED, the share of the untouched
levels found UNCHANGED, the sessions a config booted on a night with nothing changed (mean), the
share of level verdicts decided at the end of such a night, and the median MDE of a level.

    python bench/load_adaptive.py                 # the table in docs/statistics.md
    python bench/load_adaptive.py --trials 200    # quicker, coarser
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ beside this script

from load_calibration import LEVELS, Scenario, _sessions, _summaries

from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.driver.stopping import undecided
from pytest_specdec.verdict.compare import history_verdict
from pytest_specdec.verdict.stats import Outcome, Verdict, VerdictPolicy, adjust_verdicts

HIT_FROM = 16


@dataclass(frozen=True)
class Plan:
    most: int  # --specdec-sessions
    adaptive: bool = False  # --specdec-adaptive
    target_mde: float | None = None  # --specdec-target-mde

    def label(self) -> str:
        if not self.adaptive:
            return str(self.most)
        target = f", MDE {self.target_mde:.0%}" if self.target_mde is not None else ""
        return f"up to {self.most}, adaptive{target}"


@dataclass(frozen=True)
class Night:
    outcomes: list[list[Outcome]]  # per config, per level, after Holm across all
    sessions: list[int]  # booted per config
    mdes: list[float]


def _judge(past: np.ndarray, new: np.ndarray, i: int, sc: Scenario,
           policy: VerdictPolicy) -> Verdict:  # fmt: skip
    history = _summaries(past, i, sc.rounds)
    raw = np.exp(past[:, i, :]).ravel().tolist()
    return history_verdict([np.exp(s[i]).tolist() for s in new], history, raw, policy)


def night(rng: np.random.Generator, sc: Scenario, plan: Plan, policy: VerdictPolicy) -> Night:
    """One night of ``sc.configs`` configs, each booting up to ``plan.most`` sessions (all of
    them unless adaptive), judged at ``policy`` after each, Holm across all at the end."""
    most = plan.most
    look = replace(policy, alpha=policy.alpha / (sc.configs * len(LEVELS)))
    hit = np.array([c >= HIT_FROM for c in LEVELS])
    shift = np.where(hit, math.log1p(-sc.drop), 0.0)[None, :, None]
    verdicts: list[Verdict] = []
    booted: list[int] = []
    for _ in range(sc.configs):
        past, new = _sessions(rng, sc, sc.k), _sessions(rng, sc, most) + shift
        for m in range(1, most + 1):
            if plan.adaptive and m < most:  # a look: decided as the gate judges, the MDE
                # held to the target as the report states it (at the run's alpha)
                gate = [_judge(past, new[:m], i, sc, look) for i in range(len(LEVELS))]
                said: list[Verdict | None] = [None] * len(LEVELS)
                if plan.target_mde is not None:
                    said = [_judge(past, new[:m], i, sc, policy) for i in range(len(LEVELS))]
                pairs = zip(gate, said, strict=True)
                if not any(undecided(g, plan.target_mde, r) for g, r in pairs):
                    break
        level = [_judge(past, new[:m], i, sc, policy) for i in range(len(LEVELS))]
        verdicts += level
        booted.append(m)
    adjusted = adjust_verdicts(verdicts, policy)
    n = len(LEVELS)
    outcomes = [[v.outcome for v in adjusted[c * n : (c + 1) * n]] for c in range(sc.configs)]
    return Night(outcomes, booted, [v.mde for v in adjusted])


@dataclass(frozen=True)
class Row:
    false_alarms: float
    power5: float
    power10: float
    unchanged: float
    sessions: float
    decided: float
    mde: float


def row(sc: Scenario, plan: Plan, trials: int, seed: int) -> Row:
    settings = RunSettings(sessions=plan.most, adaptive=plan.adaptive)
    policy = settings.policy  # with adaptive sessions, the group-sequential alpha
    hit = [c >= HIT_FROM for c in LEVELS]
    rng = np.random.default_rng(seed)
    nulls = [night(rng, sc, plan, policy) for _ in range(trials)]
    found = {}
    for drop in (0.05, 0.10):
        nights = [night(rng, replace(sc, drop=drop), plan, policy) for _ in range(trials)]
        flags = [o is Outcome.REGRESSED for n in nights for cfg in n.outcomes
                 for o, h in zip(cfg, hit, strict=True) if h]  # fmt: skip
        found[drop] = float(np.mean(flags))
        if drop == 0.10:
            same = [o is Outcome.UNCHANGED for n in nights for cfg in n.outcomes
                    for o, h in zip(cfg, hit, strict=True) if not h]  # fmt: skip
    flat = [o for n in nulls for cfg in n.outcomes for o in cfg]
    alarms = [any(o is Outcome.REGRESSED for c in n.outcomes for o in c) for n in nulls]
    return Row(
        false_alarms=float(np.mean(alarms)),
        power5=found[0.05],
        power10=found[0.10],
        unchanged=float(np.mean(same)),
        sessions=float(np.mean([s for n in nulls for s in n.sessions])),
        decided=float(np.mean([o is not Outcome.INCONCLUSIVE for o in flat])),
        mde=float(np.median([m for n in nulls for m in n.mdes])),
    )


SCENARIOS = [
    Scenario(k=10, within=0.01, between=0.01, shared=0.01),
    Scenario(k=20, within=0.01, between=0.01, shared=0.01),
    Scenario(k=20, within=0.02, between=0.02, shared=0.02),
]
PLANS = [Plan(1), Plan(2), Plan(5), Plan(5, True), Plan(5, True, 0.05)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{len(LEVELS)} levels x 4 configs a night, 4 rounds a level, Holm across all 16; "
          f"{args.trials} nights per cell and change, seed {args.seed}")  # fmt: skip
    print("| history K | within / between (shared) CV | sessions a night | false-alarm nights "
          "| found: 5% / 10% drop at 16, 64 | UNCHANGED at 1, 4 | sessions booted | levels "
          "decided | MDE of a level |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for i, sc in enumerate(SCENARIOS):
        noise = f"{sc.within:.0%} / {sc.between:.0%} ({sc.shared:.0%})"
        for plan in PLANS:
            r = row(sc, plan, args.trials, args.seed + 100 * i)
            print(f"| {sc.k} | {noise} | {plan.label()} | {r.false_alarms:.1%} | {r.power5:.2f} / "
                  f"{r.power10:.2f} | {r.unchanged:.2f} | {r.sessions:.2f} | {r.decided:.0%} "
                  f"| {r.mde:.1%} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
