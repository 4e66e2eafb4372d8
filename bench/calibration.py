"""Calibration table of the verdict rules: false alarms and power under simulated noise.

Each simulated server session gets a session effect ~ N(0, between) in log space and its
runs ~ N(0, within) around it; the new sessions' true mean is shifted by ln(1 - change).
Every row judges the same simulated nights with the verdict engine and with
pytest-benchmark's ``--benchmark-compare-fail=mean:5%`` rule (fail when the new session's
mean tok/s is more than 5% below the last session's mean).

    python bench/calibration.py [--trials N] [--seed S] [--alpha A] [--cv-multiplier M]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a plain checkout

from pytest_specdec.stats import (
    SequentialPlan,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    against_history_sessions,
    sequential_plan,
    welch_log,
)

CHANGES = (0.0, 0.03, 0.05, 0.10)
Logs = npt.NDArray[np.float64]
Plan = SequentialPlan | None


@dataclass(frozen=True)
class Scenario:
    within: float  # within-session CV (sd of ln tok/s)
    between: float  # between-session CV
    k: int  # history sessions; for A/B the reference config's sessions
    runs: int = 5  # runs per session
    sessions: int = 1  # new sessions per night
    ab: bool = False  # A/B in one run: Welch between the two configs' runs (k ref sessions)
    known_between: bool = False  # A/B given the true between-session CV (from a history)
    by_session: bool = False  # A/B: Welch between session means instead of runs
    adaptive: bool = False  # sequential_plan over 1..sessions new sessions

    def plan(self, policy: VerdictPolicy) -> SequentialPlan | None:
        if not self.adaptive:
            return None
        looks = tuple(range(1, self.sessions + 1))
        return sequential_plan(policy, looks, kind="history", k=self.k)

    @property
    def method(self) -> str:
        if self.ab:
            unit = "session means" if self.by_session else "runs"
            return f"A/B welch on {unit}" + (", δ from between CV" if self.known_between else "")
        if self.adaptive:
            return "prediction-interval, adaptive"
        return "prediction-interval" if self.k >= 5 else "welch-provisional"


SCENARIOS = (
    Scenario(0.02, 0.015, 5),
    Scenario(0.02, 0.015, 10),
    Scenario(0.02, 0.015, 20),
    Scenario(0.02, 0.015, 10, sessions=2),
    Scenario(0.02, 0.015, 10, sessions=3),
    Scenario(0.02, 0.015, 10, sessions=3, adaptive=True),
    Scenario(0.02, 0.015, 20, sessions=3, adaptive=True),
    Scenario(0.02, 0.015, 3),
    Scenario(0.01, 0.02, 10),
    Scenario(0.03, 0.035, 5),
    Scenario(0.03, 0.035, 10),
    Scenario(0.03, 0.035, 20),
    Scenario(0.03, 0.035, 20, sessions=3),
    Scenario(0.03, 0.035, 20, sessions=6),
    Scenario(0.03, 0.035, 20, sessions=3, adaptive=True),
    Scenario(0.03, 0.035, 20, sessions=6, adaptive=True),
    Scenario(0.03, 0.035, 3),
    Scenario(0.02, 0.015, 1, ab=True),
    Scenario(0.02, 0.015, 1, ab=True, known_between=True),
    Scenario(0.03, 0.035, 1, ab=True, known_between=True),
    Scenario(0.02, 0.015, 3, sessions=3, ab=True),
    Scenario(0.02, 0.015, 3, sessions=3, ab=True, by_session=True),
)


def simulate(rng: np.random.Generator, sc: Scenario, trials: int, change: float) -> Logs:
    """ln(tok/s) of shape (trials, k + sessions, runs); the last ``sessions`` are new."""
    n_sessions = sc.k + sc.sessions
    effect = rng.normal(0.0, sc.between, (trials, n_sessions, 1))
    logs = math.log(100.0) + effect + rng.normal(0.0, sc.within, (trials, n_sessions, sc.runs))
    logs[:, sc.k :, :] += math.log1p(-change)
    return logs


def _summaries(mean: Logs, sd: Logs, runs: int) -> list[SessionSummary]:
    return [SessionSummary(runs, float(m), float(s)) for m, s in zip(mean, sd, strict=True)]


def _judge(
    logs: Logs, mean: Logs, sd: Logs, sc: Scenario, policy: VerdictPolicy, plan: Plan
) -> Verdict:
    """One night (one trial's slices) through the verdict engine."""
    if sc.ab:
        cv = sc.between if sc.known_between else None
        a, b = (mean[sc.k :], mean[: sc.k]) if sc.by_session else (logs[sc.k :], logs[: sc.k])
        return welch_log(
            np.exp(a).ravel().tolist(), np.exp(b).ravel().tolist(), policy, between_cv=cv
        )
    history = _summaries(mean[: sc.k], sd[: sc.k], sc.runs)
    new = _summaries(mean[sc.k :], sd[sc.k :], sc.runs)
    if plan is None:
        return against_history_sessions(new, history, policy)
    for m in plan.looks:
        v = against_history_sessions(new[:m], history, plan.policy(policy))
        if plan.stop(v):
            break
    return v


def engine_fails(
    logs: Logs, sc: Scenario, policy: VerdictPolicy, plan: Plan
) -> tuple[float, float]:
    """Share of nights the verdict engine calls REGRESSED, and new sessions used per night."""
    mean, sd = logs.mean(axis=2), logs.std(axis=2, ddof=1)
    failed = used = 0
    for t in range(logs.shape[0]):
        v = _judge(logs[t], mean[t], sd[t], sc, policy, plan)
        failed += v.failed
        used += v.n_new if v.method == "prediction-interval" else sc.sessions
    return failed / logs.shape[0], used / logs.shape[0]


def mean5_fails(logs: Logs, sc: Scenario) -> float:
    """pytest-benchmark mean:5%: first new session vs the last stored session."""
    toks = np.exp(logs)
    new, last = toks[:, sc.k, :].mean(axis=1), toks[:, sc.k - 1, :].mean(axis=1)
    return float(np.mean(new < 0.95 * last))


def row(sc: Scenario, trials: int, seed: int, index: int, policy: VerdictPolicy) -> str:
    ours, theirs, used, plan = [], [], [], sc.plan(policy)
    for j, change in enumerate(CHANGES):
        logs = simulate(np.random.default_rng([seed, index, j]), sc, trials, change)
        rate, per_night = engine_fails(logs, sc, policy, plan)
        ours.append(rate)
        used.append(per_night)
        theirs.append(mean5_fails(logs, sc))
    k = f"{sc.k}" if not sc.ab else f"A/B {sc.k}"
    sessions = f"{sc.sessions} ({used[0]:.1f})" if sc.adaptive else str(sc.sessions)
    cells = [f"{sc.within:.0%}", f"{sc.between:.1%}", k, str(sc.runs), sessions, sc.method]
    cells += [f"{ours[0]:.2%}", *(f"{p:.2f}" for p in ours[1:])]
    cells += [f"{theirs[0]:.1%}", *(f"{p:.2f}" for p in theirs[1:])]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| within | between | K | runs | sessions | method | false alarms | power 3% | 5% | 10% "
    "| mean:5% false alarms | power 3% | 5% | 10% |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000, help="nights per cell (4000)")
    parser.add_argument("--seed", type=int, default=20240601, help="random seed (20240601)")
    defaults = VerdictPolicy()
    parser.add_argument("--alpha", type=float, default=defaults.alpha)
    parser.add_argument("--min-delta", type=float, default=defaults.min_delta)
    parser.add_argument("--cv-multiplier", type=float, default=defaults.cv_multiplier)
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials must be >= 1, got {args.trials}")
    policy = VerdictPolicy(
        alpha=args.alpha, min_delta=args.min_delta, cv_multiplier=args.cv_multiplier
    )
    start = time.perf_counter()
    print(f"policy: {policy}; {args.trials} nights per cell, seed {args.seed}\n")
    print(HEADER)
    for index, sc in enumerate(SCENARIOS):
        print(row(sc, args.trials, args.seed, index, policy), flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
