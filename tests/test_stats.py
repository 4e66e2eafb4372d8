"""Unit tests of the verdict maths, golden numbers checked against scipy.stats."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats as sps
from tests_support import against_history

from pytest_specdec.verdict.compare import session_verdict
from pytest_specdec.verdict.planning import history_mde, mde, runs_needed
from pytest_specdec.verdict.stats import (
    Outcome,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    adjust_verdicts,
    against_history_borrowed,
    against_history_sessions,
    between_session_cv,
    decision_delta,
    geometric_mean,
    holm,
    pooled_spread,
    tost,
    welch_log,
)
from pytest_specdec.verdict.suite import suite_history, suite_score, suite_session, suite_values

POLICY = VerdictPolicy()


def exact_sample(geo_mean: float, sd_log: float, n: int) -> list[float]:
    """n tok/s values whose logs have exactly this mean and sample sd."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(np.exp(math.log(geo_mean) + sd_log * z))


def session(geo_mean: float, sd_log: float = 0.02, n: int = 5) -> SessionSummary:
    return SessionSummary(n, math.log(geo_mean), sd_log)


# -- SessionSummary, VerdictPolicy ---------------------------------------------------------


def test_session_summary_from_values_matches_numpy() -> None:
    values = [101.0, 97.5, 99.0, 103.2]
    s = SessionSummary.from_values(values)
    logs = np.log(values)
    assert s.n == 4
    assert s.mean_log == pytest.approx(logs.mean(), rel=1e-12)
    assert s.sd_log == pytest.approx(logs.std(ddof=1), rel=1e-12)
    assert s.geometric_mean == pytest.approx(sps.gmean(values), rel=1e-12)


def test_session_summary_one_run_and_identical_runs_have_zero_sd() -> None:
    assert SessionSummary.from_values([50.0]) == SessionSummary(1, math.log(50.0), 0.0)
    assert SessionSummary.from_values([7.0, 7.0, 7.0]).sd_log == 0.0


@pytest.mark.parametrize(
    ("values", "bad"),
    [([10.0, 0.0], "0.0"), ([10.0, -3.0], "-3.0"), ([math.nan], "nan"), ([math.inf], "inf")],
)
def test_session_summary_rejects_bad_values_naming_them(values: list[float], bad: str) -> None:
    with pytest.raises(ValueError, match=rf"toks_per_s\[\d\] = {bad} .*finite and > 0"):
        SessionSummary.from_values(values)


def test_session_summary_rejects_empty_and_bad_fields() -> None:
    with pytest.raises(ValueError, match="empty"):
        SessionSummary.from_values([])
    with pytest.raises(ValueError, match=r"SessionSummary.n = 0"):
        SessionSummary(0, 1.0, 0.0)
    with pytest.raises(ValueError, match=r"SessionSummary.sd_log = -1.0"):
        SessionSummary(3, 1.0, -1.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("alpha", 0.0),
        ("alpha", 0.6),
        ("min_delta", -0.01),
        ("min_delta", 1.0),
        ("cv_multiplier", -1.0),
        ("power", 1.0),
        ("min_history", 1),
        ("min_history", 5.5),
        ("ci_level", 1.5),
    ],
)
def test_policy_validation_names_field_value_and_range(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"VerdictPolicy.{field} = {value!r} .*must be"):
        VerdictPolicy(**{field: value})  # type: ignore[arg-type]


# -- Welch on logs ------------------------------------------------------------------------


def test_welch_matches_scipy_ttest_ind() -> None:
    new, ref = [91.0, 93.5, 90.2, 92.8], [100.0, 103.0, 98.5, 101.2, 99.9]
    v = welch_log(new, ref, VerdictPolicy(alpha=0.05))
    ln, lr = np.log(new), np.log(ref)
    less = sps.ttest_ind(ln, lr, equal_var=False, alternative="less")
    greater = sps.ttest_ind(ln, lr, equal_var=False, alternative="greater")
    assert v.p_regress == pytest.approx(less.pvalue, rel=1e-9)
    assert v.p_improve == pytest.approx(greater.pvalue, rel=1e-9)
    assert v.df == pytest.approx(less.df, rel=1e-9)
    assert v.ratio == pytest.approx(sps.gmean(new) / sps.gmean(ref), rel=1e-12)
    ci = less.confidence_interval(0.95)  # one-sided 95% upper bound = 90% two-sided upper
    assert v.ci_high == pytest.approx(math.exp(ci.high), rel=1e-9)
    assert (v.n_new, v.n_ref, v.method, v.provisional) == (4, 5, "welch", False)


def test_welch_regressed_explanation_reads_like_the_design() -> None:
    v = welch_log(exact_sample(91.2, 0.02, 5), exact_sample(100.0, 0.02, 5))
    assert v.outcome is Outcome.REGRESSED and v.failed
    pattern = (
        r"REGRESSED: 0\.912x \(90% CI 0\.8\d\d\u20130\.9\d\d\), "
        r"p=\S+ < 0\.01 and drop 8\.8% ≥ δ 3\.0%"
    )
    assert re.fullmatch(pattern, v.explanation), v.explanation


def test_welch_improved_is_symmetric() -> None:
    v = welch_log(exact_sample(110.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    assert v.outcome is Outcome.IMPROVED and not v.failed
    assert v.explanation.startswith("IMPROVED: 1.100x") and "gain 10.0%" in v.explanation


def test_significant_change_below_delta_with_tight_ci_is_unchanged() -> None:
    v = welch_log(exact_sample(98.0, 0.002, 5), exact_sample(100.0, 0.002, 5))
    assert v.p_regress < 1e-6
    assert v.outcome is Outcome.UNCHANGED
    assert 0.97 < v.ci_low < v.ci_high < 1.03


def test_noisy_small_sample_is_inconclusive_with_runs_needed() -> None:
    v = welch_log(exact_sample(99.0, 0.04, 3), exact_sample(100.0, 0.04, 3))
    assert v.outcome is Outcome.INCONCLUSIVE and not v.failed
    assert v.runs_needed is not None and v.runs_needed > 0
    assert v.mde > v.delta
    assert f"~{v.runs_needed} more sessions per side would decide it" in v.explanation


def test_an_ab_says_what_more_it_needs_in_its_own_unit() -> None:
    """Two sessions or more a side compare session means: more sessions decide it, not runs
    (an A/B of three boots a side once read "~70 more runs per side"); one session a side
    pools the runs, provisional, and more runs are what it names."""
    noisy = [exact_sample(m, 0.01, 3) for m in (96.0, 100.0, 104.0)]
    ref = [exact_sample(m, 0.01, 3) for m in (97.0, 101.0, 105.0)]
    by_boot = session_verdict(noisy, ref, VerdictPolicy())
    assert by_boot.method == "welch" and (by_boot.n_new, by_boot.n_ref) == (3, 3)
    assert by_boot.outcome is Outcome.INCONCLUSIVE and by_boot.runs_needed is not None
    assert f"~{by_boot.runs_needed} more sessions per side would decide it" in by_boot.explanation
    one_a_side = [exact_sample(99.0, 0.04, 3)], [exact_sample(100.0, 0.04, 3)]
    one = session_verdict(*one_a_side, VerdictPolicy())
    assert one.method == "welch-provisional" and one.outcome is Outcome.INCONCLUSIVE
    assert "more runs would" in one.explanation and "sessions" not in one.explanation


def test_runs_needed_in_a_verdict_is_the_smallest_that_decides() -> None:
    """Same means and spread: runs_needed more runs per side bring MDE ≤ δ and decide."""
    v = welch_log(exact_sample(99.0, 0.04, 3), exact_sample(100.0, 0.04, 3))
    assert v.runs_needed is not None
    n = 3 + v.runs_needed
    done = welch_log(exact_sample(99.0, 0.04, n), exact_sample(100.0, 0.04, n))
    short = welch_log(exact_sample(99.0, 0.04, n - 1), exact_sample(100.0, 0.04, n - 1))
    assert done.outcome is Outcome.UNCHANGED and done.mde <= done.delta
    assert short.outcome is Outcome.INCONCLUSIVE or short.mde > short.delta


def test_between_cv_raises_delta_in_welch() -> None:
    new, ref = exact_sample(95.0, 0.01, 6), exact_sample(100.0, 0.01, 6)
    assert welch_log(new, ref).outcome is Outcome.REGRESSED
    v = welch_log(new, ref, between_cv=0.04)
    assert v.delta == pytest.approx(0.08) and v.between_cv == 0.04
    assert v.outcome is Outcome.UNCHANGED
    assert "inside ±δ 8.0% (0.920\u20131.080)" in v.explanation


@pytest.mark.parametrize(
    ("new", "ref", "issue"),
    [
        ([100.0], [100.0], "need >= 2 runs per side"),
        ([100.0], [90.0, 91.0, 92.0], "got 1 new, 3 reference"),
        ([100.0, 100.0, 100.0], [100.0, 100.0], "no run-to-run variation"),
        ([90.0, 90.0], [100.0, 100.0], "no run-to-run variation"),
    ],
)
def test_degenerate_inputs_are_inconclusive_and_json_clean(
    new: list[float], ref: list[float], issue: str
) -> None:
    v = welch_log(new, ref)
    assert v.outcome is Outcome.INCONCLUSIVE
    assert v.issue is not None and issue in v.issue and issue in v.explanation
    assert (v.p_regress, v.p_improve, v.mde) == (1.0, 1.0, 1.0)
    json.dumps(v.to_dict(), allow_nan=False)  # raises on NaN or inf
    assert v.to_dict()["ci_high"] is None
    assert adjust_verdicts([v])[0].outcome is Outcome.INCONCLUSIVE


def test_zero_variance_on_one_side_still_tests() -> None:
    v = welch_log([100.0, 100.0, 100.0], exact_sample(110.0, 0.02, 4))
    assert v.issue is None and v.df == pytest.approx(3.0)
    assert v.outcome is Outcome.REGRESSED


def test_to_dict_is_json_ready_and_complete() -> None:
    v = welch_log(exact_sample(91.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    d = json.loads(json.dumps(v.to_dict(), allow_nan=False))
    assert d["outcome"] == "REGRESSED"
    assert set(d) == set(Verdict.__dataclass_fields__)
    assert d["ratio"] == pytest.approx(0.91)


# -- against history ---------------------------------------------------------------------


HISTORY_MEANS = [100.0, 103.0, 98.0, 101.5, 99.0, 102.0]


def test_prediction_interval_matches_hand_computation() -> None:
    history = [session(m) for m in HISTORY_MEANS]
    new = exact_sample(95.0, 0.02, 5)
    v = against_history(new, history)
    logs = np.log(HISTORY_MEANS)
    k, s = len(logs), logs.std(ddof=1)
    scale = s * math.sqrt(1 + 1 / k)
    diff = math.log(95.0) - logs.mean()
    assert v.method == "prediction-interval" and not v.provisional
    assert (v.n_new, v.n_ref, v.df) == (1, 6, 5)
    assert v.ratio == pytest.approx(math.exp(diff), rel=1e-9)
    assert v.p_regress == pytest.approx(sps.t.cdf(diff / scale, 5), rel=1e-9)
    assert v.p_improve == pytest.approx(sps.t.sf(diff / scale, 5), rel=1e-9)
    half = sps.t.ppf(0.95, 5) * scale
    assert (v.ci_low, v.ci_high) == pytest.approx((math.exp(diff - half), math.exp(diff + half)))
    x = (sps.t.ppf(0.99, 5) + sps.t.ppf(0.8, 5)) * scale
    assert v.mde == pytest.approx(1 - math.exp(-x), rel=1e-9)


def test_several_new_sessions_shrink_the_scale() -> None:
    history = [session(m) for m in HISTORY_MEANS]
    one = against_history_sessions([session(97.0)], history)
    three = against_history_sessions(
        [session(97.0 / 1.01), session(97.0), session(97.0 * 1.01)], history
    )
    assert three.ratio == pytest.approx(one.ratio, rel=1e-9)
    assert three.se_log == pytest.approx(one.se_log * math.sqrt((1 / 3 + 1 / 6) / (1 + 1 / 6)))
    assert three.n_new == 3 and three.p_regress < one.p_regress


def test_between_session_cv_subtracts_within_noise() -> None:
    history = [session(m, sd_log=0.02, n=5) for m in HISTORY_MEANS]
    s2 = np.log(HISTORY_MEANS).var(ddof=1)
    cv = between_session_cv(history)
    assert cv == pytest.approx(math.sqrt(s2 - 0.02**2 / 5))
    assert between_session_cv(history[:1]) is None
    quiet = [session(100.0, sd_log=0.05), session(100.1, sd_log=0.05)]
    assert between_session_cv(quiet) == 0.0


def test_decision_delta_floor_multiplier_and_cap() -> None:
    assert decision_delta(POLICY, None) == 0.03
    assert decision_delta(POLICY, 0.01) == 0.03
    assert decision_delta(POLICY, 0.035) == pytest.approx(0.07)
    assert decision_delta(POLICY, 5.0) == 0.99


def test_short_history_is_provisional_welch_on_pooled_runs() -> None:
    runs = [[100.0, 102.0, 99.0, 101.0], [97.0, 98.5, 99.5, 98.0], [103.0, 101.0, 102.5, 100.0]]
    history = [SessionSummary.from_values(r) for r in runs]
    new = [95.0, 96.5, 94.0, 97.0, 95.5]
    v = against_history(new, history)
    pooled = np.log(np.concatenate(runs))
    less = sps.ttest_ind(np.log(new), pooled, equal_var=False, alternative="less")
    assert v.method == "welch-provisional" and v.provisional
    assert (v.n_new, v.n_ref) == (5, 12)
    assert v.p_regress == pytest.approx(less.pvalue, rel=1e-9)
    assert v.explanation.startswith(f"{v.outcome.value} (provisional): ")
    # δ at its floor, as the verdicts judge a short history: a spread of a few sessions is
    # too unstable to set it
    assert v.between_cv is None and v.delta == VerdictPolicy().min_delta
    assert between_session_cv(history) is not None


def test_history_of_one_single_run_session_is_inconclusive() -> None:
    v = against_history([100.0, 101.0], [SessionSummary.from_values([90.0])])
    assert v.outcome is Outcome.INCONCLUSIVE and v.provisional
    assert v.issue is not None and "need >= 2 runs" in v.issue


def test_identical_history_means_are_inconclusive() -> None:
    v = against_history([90.0, 91.0, 89.0], [session(100.0)] * 6)
    assert v.outcome is Outcome.INCONCLUSIVE
    assert v.issue is not None and "identical" in v.issue


def test_history_errors_are_named() -> None:
    with pytest.raises(ValueError, match="history is empty"):
        against_history([100.0, 101.0], [])
    with pytest.raises(ValueError, match=r"toks_per_s\[1\] = -1"):
        against_history([100.0, -1], [session(100.0)] * 5)


def test_inconclusive_history_says_how_many_sessions() -> None:
    history = [session(m) for m in HISTORY_MEANS * 2]
    v = against_history(exact_sample(99.0, 0.02, 5), history)
    assert v.outcome is Outcome.INCONCLUSIVE
    assert v.runs_needed is not None
    assert f"~{v.runs_needed} more sessions would decide it" in v.explanation


def test_too_short_history_says_more_history_is_needed() -> None:
    history = [session(m) for m in [100.0, 110.0, 92.0, 104.0, 96.0]]
    v = against_history(exact_sample(99.0, 0.02, 5), history, VerdictPolicy(cv_multiplier=0))
    assert v.outcome is Outcome.INCONCLUSIVE and v.runs_needed is None
    assert "over 100 more sessions would be needed; lengthen the history (5)" in v.explanation


# -- MDE, runs needed, TOST, Holm ---------------------------------------------------------


@pytest.mark.parametrize(("n", "log_mde"), [(3, 0.0502), (5, 0.0348), (8, 0.0263)])
def test_mde_matches_the_reference_table(n: int, log_mde: float) -> None:
    """STATISTICS.md: CV 2%, one-sided alpha 0.05, 80% power → 5.0% / 3.5% / 2.6%."""
    policy = VerdictPolicy(alpha=0.05)
    got = mde(0.02, n, policy)
    df = 2 * n - 2
    expected = (sps.t.ppf(0.95, df) + sps.t.ppf(0.8, df)) * 0.02 * math.sqrt(2 / n)
    assert -math.log1p(-got) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(log_mde, abs=5e-5)


def test_mde_one_sample_and_degenerate() -> None:
    x = (sps.t.ppf(0.99, 4) + sps.t.ppf(0.8, 4)) * 0.03 / math.sqrt(5)
    assert mde(0.03, 5, two_sample=False) == pytest.approx(1 - math.exp(-x))
    assert mde(0.03, 1) == 1.0
    assert mde(0.0, 5) == 0.0


def test_history_mde_is_the_prediction_interval_verdicts_mde() -> None:
    """The MDE a night of m sessions has against K stored ones is the one its verdict reports."""
    rng = np.random.default_rng(3)
    history = [SessionSummary.from_values(list(100 * np.exp(rng.normal(b, 0.01, 4))))
               for b in rng.normal(0, 0.02, 6)]  # fmt: skip
    spread = float(np.std([h.mean_log for h in history], ddof=1))
    tonight = [SessionSummary.from_values([99.0, 100.0, 101.0])]
    verdict = against_history_sessions(tonight, history)
    assert verdict.mde == pytest.approx(history_mde(spread, 6))
    assert history_mde(spread, 6, m=3) < history_mde(spread, 6) < history_mde(spread, 3)
    with pytest.raises(ValueError, match="k = 1"):
        history_mde(0.01, 1)


def test_runs_needed_is_the_smallest_n_with_mde_under_delta() -> None:
    total = runs_needed(0.02, 0.03)
    assert mde(0.02, total) <= 0.03 < mde(0.02, total - 1)
    assert runs_needed(0.02, 0.03, current=5) == total - 5
    assert runs_needed(0.02, 0.03, current=1000) == 0
    with pytest.raises(ValueError, match="delta = 0"):
        runs_needed(0.02, 0)


def test_tost_equivalent_iff_ci_inside_bounds() -> None:
    lr, se, df = math.log(0.99), 0.008, 8
    r = tost(lr, se, df, 0.03)
    assert r.p_lower == pytest.approx(sps.t.sf((lr - math.log(0.97)) / se, df))
    assert r.p_upper == pytest.approx(sps.t.cdf((lr - math.log(1.03)) / se, df))
    half = sps.t.ppf(0.95, df) * se
    inside = math.log(0.97) < lr - half and lr + half < math.log(1.03)
    assert r.equivalent is bool(inside) is True
    assert tost(lr, 0.02, df, 0.03).equivalent is False
    with pytest.raises(ValueError, match="se = 0"):
        tost(lr, 0.0, df, 0.03)


def test_holm_golden() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([0.02]) == [0.02]
    assert holm([]) == []
    with pytest.raises(ValueError, match=r"pvalues\[1\] = 1.5"):
        holm([0.1, 1.5])


def test_adjust_verdicts_demotes_a_marginal_regression() -> None:
    marginal = welch_log(exact_sample(96.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    clear = welch_log(exact_sample(85.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    same = welch_log(exact_sample(100.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    assert marginal.outcome is Outcome.REGRESSED and marginal.p_adjusted is None
    assert 0.01 / 2 < marginal.p_regress < 0.01
    out = adjust_verdicts([marginal, clear, same])
    assert out[0].p_adjusted == pytest.approx(2 * marginal.p_regress)  # second smallest of 3
    assert out[0].outcome is Outcome.INCONCLUSIVE and out[0].runs_needed is not None
    assert f"(Holm {out[0].p_adjusted:.2g}) ≥ 0.01" in out[0].explanation
    assert out[1].outcome is Outcome.REGRESSED and "(Holm " in out[1].explanation
    assert out[2].p_adjusted == 1.0 and out[2].outcome is Outcome.UNCHANGED


def test_adjusted_p_follows_the_direction_of_the_estimate() -> None:
    up = welch_log(exact_sample(110.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    down = welch_log(exact_sample(90.0, 0.02, 5), exact_sample(100.0, 0.02, 5))
    a_up, a_down = adjust_verdicts([up, down])
    assert a_up.p_adjusted == pytest.approx(holm([up.p_improve, down.p_improve])[0])
    assert a_down.p_adjusted == pytest.approx(holm([up.p_regress, down.p_regress])[1])
    assert (a_up.outcome, a_down.outcome) == (Outcome.IMPROVED, Outcome.REGRESSED)


# -- suite scores ------------------------------------------------------------------------


def test_geometric_mean() -> None:
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError, match=r"values\[0\] = 0"):
        geometric_mean([0, 1.0])


def test_suite_values_are_per_run_geometric_means() -> None:
    runs = {"a": [100.0, 90.0], "b": [25.0, 40.0]}
    assert suite_values(runs) == pytest.approx([50.0, 60.0])
    with pytest.raises(ValueError, match="same number of runs"):
        suite_values({"a": [1.0, 2.0], "b": [1.0]})


def test_suite_score_and_suite_verdict_agree() -> None:
    new = {"a": [90.0, 92.0, 91.0], "b": [45.0, 46.0, 45.5]}
    ref = {"a": [100.0, 101.0, 99.0], "b": [50.0, 50.5, 49.5]}
    expected = math.sqrt((sps.gmean(new["a"]) / sps.gmean(ref["a"])) * (45.5 / 50.0))
    assert suite_score(new, ref) == pytest.approx(expected, rel=1e-3)
    verdict = welch_log(suite_values(new), suite_values(ref))
    assert verdict.ratio == pytest.approx(suite_score(new, ref), rel=1e-12)
    with pytest.raises(ValueError, match=r"only in new \['a'\], only in reference \['c'\]"):
        suite_score({"a": [1.0], "b": [1.0]}, {"b": [1.0], "c": [1.0]})


def test_suite_session_and_history() -> None:
    a, b = session(100.0, 0.03, 5), session(50.0, 0.04, 4)
    s = suite_session({"a": a, "b": b})
    assert s.geometric_mean == pytest.approx(math.sqrt(100.0 * 50.0))
    assert s.sd_log == pytest.approx(0.05 / 2) and s.n == 4
    hist = suite_history({"a": [a, a, a], "b": [b, b, b]})
    assert hist == [s, s, s]
    with pytest.raises(ValueError, match="same sessions"):
        suite_history({"a": [a, a], "b": [b]})


def test_a_spread_pooled_from_other_configs_judges_a_short_history() -> None:
    """A history of one or two sessions borrows the between-session spread from configs with
    five or more: their variances of session means, less the part their runs explain, pooled by
    degrees of freedom (the judged config's own sessions in the pool from two). The test adds
    the judged config's own run-to-run noise, with Satterthwaite's df, exact against scipy;
    provisional, naming where the spread came from."""

    def sessions(means: Sequence[float], sd: float = 0.004, n: int = 4) -> list[SessionSummary]:
        return [SessionSummary(n, math.log(m), sd) for m in means]

    a = [100, 103, 98, 101, 97, 102]  # six sessions
    b = [50, 51, 49.5, 50.5, 49, 50.2, 50.8]  # seven, spread less
    few = sessions([80, 82, 79])  # under min_history: not a lender
    spread = pooled_spread([("a", sessions(a)), ("b", sessions(b)), ("few", few)], 5)
    la, lb = np.log(a), np.log(b)
    means_var, runs_var = (5 * np.var(la, ddof=1) + 6 * np.var(lb, ddof=1)) / 11, 0.004**2 / 4
    assert spread is not None
    assert spread.sd == pytest.approx(math.sqrt(means_var - runs_var), rel=1e-12)
    # Satterthwaite for V - W: V with 5 + 6 df, W with 3 df in each of the 13 sessions
    eff = (means_var - runs_var) ** 2 / (means_var**2 / 11 + runs_var**2 / 39)
    assert spread.df == pytest.approx(eff, rel=1e-12) and spread.df < 11
    assert spread.source == "a (6 sessions), b (7 sessions)"
    own = sessions([200, 190])
    with_own = pooled_spread([("a", sessions(a)), ("b", sessions(b))], 5, own=own)
    assert with_own is not None and 11 < with_own.df < 12
    assert with_own.source == "a (6 sessions), b (7 sessions) and this config's own 2"
    assert pooled_spread([("few", few)], 5, own=own) is None  # no lender: nothing borrowed
    quiet = pooled_spread([("flat", sessions([5.0] * 6))], 5)  # sessions spread no more than runs
    assert quiet is not None and quiet.sd == 0.0

    # the judged config's runs are noisier than the lenders' (2% against 0.4%): it counts
    history, new = sessions([200.0], sd=0.02, n=5), sessions([190.0], sd=0.02, n=5)
    v = against_history_borrowed(new, history, spread, VerdictPolicy())
    between, runs = spread.sd**2 * 2, 0.02**2 * (1 / 5 + 1 / 5)
    se = math.sqrt(between + runs)
    df = (between + runs) ** 2 / (between**2 / spread.df + runs**2 / 8)
    assert v.method == "borrowed-spread" and v.provisional
    assert v.se_log == pytest.approx(se, rel=1e-12) and v.df == pytest.approx(df, rel=1e-12)
    assert v.p_regress == pytest.approx(sps.t.cdf(math.log(190 / 200) / se, df), rel=1e-9)
    half = sps.t.ppf(0.95, df) * se
    assert v.ci_low == pytest.approx(0.95 * math.exp(-half), rel=1e-9)
    assert v.between_cv == spread.sd and v.spread_source == spread.source
    assert v.explanation.endswith(f"borrowed from {spread.source}")
    assert v.to_dict()["spread_source"] == spread.source
    # one run a session tonight and before: the lenders' run-to-run noise stands in for its own
    ones = against_history_borrowed(sessions([190.0], 0.0, 1), sessions([200.0], 0.0, 1), spread)
    assert spread.runs == (pytest.approx(0.004**2), 13 * 3)
    lent = spread.sd**2 * 2 + 0.004**2 * 2
    assert ones.se_log == pytest.approx(math.sqrt(lent), rel=1e-12)
    # no spread anywhere: no test, said so
    flat = against_history_borrowed(sessions([190.0], sd=0.0), sessions([200.0], sd=0.0), quiet)
    assert flat.issue is not None and flat.outcome is Outcome.INCONCLUSIVE
    with pytest.raises(ValueError, match="at least one session on each side"):
        against_history_borrowed([], history, spread)
