"""Placing a candidate on one side of a step (bisect/place.py): the midpoint contrast with
the variance pooled over the three samples and the good sessions counted once."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_specdec.bisect.place import (
    NEARER_BAD,
    NEARER_GOOD,
    OFF_SIDE_ALPHA,
    place,
    two_point_error,
)

STEP = math.log(0.9)


def samples(cand_at: float, k: int, sd: float = 0.03, seed: int = 3) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(rng.normal(mu, sd, k)) for mu in (0.0, cand_at, STEP)]


def test_a_good_candidate_is_nearer_the_good_side_and_a_bad_one_the_bad_side() -> None:
    good = place(*samples(0.0, 8), alpha=0.01)
    bad = place(*samples(STEP, 8), alpha=0.01)
    assert good is not None and good.side == NEARER_GOOD and abs(good.position) < 0.3
    assert bad is not None and bad.side == NEARER_BAD and abs(bad.position - 1) < 0.3


def test_a_candidate_at_the_midpoint_is_not_placed_even_at_the_last_look() -> None:
    g, b = [0.0, 0.01, -0.01, 0.02], [STEP, STEP + 0.01, STEP - 0.01, STEP + 0.02]
    c = [STEP / 2 + 0.001, STEP / 2 - 0.002, STEP / 2 + 0.003, STEP / 2 - 0.001]
    for last in (False, True):
        found = place(g, c, b, alpha=0.002, last=last)
        assert found is not None and found.side is None and found.p > 0.1
        assert found.off_p < OFF_SIDE_ALPHA and not found.by_nearest  # unlike either side


def test_at_the_last_look_a_candidate_is_placed_on_its_two_point_error() -> None:
    """Short of the look's alpha (p 0.006 > 0.002), yet the step is ~7 standard errors of the
    contrast: the two-point error 1 / (1 + e^(t·step/se)) is ~1e-9."""
    g, c, b = samples(0.0, 8, seed=6)
    found = place(g, c, b, alpha=0.002)
    assert found is not None and found.side is None and 0.002 < found.p < 0.01
    last = place(g, c, b, alpha=0.002, last=True)
    assert last is not None and last.side == NEARER_GOOD and last.by_nearest
    assert last.error < 1e-6


def test_the_two_point_error_is_the_posterior_of_the_other_side() -> None:
    # L one se from the midpoint of a step of 4 se: LLR = 1·4 → 1 / (1 + e^4)
    assert two_point_error(1.0, 4.0, 1.0) == pytest.approx(1 / (1 + math.exp(4)))
    assert two_point_error(-1.0, 4.0, 1.0) == two_point_error(1.0, 4.0, 1.0)
    assert two_point_error(0.0, 4.0, 1.0) == 0.5


def test_the_standard_error_counts_the_shared_good_sessions_once() -> None:
    """se² = s²·(1/k_c + 1/(4 k_g) + 1/(4 k_b)) with s² pooled over the three samples, not
    the sum of two ratios' variances, which would count the good sample's twice."""
    g, c, b = [0.0, 0.02, -0.02], [0.01, -0.01, 0.03, -0.03], [STEP - 0.02, STEP + 0.02, STEP]
    found = place(g, c, b, alpha=0.01)
    assert found is not None and found.df == 7
    ss = 0.0008 + 0.002 + 0.0008
    mid = (0.0 + STEP) / 2
    expected_t = (0.0 - mid) / math.sqrt(ss / 7 * (1 / 4 + 0.25 / 3 + 0.25 / 3))
    assert found.t == pytest.approx(expected_t)


@pytest.mark.parametrize(
    "g, c, b, why",
    [
        ([0.0], [0.0, 0.1], [STEP, STEP], "one good session"),
        ([0.0, 0.0], [0.0, 0.0], [STEP, STEP], "no variation"),
        ([0.0, 0.01], [0.0, 0.01], [0.05, 0.06], "bad endpoint faster"),
    ],
)
def test_no_placement_without_a_step_or_a_variance(
    g: list[float], c: list[float], b: list[float], why: str
) -> None:
    assert place(g, c, b, alpha=0.5, last=True) is None, why


def test_placement_errs_rarely_where_the_step_is_two_noise_sds() -> None:
    """Seeded: 2000 candidates at a step of 2 session SDs, 12 sessions a sample, at the last
    look: placed nearly always, wrongly under 0.5% (normal theory for the sign: 0.07%)."""
    rng = np.random.default_rng(11)
    wrong = unplaced = 0
    for i in range(2000):
        truth = i % 2
        mu = (0.0, 0.0 if truth == 0 else -0.2, -0.2)
        g, c, b = (list(rng.normal(m, 0.1, 12)) for m in mu)
        found = place(g, c, b, alpha=0.002, last=True)
        assert found is not None
        unplaced += found.side is None
        wrong += found.side == (NEARER_BAD if truth == 0 else NEARER_GOOD)
    assert wrong / 2000 < 0.005 and unplaced / 2000 < 0.05
