"""How often ``specdec bisect`` names the right first-bad candidate, and what it costs, over
seeded series of candidates with one step change, at measured noise; against a plain bisection
that trusts one session a step.

The noise-aware bisect is the real search (pytest_specdec/bisect: run.bisect, step.run_step,
the verdict engine's judge_reference and sequential plan); only the measurer is simulated:
a session's runs are the candidate's true log speed + a session effect ~ N(0, between CV) +
per-run noise ~ N(0, within CV). The plain bisection measures one session of the middle
candidate and one of the good one per step and calls it bad when it reads more than δ slower.

    python bench/bisect_sim.py                 # the table in docs/bisect.md (seed 20240601)
    python bench/bisect_sim.py --trials 100    # quicker
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_specdec.bisect.candidates import Candidate
from pytest_specdec.bisect.run import FOUND, Search, bisect
from pytest_specdec.bisect.search import BAD, GOOD, bounds, next_index
from pytest_specdec.bisect.step import StepPlan, StepRecord, step_plan
from pytest_specdec.verdict.judge import Judgement, judge_reference
from pytest_specdec.verdict.sessions import suite_session_logs
from pytest_specdec.verdict.stats import VerdictPolicy

PROMPT = "suite"


@dataclass(frozen=True)
class Noise:
    label: str
    within: float  # run-to-run CV inside a session
    between: float  # session-to-session CV
    source: str


# Measured figures (see docs/bisect.md for where each comes from).
NOISES = (
    Noise("H200", 0.03, 0.035, "docs/statistics.md: llama.cpp CUDA on an H200"),
    Noise("CPU", 0.05, 0.10, "docs/statistics.md: shared 2-core CPU, between 10-25%"),
)


class SimMeasurer:
    """Sessions drawn from the noise model; judged by the real verdict engine."""

    def __init__(self, speeds: Sequence[float], noise: Noise, runs: int, rng: np.random.Generator):
        self.speeds, self.noise, self.runs, self.rng = speeds, noise, runs, rng
        self.configs: dict[str, dict[str, object]] = {}
        self.sessions = 0

    def start_step(self, index: int, names: Sequence[str]) -> None:
        self.configs = {n: {"name": n, "runs": []} for n in names}

    def session(self, name: str) -> float:
        cfg = self.configs[name]
        runs: list[dict[str, object]] = cfg["runs"]  # type: ignore[assignment]
        number = 1 + len(runs) // self.runs
        effect = self.rng.normal(0, self.noise.between)
        logs = self.speeds[int(name)] + effect + self.rng.normal(0, self.noise.within, self.runs)
        for x in logs:
            runs.append({"phase": "measure", "prompt": PROMPT, "session": number,
                         "tok_per_s": 100 * math.exp(x)})  # fmt: skip
        self.sessions += 1
        return 1.0

    def judge(self, name: str, good: str, policy: VerdictPolicy) -> Judgement:
        doc = {"workload": {"prompts": [PROMPT]}}
        return judge_reference(doc, self.configs[name], self.configs[good], policy)

    def session_logs(self, name: str) -> list[float]:
        return suite_session_logs(self.configs[name], [PROMPT])

    def end_step(self) -> None:
        self.configs = {}


def series(n: int, step: float, rng: np.random.Generator) -> tuple[list[float], int]:
    """True log speeds of n candidates: the first bad at a random position in 1..n-1."""
    first = int(rng.integers(1, n))
    return [0.0 if i < first else math.log1p(-step) for i in range(n)], first


def aware(speeds: list[float], noise: Noise, plan: StepPlan, runs: int,
          rng: np.random.Generator) -> tuple[str | None, int, int]:  # fmt: skip
    cands = [Candidate(str(i), i, server="sim") for i in range(len(speeds))]
    m = SimMeasurer(speeds, noise, runs, rng)
    steps: list[StepRecord] = []
    done = bisect(Search(cands, 0, len(cands) - 1), m, plan, steps, lambda s: None)
    return (done.first_bad if done.status == FOUND else None), len(steps), m.sessions


def plain(speeds: list[float], noise: Noise, delta: float, runs: int,
          rng: np.random.Generator) -> tuple[str | None, int, int]:  # fmt: skip
    """One session of the middle and one of the good candidate per step, trusted."""

    def session(i: int) -> float:
        effect = rng.normal(0, noise.between)
        return float(np.mean(speeds[i] + effect + rng.normal(0, noise.within, runs)))

    marks: dict[int, str] = {}
    n, steps = len(speeds), 0
    while (nxt := next_index(bounds(0, n - 1, marks))) is not None:
        steps += 1
        marks[nxt] = BAD if session(nxt) - session(0) < math.log1p(-delta) else GOOD
    return str(bounds(0, n - 1, marks).hi), steps, 2 * steps


@dataclass
class Cell:
    right: int = 0
    wrong: int = 0
    undecided: int = 0
    steps: float = 0.0
    sessions: float = 0.0


def run_cell(kind: str, noise: Noise, n: int, step: float, trials: int, plan: StepPlan,
             runs: int, seed: int) -> Cell:  # fmt: skip
    rng = np.random.default_rng(seed)
    cell, steps, sessions = Cell(), [], []
    for _ in range(trials):
        speeds, first = series(n, step, rng)
        if kind == "aware":
            named, k, s = aware(speeds, noise, plan, runs, rng)
        else:
            named, k, s = plain(speeds, noise, plan.base.min_delta, runs, rng)
        cell.right += named == str(first)
        cell.undecided += named is None
        cell.wrong += named is not None and named != str(first)
        steps.append(k)
        sessions.append(s)
    cell.steps, cell.sessions = statistics.fmean(steps), statistics.fmean(sessions)
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--runs", type=int, default=5, help="runs per session")
    ap.add_argument("--max-sessions", type=int, default=32)
    ap.add_argument("--min-delta", type=float, default=None,
                    help="δ of every row (default: half the row's step, as docs/bisect.md "
                    "advises)")  # fmt: skip
    ap.add_argument("--sizes", default="8,16,32,64")
    ap.add_argument("--steps", default="0.05,0.10,0.30")
    ap.add_argument("--noise", default="H200,CPU", help="noise models to run")
    args = ap.parse_args()

    def plan_for(step: float) -> StepPlan:
        delta = args.min_delta if args.min_delta is not None else step / 2
        return step_plan(VerdictPolicy(min_delta=delta), args.max_sessions)

    first = plan_for(0.05)
    delta = f"{args.min_delta:.1%}" if args.min_delta is not None else "half the step"
    print(f"# {args.trials} series per cell, seed {args.seed}, {args.runs} runs a session, "
          f"δ {delta}, looks {first.looks} (alpha per look "
          f"{first.sequential.alpha_look:.4f})")  # fmt: skip
    print("| noise (within / between) | step | δ | candidates | bisect | right first-bad | wrong "
          "| undecided | steps | sessions |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    for noise in (n for n in NOISES if n.label in args.noise.split(",")):
        for step in (float(s) for s in args.steps.split(",")):
            plan = plan_for(step)
            for n in (int(x) for x in args.sizes.split(",")):
                for kind, label in (("aware", "noise-aware"), ("plain", "plain, 1 session")):
                    seed = args.seed + n + int(step * 1000)
                    c = run_cell(kind, noise, n, step, args.trials, plan, args.runs, seed)
                    t = args.trials
                    print(f"| {noise.label} {noise.within:.0%} / {noise.between:.1%} | "
                          f"{step:.0%} | {plan.base.min_delta:.1%} | {n} | {label} | "
                          f"{c.right / t:.1%} | {c.wrong / t:.1%} | {c.undecided / t:.1%} | "
                          f"{c.steps:.1f} | {c.sessions:.1f} |", flush=True)  # fmt: skip
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
