"""Which side of a step a candidate lies on: the good candidate's, or the bad endpoint's.

Under the bisect's model (one step change between the endpoints) a candidate's true speed is
either the good one's or the bad one's. The three are measured in interleaved sessions on one
machine, so a step has three samples of session log means (good g, candidate c, bad b) with
one noise level. The contrast ``L = mean(c) - (mean(g) + mean(b)) / 2`` is the candidate's
distance from the midpoint of the step: + half the step when it is good, - half when it is
bad. Its standard error uses the variance pooled over the three samples (df = sessions - 3):
the candidate and the bad endpoint are both compared with the *same* good sessions, which two
separate ratios against the good one would count twice.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specdec.verdict.numbers import t_cdf

NEARER_GOOD = "NEARER-GOOD"  # significantly above the midpoint between good and bad endpoint
NEARER_BAD = "NEARER-BAD"  # significantly below it
MIN_SESSIONS = 2  # per sample, for a variance
LAST_LOOK_ERROR = 0.01  # the largest two-point error a last-look placement may carry
OFF_SIDE_ALPHA = 0.01  # a candidate this unlike its nearer side is between the two, not on one


@dataclass(frozen=True)
class Placement:
    """The contrast's estimate and test; ``side`` is None while neither side is shown."""

    position: float  # (c - g) / (b - g): 0 where the good candidate is, 1 at the bad endpoint
    t: float  # L / se; positive towards the good side
    df: float
    p: float  # one-sided p against the midpoint, towards the side the candidate leans to
    side: str | None
    error: float  # the two-point error: P(the other side | the data, the step's estimate)
    off_p: float  # two-sided p of the candidate against the side it lies nearer to
    by_nearest: bool = False  # placed at the last look on its two-point error, not at alpha

    def to_dict(self) -> dict[str, float | str | bool | None]:
        return {"position": self.position, "t": self.t, "df": self.df, "p": self.p,
                "side": self.side, "error": self.error, "off_p": self.off_p,
                "by_nearest": self.by_nearest}  # fmt: skip


def _ss(values: Sequence[float]) -> float:
    m = statistics.fmean(values)
    return math.fsum((v - m) ** 2 for v in values)


def two_point_error(t: float, step: float, se: float) -> float:
    """P(the candidate is on the other side) when it is either good or bad with equal odds and
    the contrast L = t·se is normal with sd ``se`` around ±``step``/2: 1 / (1 + e^|LLR|) with
    LLR = L·step / se². The step's estimate (mean good - mean bad) is uncorrelated with L at
    equal sessions of the good candidate and the bad endpoint."""
    llr = abs(t) * step / se
    return 1 / (1 + math.exp(min(llr, 700.0)))


def place(
    good: Sequence[float], cand: Sequence[float], bad: Sequence[float], alpha: float,
    last: bool = False,
) -> Placement | None:  # fmt: skip
    """Test the candidate's session log means against the midpoint of the step, one-sided
    towards each side at ``alpha``. At the last look (``last``) a candidate not placed so is
    placed on the side it lies nearer to when its two-point error (:func:`two_point_error`)
    is below ``LAST_LOOK_ERROR`` and it does not differ from that side's sessions (two-sided
    p >= ``OFF_SIDE_ALPHA``): the two-point error weighs how far apart the two sides are in
    standard errors, and the second test keeps a candidate that lies between them (two
    changes, not one) from being placed. None when a sample has fewer than two
    sessions, when the bad endpoint is not slower than the good candidate, or when no session
    varies."""
    if min(len(good), len(cand), len(bad)) < MIN_SESSIONS:
        return None
    mg, mc, mb = (statistics.fmean(x) for x in (good, cand, bad))
    step = mg - mb
    df = len(good) + len(cand) + len(bad) - 3
    var = (_ss(good) + _ss(cand) + _ss(bad)) / df
    if step <= 0 or var <= 0:
        return None
    se = math.sqrt(var * (1 / len(cand) + 0.25 / len(good) + 0.25 / len(bad)))
    t = (mc - (mg + mb) / 2) / se
    p = t_cdf(-abs(t), df)
    error = two_point_error(t, step, se)
    near = good if t > 0 else bad
    off = (mc - statistics.fmean(near)) / math.sqrt(var * (1 / len(cand) + 1 / len(near)))
    off_p = 2 * t_cdf(-abs(off), df)
    by_nearest = last and p >= alpha and error < LAST_LOOK_ERROR and off_p >= OFF_SIDE_ALPHA
    side = (NEARER_GOOD if t > 0 else NEARER_BAD) if p < alpha or by_nearest else None
    return Placement((mg - mc) / step, t, df, p, side, error, off_p, by_nearest)
