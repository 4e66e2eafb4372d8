"""Calibration table of the verdict rules: false alarms and power under simulated noise.

Each simulated server session gets a session effect ~ N(0, between) in log space and its
runs ~ N(0, within) around it; the new sessions' true mean is shifted by ln(1 - change).
Every row judges the same simulated nights with the verdict engine and with
pytest-benchmark's ``--benchmark-compare-fail=mean:5%`` rule (fail when the new session's
mean tok/s is more than 5% below the last session's mean).

    python bench/calibration.py [--trials N] [--seed S] [--alpha A] [--cv-multiplier M]

With ``--drift`` it prints the change-point table instead: nightly series with a step or a
linear drift at night 20, found by the nightly run (and how soon), and false change points
on stationary series (docs/history.md):

    python bench/calibration.py --drift [--trials N] [--penalty C] [--min-size M]
        [--history-alpha A] [--gate-alpha G]
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

from pytest_specdec.verdict.history import HistoryPolicy, detect, drift
from pytest_specdec.verdict.nights import Night
from pytest_specdec.verdict.planning import SequentialPlan, sequential_plan
from pytest_specdec.verdict.stats import (
    SessionSummary,
    Verdict,
    VerdictPolicy,
    against_history_borrowed,
    against_history_sessions,
    pooled_spread,
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
    donors: int = 0  # a short history borrows the spread of one other config's this many sessions
    donor_between: float | None = None  # that config's between-session CV, if not ``between``
    donor_within: float | None = None  # its within-session CV, if not ``within``

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
        if self.donors and self.k < 5:
            other = "" if self.donor_between is None else f", its between {self.donor_between:.1%}"
            if self.donor_within is not None:
                other += f", its within {self.donor_within:.0%}"
            return f"borrowed-spread ({self.donors} sessions of another config{other})"
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
    # appended, so that the rows above keep their seeds
    Scenario(0.02, 0.015, 1),
    Scenario(0.02, 0.015, 1, donors=10),
    Scenario(0.02, 0.015, 3, donors=10),
    Scenario(0.03, 0.035, 1),
    Scenario(0.03, 0.035, 1, donors=10),
    Scenario(0.03, 0.035, 3, donors=10),
    Scenario(0.02, 0.03, 1, donors=10, donor_between=0.015),  # the judged config spreads more
    Scenario(0.05, 0.01, 1, donors=10, donor_within=0.01),  # its runs are noisier
)


def simulate(rng: np.random.Generator, sc: Scenario, trials: int, change: float) -> Logs:
    """ln(tok/s) of shape (trials, donors + k + sessions, runs): another config's sessions
    (its own level and between-session CV), the history, and the last ``sessions``, new."""
    n_sessions = sc.donors + sc.k + sc.sessions
    effect = rng.normal(0.0, sc.between, (trials, n_sessions, 1))
    if sc.donor_between is not None:
        effect[:, : sc.donors] *= sc.donor_between / sc.between
    runs = rng.normal(0.0, sc.within, (trials, n_sessions, sc.runs))
    if sc.donor_within is not None:
        runs[:, : sc.donors] *= sc.donor_within / sc.within
    logs = math.log(100.0) + effect + runs
    logs[:, sc.donors :, :] += math.log(1.3)  # the other config runs at a speed of its own
    logs[:, sc.donors + sc.k :, :] += math.log1p(-change)
    return logs


def _summaries(mean: Logs, sd: Logs, runs: int) -> list[SessionSummary]:
    return [SessionSummary(runs, float(m), float(s)) for m, s in zip(mean, sd, strict=True)]


def _judge(
    logs: Logs, mean: Logs, sd: Logs, sc: Scenario, policy: VerdictPolicy, plan: Plan
) -> Verdict:
    """One night (one trial's slices) through the verdict engine."""
    if sc.donors:
        other = _summaries(mean[: sc.donors], sd[: sc.donors], sc.runs)
        logs, mean, sd = logs[sc.donors :], mean[sc.donors :], sd[sc.donors :]
    if sc.ab:
        cv = sc.between if sc.known_between else None
        a, b = (mean[sc.k :], mean[: sc.k]) if sc.by_session else (logs[sc.k :], logs[: sc.k])
        return welch_log(
            np.exp(a).ravel().tolist(), np.exp(b).ravel().tolist(), policy, between_cv=cv
        )
    history = _summaries(mean[: sc.k], sd[: sc.k], sc.runs)
    new = _summaries(mean[sc.k :], sd[sc.k :], sc.runs)
    if sc.donors and sc.k < policy.min_history:
        spread = pooled_spread([("other", other)], policy.min_history, own=history)
        assert spread is not None
        return against_history_borrowed(new, history, spread, policy)
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
    toks = np.exp(logs[:, sc.donors :])
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


# ------------------------------------------------------------------ drift over nights

STEP_NIGHT = 20  # nights of history before the change
AFTER = 15  # nights simulated after it
NOISES = ((0.02, 0.015, 1), (0.02, 0.015, 3), (0.03, 0.035, 1), (0.03, 0.035, 3))


@dataclass(frozen=True)
class Drift:
    within: float
    between: float
    sessions: int  # server sessions per night
    change: float  # total drop, e.g. 0.03
    ramp: int = 1  # nights over which it builds up (1: a step)

    @property
    def label(self) -> str:
        kind = "step" if self.ramp == 1 else f"linear over {self.ramp} nights"
        return f"{self.change:.0%} {kind}"


DRIFTS = tuple(
    Drift(w, b, k, c, r)
    for w, b, k in NOISES
    for c, r in ((0.02, 1), (0.03, 1), (0.05, 1), (0.05, 10))
)


def night_means(
    rng: np.random.Generator, sc: Drift | None, n: int, w: float, b: float, sessions: int
) -> Logs:
    """ln tok/s of n nights, each the mean of ``sessions`` sessions of 5 runs; the drop (if
    any) starts at night STEP_NIGHT."""
    effects = rng.normal(0.0, b, (n, sessions)) + rng.normal(0.0, w, (n, sessions, 5)).mean(2)
    logs: Logs = math.log(100.0) + effects.mean(axis=1)
    if sc is not None:
        for t in range(STEP_NIGHT, n):
            logs[t] += math.log1p(-sc.change * min(1.0, (t - STEP_NIGHT + 1) / sc.ramp))
    return logs


def as_nights(logs: Logs) -> list[Night]:
    return [Night(f"n{i:03d}", float(v), 1, None, None, None) for i, v in enumerate(logs)]


def first_found(logs: Logs, sc: Drift, policy: HistoryPolicy) -> tuple[int | None, int | None]:
    """Nights after the change (1 = the first changed night) until (a) the history lists a
    drop whose change point lies at the change (±1 night; a ramp: within it) and (b) the
    nightly gate (history.drift) reports it."""
    last = STEP_NIGHT + sc.ramp
    listed = gated = None
    series = as_nights(logs)
    for t in range(STEP_NIGHT + 1, len(logs) + 1):
        x = logs[:t]
        if listed is None and any(
            STEP_NIGHT - 1 <= c <= last and x[c:].mean() < x[:c].mean()
            for c in detect(list(x), policy)
        ):
            listed = t - STEP_NIGHT
        if gated is None:
            found = drift(series[: t - 1], series[t - 1 : t], policy)
            if found is not None and STEP_NIGHT - 1 <= found.index <= last:
                gated = t - STEP_NIGHT
        if listed is not None and gated is not None:
            break
    return listed, gated


def false_points(logs: Logs, policy: HistoryPolicy) -> tuple[int, int]:
    """On stationary nights: change points `specdec history` lists over the whole series,
    and nights on which the nightly gate would report a drift."""
    series = as_nights(logs)
    alarms = sum(
        drift(series[: t - 1], series[t - 1 : t], policy) is not None
        for t in range(2 * policy.min_size + 1, len(series) + 1)
    )
    return len(detect(list(logs), policy)), alarms


def _share(delays: Sequence[int | None], within: int) -> str:
    return f"{sum(d is not None and d <= within for d in delays) / len(delays):.0%}"


def drift_rows(trials: int, seed: int, policy: HistoryPolicy) -> list[str]:
    rows = []
    for i, (w, b, k) in enumerate(NOISES):
        rng = np.random.default_rng([seed, 100 + i])
        counts = [false_points(night_means(rng, None, 100, w, b, k), policy) for _ in range(trials)]
        listed_rate, gate_rate = (sum(c[j] for c in counts) / trials for j in (0, 1))
        rows.append(f"| {w:.0%} / {b:.1%} | {k} | no change, 100 nights | - | - | - | - | "
                    f"{listed_rate:.2f} | {gate_rate:.2f} |")  # fmt: skip
    for j, sc in enumerate(DRIFTS):
        rng = np.random.default_rng([seed, j])
        found = [
            first_found(night_means(rng, sc, STEP_NIGHT + AFTER, sc.within, sc.between,
                                    sc.sessions), sc, policy)
            for _ in range(trials)
        ]  # fmt: skip
        listed, gated = [f[0] for f in found], [f[1] for f in found]
        known = [d for d in listed if d is not None]
        median = f"{np.median(known):.0f}" if known else "-"
        rows.append(f"| {sc.within:.0%} / {sc.between:.1%} | {sc.sessions} | {sc.label} | "
                    f"{_share(listed, 5)} | {_share(listed, AFTER)} | {median} | "
                    f"{_share(gated, 5)} | - | - |")  # fmt: skip
    return rows


DRIFT_HEADER = (
    "| noise (within / between) | sessions a night | change at night 20 | listed within 5 "
    f"nights | listed within {AFTER} | nights to list (median) | gate reports within 5 nights "
    "| change points listed per 100 stationary nights | gate alarms per 100 stationary nights "
    "|\n|---|---|---|---|---|---|---|---|---|"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000, help="nights per cell (4000)")
    parser.add_argument("--seed", type=int, default=20240601, help="random seed (20240601)")
    parser.add_argument("--drift", action="store_true",
                        help="the change-point table instead (docs/history.md)")  # fmt: skip
    history = HistoryPolicy()
    parser.add_argument("--penalty", type=float, default=history.penalty)
    parser.add_argument("--min-size", type=int, default=history.min_size)
    parser.add_argument("--history-alpha", type=float, default=history.alpha)
    parser.add_argument("--gate-alpha", type=float, default=history.gate_alpha)
    defaults = VerdictPolicy()
    parser.add_argument("--alpha", type=float, default=defaults.alpha)
    parser.add_argument("--min-delta", type=float, default=defaults.min_delta)
    parser.add_argument("--cv-multiplier", type=float, default=defaults.cv_multiplier)
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials must be >= 1, got {args.trials}")
    if args.drift:
        hp = HistoryPolicy(
            penalty=args.penalty, min_size=args.min_size, alpha=args.history_alpha,
            gate_alpha=args.gate_alpha,
        )  # fmt: skip
        start = time.perf_counter()
        print(f"change points: {hp}; {args.trials} series per row, seed {args.seed}\n")
        print(DRIFT_HEADER)
        for line in drift_rows(args.trials, args.seed, hp):
            print(line, flush=True)
        print(f"\n{time.perf_counter() - start:.0f} s")
        return 0
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
