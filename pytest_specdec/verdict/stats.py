"""Verdict maths: is a config slower, faster, the same, or not yet known?

Everything here works on ln(tok/s). Ratios are ratios of geometric means and come
with a confidence interval. The replication unit is one server session; see
``docs/statistics.md`` for the rules, the defaults and how they were calibrated.
Pure functions: no I/O, nothing from pytest or another layer.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from statistics import fmean

from pytest_specdec.verdict import methods
from pytest_specdec.verdict.numbers import (
    check_range,
    drop_fraction,
    log_values,
    mean_sd,
    smallest_n,
    t_cdf,
    t_ppf,
)

_TINY = 1e-12  # a log-space spread below this counts as zero
_MAX_DELTA = 0.99  # δ is capped so that ln(1 - δ) stays finite
_DASH = "\u2013"


class Outcome(str, enum.Enum):
    REGRESSED = "REGRESSED"
    IMPROVED = "IMPROVED"
    UNCHANGED = "UNCHANGED"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class SessionSummary:
    """One server session of one (config, prompt): the replication unit."""

    n: int
    mean_log: float
    sd_log: float

    def __post_init__(self) -> None:
        check_range("SessionSummary.n", self.n, self.n >= 1, "an integer >= 1")
        check_range(
            "SessionSummary.mean_log", self.mean_log, math.isfinite(self.mean_log), "finite"
        )
        ok = math.isfinite(self.sd_log) and self.sd_log >= 0
        check_range("SessionSummary.sd_log", self.sd_log, ok, "finite and >= 0")

    @classmethod
    def from_values(cls, toks_per_s: Sequence[float]) -> SessionSummary:
        return _summary(toks_per_s, "toks_per_s")

    @property
    def geometric_mean(self) -> float:
        return math.exp(self.mean_log)


@dataclass(frozen=True)
class VerdictPolicy:
    """Knobs of the verdict rules. Defaults are the calibrated ones (docs/statistics.md)."""

    alpha: float = 0.01
    min_delta: float = 0.03
    cv_multiplier: float = 2.0
    power: float = 0.8
    min_history: int = 5
    ci_level: float = 0.90
    accept_delta: float = 0.01  # δ of the acceptance verdict (accept length, relative)

    def __post_init__(self) -> None:
        a, d, c, p, k, ci = (self.alpha, self.min_delta, self.cv_multiplier, self.power,
                             self.min_history, self.ci_level)  # fmt: skip
        check_range("VerdictPolicy.alpha", a, 0 < a < 0.5, "in (0, 0.5)")
        check_range("VerdictPolicy.min_delta", d, 0 <= d < _MAX_DELTA, f"in [0, {_MAX_DELTA})")
        check_range("VerdictPolicy.cv_multiplier", c, 0 <= c < math.inf, "finite and >= 0")
        check_range("VerdictPolicy.power", p, 0 < p < 1, "in (0, 1)")
        ok_k = isinstance(k, int) and not isinstance(k, bool) and k >= 2
        check_range("VerdictPolicy.min_history", k, ok_k, "an integer >= 2")
        check_range("VerdictPolicy.ci_level", ci, 0 < ci < 1, "in (0, 1)")
        ad = self.accept_delta
        check_range("VerdictPolicy.accept_delta", ad, 0 <= ad < _MAX_DELTA, f"in [0, {_MAX_DELTA})")


DEFAULT_POLICY = VerdictPolicy()


@dataclass(frozen=True)
class Spread:
    """Learnt elsewhere than the judged history (``source``): the between-session CV ``sd`` with
    ``df``, and the run-to-run variance of ln tok/s with its df (``runs``)."""

    sd: float
    df: float
    source: str
    runs: tuple[float, int] = (0.0, 0)


@dataclass(frozen=True)
class Verdict:
    """One comparison. ``n_new``/``n_ref`` count sessions for "prediction-interval" and
    "borrowed-spread", runs otherwise (pooled history runs for "welch-provisional")."""

    outcome: Outcome
    ratio: float
    ci_low: float
    ci_high: float
    p_regress: float
    p_improve: float
    p_adjusted: float | None
    mde: float
    n_new: int
    n_ref: int
    delta: float
    between_cv: float | None
    method: str
    provisional: bool
    runs_needed: int | None
    explanation: str
    alpha: float
    ci_level: float
    se_log: float  # standard error of ln(ratio); inf when it cannot be estimated
    df: float  # degrees of freedom of the t reference (0.0 when there is no test)
    issue: str | None = None  # why no test was possible (degenerate input), else None
    spread_source: str | None = None  # "borrowed-spread": whose sessions gave the spread

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.REGRESSED

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the outcome as its name, non-finite numbers as None."""
        out: dict[str, object] = asdict(self)
        out["outcome"] = self.outcome.value
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        return out


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(fmean(log_values(values, "values")))


def between_session_cv(history: Sequence[SessionSummary]) -> float | None:
    """Session-to-session spread in log space (≈ CV), None with fewer than 2 sessions.

    Variance of the session means minus the part the within-session noise explains
    (mean of sd²/n), floored at zero."""
    if len(history) < 2:
        return None
    _, s = mean_sd([h.mean_log for h in history])
    within = fmean(h.sd_log**2 / h.n for h in history)
    return math.sqrt(max(0.0, s**2 - within))


def decision_delta(policy: VerdictPolicy, between_cv: float | None) -> float:
    """δ = max(min_delta, cv_multiplier * between-session CV), capped below 1."""
    if between_cv is None:
        return policy.min_delta
    return min(_MAX_DELTA, max(policy.min_delta, policy.cv_multiplier * between_cv))


def _se_factor(method: str, n_new: int, n_ref: int, k: int) -> float:
    """How the standard error shrinks with k more runs or sessions (A/B: on both sides)."""
    grow_ref = k if method == "welch" else 0
    now = 1 / n_new + 1 / n_ref
    return math.sqrt((1 / (n_new + k) + 1 / (n_ref + grow_ref)) / now)


def _resolved(v: Verdict, k: int, policy: VerdictPolicy) -> bool:
    """Would k more runs/sessions (same estimate, same noise) give MDE ≤ δ and a decision?"""
    se = v.se_log * _se_factor(v.method, v.n_new, v.n_ref, k)
    df = v.df + {"welch": 2 * k, "welch-provisional": k}.get(v.method, 0)
    t_a = t_ppf(1 - policy.alpha, df)
    lr, lo, hi = math.log(v.ratio), math.log1p(-v.delta), math.log1p(v.delta)
    if (t_a + t_ppf(policy.power, df)) * se > -lo:
        return False
    if lo < lr < hi:
        half = t_ppf((1 + policy.ci_level) / 2, df) * se
        return lo < lr - half and lr + half < hi
    return t_a * se < abs(lr)


def _further(v: Verdict, policy: VerdictPolicy) -> int | None:
    return smallest_n(lambda k: _resolved(v, k, policy), 1, methods.further_cap(v.method))


@dataclass(frozen=True)
class TostResult:
    p_lower: float  # H0: ratio <= 1 - δ
    p_upper: float  # H0: ratio >= 1 + δ
    p: float  # max of the two
    equivalent: bool  # p < (1 - ci_level) / 2, i.e. the CI lies inside (1 - δ, 1 + δ)


def tost(
    log_ratio: float, se: float, df: float, delta: float, *, ci_level: float = 0.90
) -> TostResult:
    """Two one-sided t tests of equivalence with bounds ratio in (1 - δ, 1 + δ),
    i.e. ln(1 - δ) .. ln(1 + δ) in log space; each side at level (1 - ci_level)/2."""
    check_range("se", se, math.isfinite(se) and se > 0, "finite and > 0")
    check_range("delta", delta, 0 < delta < 1, "in (0, 1)")
    p_lower = t_cdf(-(log_ratio - math.log1p(-delta)) / se, df)
    p_upper = t_cdf((log_ratio - math.log1p(delta)) / se, df)
    p = max(p_lower, p_upper)
    return TostResult(p_lower, p_upper, p, p < (1 - ci_level) / 2)


def _decide(v: Verdict, p_regress: float, p_improve: float, alpha: float) -> Outcome:
    if p_regress < alpha and 1 - v.ratio >= v.delta:
        return Outcome.REGRESSED
    if p_improve < alpha and v.ratio - 1 >= v.delta:
        return Outcome.IMPROVED
    if (
        v.delta > 0
        and tost(math.log(v.ratio), v.se_log, v.df, v.delta, ci_level=v.ci_level).equivalent
    ):
        return Outcome.UNCHANGED
    return Outcome.INCONCLUSIVE


def _explain(v: Verdict) -> str:
    tag = v.outcome.value + (" (provisional)" if v.provisional else "")
    unit = methods.more_unit(v.method)
    if v.issue is not None:
        return f"{tag}: {v.issue}; ratio {v.ratio:.3f}x"
    head = f"{tag}: {v.ratio:.3f}x ({v.ci_level:.0%} CI {v.ci_low:.3f}{_DASH}{v.ci_high:.3f})"
    slower = v.ratio < 1
    p = v.p_regress if slower else v.p_improve
    p_txt = f"p={p:.2g}" + ("" if v.p_adjusted is None else f" (Holm {v.p_adjusted:.2g})")
    change = f"{'drop' if slower else 'gain'} {abs(v.ratio - 1):.1%}"
    d = f"δ {v.delta:.1%}"
    if v.outcome in (Outcome.REGRESSED, Outcome.IMPROVED):
        return f"{head}, {p_txt} < {v.alpha:.3g} and {change} ≥ {d}"
    if v.outcome is Outcome.UNCHANGED:
        bounds = f"{1 - v.delta:.3f}{_DASH}{1 + v.delta:.3f}"
        return f"{head} inside ±{d} ({bounds}); {p_txt}, MDE {v.mde:.1%}"
    p_eff = p if v.p_adjusted is None else v.p_adjusted
    why = f"{p_txt} ≥ {v.alpha:.3g}" if p_eff >= v.alpha else f"{p_txt} but {change} < {d}"
    if v.runs_needed is not None:
        more = f"~{v.runs_needed} more {unit} would decide it"
    else:
        more = f"over {methods.further_cap(v.method)} more {unit} would be needed"
        if v.method in methods.SESSION_METHODS:
            more += f"; lengthen the history ({v.n_ref})"
    return f"{head}, {why}, CI not inside ±{d}; MDE {v.mde:.1%} (n {v.n_new} vs {v.n_ref}); {more}"


def explain_verdict(v: Verdict) -> str:
    """The explanation, and for a borrowed spread whose it is."""
    text = _explain(v)
    if v.spread_source is None or v.issue is not None:
        return text
    return (f"{text}; the spread between sessions ({v.between_cv:.1%}, df {v.df:g}) borrowed "
            f"from {v.spread_source}")  # fmt: skip


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))


def _build(
    lr: float, se: float, df: float, n: tuple[int, int], delta: float, between_cv: float | None,
    method: str, issue: str | None, policy: VerdictPolicy, source: str | None = None,
) -> Verdict:  # fmt: skip
    """A verdict from ln(ratio), its standard error and df; ``issue`` when no test is possible."""
    if issue is None:
        half = t_ppf((1 + policy.ci_level) / 2, df) * se
        x_mde = (t_ppf(1 - policy.alpha, df) + t_ppf(policy.power, df)) * se
        lo, hi = _exp(lr - half), _exp(lr + half)
        p_r, p_i = t_cdf(lr / se, df), t_cdf(-lr / se, df)
        mde_x = drop_fraction(x_mde)
    else:  # unbounded CI, no evidence either way
        lo, hi, p_r, p_i, mde_x, se, df = 0.0, math.inf, 1.0, 1.0, 1.0, math.inf, 0.0
    v = Verdict(
        Outcome.INCONCLUSIVE, _exp(lr), lo, hi, p_r, p_i, None, mde_x, n[0], n[1], delta,
        between_cv, method, method in methods.PROVISIONAL_METHODS, None, "", policy.alpha,
        policy.ci_level, se, df, issue, source,
    )  # fmt: skip
    if issue is not None:
        return replace(v, explanation=explain_verdict(v))
    return _settle(v, p_r, p_i, None, policy)


def _settle(
    v: Verdict, p_regress: float, p_improve: float, p_adj: float | None, policy: VerdictPolicy
) -> Verdict:
    outcome = _decide(v, p_regress, p_improve, policy.alpha)
    further = _further(v, policy) if outcome is Outcome.INCONCLUSIVE else None
    v = replace(v, alpha=policy.alpha, p_adjusted=p_adj, outcome=outcome, runs_needed=further)
    return replace(v, explanation=explain_verdict(v))


def _summary(values: Sequence[float], name: str) -> SessionSummary:
    logs = log_values(values, name)
    return SessionSummary(len(logs), *mean_sd(logs))


def _pool(sessions: Sequence[SessionSummary]) -> SessionSummary:
    """All runs of several sessions as one sample (mean and sd from the summaries)."""
    n = sum(s.n for s in sessions)
    mean = math.fsum(s.n * s.mean_log for s in sessions) / n
    ss = math.fsum((s.n - 1) * s.sd_log**2 + s.n * (s.mean_log - mean) ** 2 for s in sessions)
    return SessionSummary(n, mean, math.sqrt(ss / (n - 1)) if n > 1 else 0.0)


def _welch(
    a: SessionSummary, b: SessionSummary, between_cv: float | None, provisional: bool,
    policy: VerdictPolicy,
) -> Verdict:  # fmt: skip
    method = "welch-provisional" if provisional else "welch"
    va, vb = a.sd_log**2 / a.n, b.sd_log**2 / b.n
    se, issue, df = math.sqrt(va + vb), None, 0.0
    if min(a.n, b.n) < 2:
        issue = f"need >= 2 runs per side to estimate noise (got {a.n} new, {b.n} reference)"
    elif se <= _TINY:
        issue = "no run-to-run variation on either side: the noise cannot be estimated"
    else:
        df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    delta = decision_delta(policy, between_cv)
    lr = a.mean_log - b.mean_log
    return _build(lr, se, df, (a.n, b.n), delta, between_cv, method, issue, policy)


def welch_log(
    new: Sequence[float], ref: Sequence[float], policy: VerdictPolicy = DEFAULT_POLICY, *,
    between_cv: float | None = None, provisional: bool = False,
) -> Verdict:  # fmt: skip
    """Welch t on ln(tok/s) of two samples (an A/B in one run, or a short baseline): session
    means (two sessions or more a side: sessions are the unit), or pooled runs, provisional."""
    return _welch(_summary(new, "new"), _summary(ref, "ref"), between_cv, provisional, policy)


def against_history_sessions(
    new: Sequence[SessionSummary], history: Sequence[SessionSummary],
    policy: VerdictPolicy = DEFAULT_POLICY,
) -> Verdict:  # fmt: skip
    """m new sessions against K past sessions.

    K >= min_history: the mean of the m new session means against the K past means, t with
    K-1 df and scale s·√(1/m + 1/K) (m = 1: the one-sided prediction-interval test).
    K < min_history: Welch between the pooled runs of each side, provisional, δ at its floor
    as compare.history_verdict judges (two boots' spread made δ 33% on an H200)."""
    if not history:
        raise ValueError("history is empty: a baseline needs at least one session summary")
    if not new:
        raise ValueError("new is empty: need at least one new session")
    if len(history) < policy.min_history:
        return _welch(_pool(new), _pool(history), None, True, policy)
    between = between_session_cv(history)
    k, m = len(history), len(new)
    mean_ref, s = mean_sd([h.mean_log for h in history])
    lr = fmean(x.mean_log for x in new) - mean_ref
    issue = None if s > _TINY else f"the {k} past session means are identical: spread unknown"
    se, delta = s * math.sqrt(1 / m + 1 / k), decision_delta(policy, between)
    return _build(lr, se, k - 1, (m, k), delta, between, "prediction-interval", issue, policy)


def pooled_spread(
    groups: Sequence[tuple[str, Sequence[SessionSummary]]], min_sessions: int,
    own: Sequence[SessionSummary] = (),
) -> Spread | None:  # fmt: skip
    """The between-session spread over ``groups`` (name, sessions) with ``min_sessions`` or more
    and ``own`` (the judged history) from two: the pooled variance of session means V less the
    part the runs explain W (mean of sd²/n), floored at 0 as in ``between_session_cv``, with
    Satterthwaite's df for V - W. None when no group has that many sessions."""
    used = [(name, list(sessions)) for name, sessions in groups
            if len(sessions) >= max(2, min_sessions)]  # fmt: skip
    if not used:
        return None
    names = ", ".join(f"{name} ({len(sessions)} sessions)" for name, sessions in used)
    if len(own) >= 2:
        used.append(("", list(own)))
        names += f" and this config's own {len(own)}"
    df = sum(len(ss) - 1 for _, ss in used)
    v = math.fsum((len(ss) - 1) * mean_sd([h.mean_log for h in ss])[1] ** 2 for _, ss in used) / df
    w = math.fsum((len(ss) - 1) * fmean(h.sd_log**2 / h.n for h in ss) for _, ss in used) / df
    dof_w = sum(h.n - 1 for _, ss in used for h in ss)
    run_var = math.fsum((h.n - 1) * h.sd_log**2 for _, ss in used for h in ss) / max(1, dof_w)
    net = max(0.0, v - w)
    parts = v**2 / df + (w**2 / dof_w if dof_w else 0.0)
    return Spread(math.sqrt(net), net**2 / parts if net > 0 else float(df), names, (run_var, dof_w))


def against_history_borrowed(
    new: Sequence[SessionSummary], history: Sequence[SessionSummary], spread: Spread,
    policy: VerdictPolicy = DEFAULT_POLICY,
) -> Verdict:  # fmt: skip
    """m new sessions' mean of means against K < min_history past ones', with the between-session
    spread s_b learnt elsewhere (``spread``) and the run-to-run noise s_w of the judged config's
    sessions (the lenders' if each ran once): Var = s_b²(1/m + 1/K) + s_w²(Σ1/n_new / m² +
    Σ1/n_past / K²), df by Satterthwaite, δ from s_b. Provisional; calibrated when the borrowed
    spread is the judged config's too."""
    if not history or not new:
        raise ValueError("against_history_borrowed needs at least one session on each side")
    k, m = len(history), len(new)
    lr = fmean(x.mean_log for x in new) - fmean(h.mean_log for h in history)
    own, dof = (*new, *history), sum(s.n - 1 for s in (*new, *history))
    within = math.fsum((s.n - 1) * s.sd_log**2 for s in own) / dof if dof else spread.runs[0]
    dof = dof or spread.runs[1]
    between = spread.sd**2 * (1 / m + 1 / k)
    runs = within * (math.fsum(1 / s.n for s in new) / m**2
                     + math.fsum(1 / h.n for h in history) / k**2)  # fmt: skip
    se = math.sqrt(between + runs)
    parts = between**2 / spread.df + (runs**2 / dof if dof else 0.0)
    df = (between + runs) ** 2 / parts if parts > 0 else float(spread.df)
    issue = None if se > _TINY else "no spread between sessions or runs: noise unknown"
    delta = decision_delta(policy, spread.sd)
    return _build(lr, se, df, (m, k), delta, spread.sd, "borrowed-spread", issue, policy,
                  spread.source)  # fmt: skip


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (monotone, capped at 1), in input order."""
    for i, p in enumerate(pvalues):
        check_range(f"pvalues[{i}]", p, 0 <= p <= 1, "in [0, 1]")
    m = len(pvalues)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def adjust_verdicts(
    verdicts: Sequence[Verdict], policy: VerdictPolicy = DEFAULT_POLICY
) -> list[Verdict]:
    """Holm across the verdicts (one family per direction) and decide again with the
    adjusted p-values. ``p_adjusted`` is the one for the direction of the estimate."""
    adj_r = holm([v.p_regress for v in verdicts])
    adj_i = holm([v.p_improve for v in verdicts])
    out = []
    for v, p_r, p_i in zip(verdicts, adj_r, adj_i, strict=True):
        p_adj = p_r if v.ratio < 1 else p_i
        if v.issue is not None:
            out.append(replace(v, p_adjusted=p_adj))
        else:
            out.append(_settle(v, p_r, p_i, p_adj, policy))
    return out
