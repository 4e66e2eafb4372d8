"""How many runs or sessions a verdict needs: the minimum detectable effect, the runs that
bring it to δ, and group-sequential plans (looks after each session or run at one nominal
alpha, found by simulation) for adaptive runs. See docs/statistics.md."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from pytest_specdec.verdict.numbers import check_range, drop_fraction, smallest_n, t_ppf
from pytest_specdec.verdict.stats import DEFAULT_POLICY, Outcome, Verdict, VerdictPolicy


def mde(
    cv: float, n: int, policy: VerdictPolicy = DEFAULT_POLICY, *, two_sample: bool = True
) -> float:
    """Smallest drop (fraction) detected with ``policy.power`` at one-sided ``policy.alpha``:
    (t(1-alpha) + t(power))·CV·√(2/n), df 2n-2 (one-sample: CV·√(1/n), df n-1). 1.0 when n < 2."""
    check_range("cv", cv, math.isfinite(cv) and cv >= 0, "finite and >= 0")
    if n < 2:
        return 1.0
    df, k = (2 * n - 2, 2.0) if two_sample else (n - 1, 1.0)
    t_sum = t_ppf(1 - policy.alpha, df) + t_ppf(policy.power, df)
    return drop_fraction(t_sum * cv * math.sqrt(k / n))


def history_mde(cv: float, k: int, m: int = 1, policy: VerdictPolicy = DEFAULT_POLICY) -> float:
    """MDE of the prediction-interval test (against_history_sessions): ``m`` new sessions
    against ``k`` stored ones whose means spread by ``cv`` (log sd): (t(1-alpha) + t(power)),
    df k-1, times cv·√(1/m + 1/k)."""
    check_range("cv", cv, math.isfinite(cv) and cv >= 0, "finite and >= 0")
    check_range("k", k, k >= 2, "an integer >= 2 (stored sessions)")
    check_range("m", m, m >= 1, "an integer >= 1 (new sessions)")
    t_sum = t_ppf(1 - policy.alpha, k - 1) + t_ppf(policy.power, k - 1)
    return drop_fraction(t_sum * cv * math.sqrt(1 / m + 1 / k))


def runs_needed(
    cv: float, delta: float, policy: VerdictPolicy = DEFAULT_POLICY, *,
    two_sample: bool = True, current: int = 0, cap: int = 100_000,
) -> int:  # fmt: skip
    """Further runs (per side when two-sample) that bring the MDE to δ or below."""
    check_range("delta", delta, 0 < delta < 1, "in (0, 1)")
    check_range("cv", cv, math.isfinite(cv) and cv >= 0, "finite and >= 0")
    total = smallest_n(lambda n: mde(cv, n, policy, two_sample=two_sample) <= delta, 2, cap)
    if total is None:
        raise ValueError(f"runs_needed: more than {cap} runs needed for δ {delta} at CV {cv}")
    return max(0, total - current)


@dataclass(frozen=True)
class SequentialPlan:
    """Look after each count in ``looks`` (runs per side for "welch", new sessions for
    "history") and judge every look at ``alpha_look``. Stop at the first decided verdict,
    at the last look, or (futility) once p_regress >= ``futility``: no sign of a drop."""

    looks: tuple[int, ...]
    kind: str
    alpha: float  # overall one-sided false-alarm rate the plan keeps
    alpha_look: float  # nominal one-sided alpha applied at each look
    futility: float | None = 0.5

    def policy(self, base: VerdictPolicy = DEFAULT_POLICY) -> VerdictPolicy:
        return replace(base, alpha=self.alpha_look)

    def stop(self, verdict: Verdict) -> bool:
        fine = self.futility is not None and verdict.p_regress >= self.futility
        decided = verdict.outcome is not Outcome.INCONCLUSIVE
        return decided or fine or verdict.n_new >= self.looks[-1]


def sequential_plan(
    policy: VerdictPolicy = DEFAULT_POLICY, looks: Sequence[int] = (3, 6), *,
    kind: str = "welch", k: int = 10, trials: int = 200_000, seed: int = 0,
) -> SequentialPlan:  # fmt: skip
    """Pocock-style plan: one nominal alpha at every look, found by simulating the t statistics
    under no change so that P(p < alpha_look at any look) = policy.alpha. ``k``: history
    sessions (kind "history"). Deterministic for a given seed."""
    lk = tuple(looks)
    ok = kind in ("welch", "history")
    check_range("kind", kind, ok, '"welch" or "history"')
    low = 2 if kind == "welch" else 1
    good = len(lk) >= 1 and lk[0] >= low and all(a < b for a, b in itertools.pairwise(lk))
    check_range("looks", lk, good, f"increasing counts >= {low}")
    check_range("k", k, kind == "welch" or k >= 2, "an integer >= 2")
    return SequentialPlan(
        lk, kind, policy.alpha, _alpha_look(kind, lk, k, policy.alpha, trials, seed)
    )


@functools.lru_cache(maxsize=64)
def _alpha_look(
    kind: str, looks: tuple[int, ...], k: int, alpha: float, trials: int, seed: int
) -> float:
    """The alpha-quantile of the smallest one-sided p over the looks, simulated with no change."""
    rng, n = np.random.default_rng(seed), looks[-1]
    ps = []
    if kind == "welch":
        a, b = rng.standard_normal((trials, n)), rng.standard_normal((trials, n))
        for m in looks:
            va, vb = a[:, :m].var(1, ddof=1) / m, b[:, :m].var(1, ddof=1) / m
            df = (va + vb) ** 2 / ((va**2 + vb**2) / (m - 1))
            ps.append(special.stdtr(df, (a[:, :m].mean(1) - b[:, :m].mean(1)) / np.sqrt(va + vb)))
    else:
        hist, new = rng.standard_normal((trials, k)), rng.standard_normal((trials, n))
        mean, s = hist.mean(1), hist.std(1, ddof=1)
        for m in looks:
            t = (new[:, :m].mean(1) - mean) / (s * math.sqrt(1 / m + 1 / k))
            ps.append(special.stdtr(k - 1, t))
    return float(np.quantile(np.min(ps, axis=0), alpha))
