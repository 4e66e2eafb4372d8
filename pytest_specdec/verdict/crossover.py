"""Where speculation stops paying: the crossover of a speedup curve.

A speedup curve is a speculative config's throughput over a plain config's at each load level,
with a confidence interval per level. The crossover is the client count where the curve falls
to 1. It is interpolated between the two levels around the first fall, linearly in log(clients)
and log(speedup) (throughput ratios move by factors, and levels are spaced by factors too).
The same interpolation over the curve of CI lower bounds and over the curve of upper bounds
gives a band: the lower bounds reach 1 first, the upper bounds last. The band is made from
pointwise intervals, so it is a guide to the uncertainty, not a simultaneous interval; a level
between the measured ones is never claimed as measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from pytest_specdec.verdict.stats import Verdict


class HasVerdict(Protocol):
    clients: int
    verdict: Verdict | None


@dataclass(frozen=True)
class CurvePoint:
    clients: int
    ratio: float
    ci_low: float
    ci_high: float
    provisional: bool = False  # its verdict was provisional (one session a side, pooled rounds)

    @property
    def state(self) -> str:
        """``pays`` (CI above 1), ``loses`` (CI below 1) or ``even`` (CI holds 1)."""
        if self.ci_low > 1:
            return "pays"
        if self.ci_high < 1:
            return "loses"
        return "even"


def first_fall(
    xs: Sequence[float], ys: Sequence[float], from_start: bool = False
) -> tuple[str, float | None]:
    """Where ``ys`` (log speedups, one per level ``xs``) first falls from above 0 to 0 or
    below, after its first level above 0: ``("at", clients)`` interpolated in log(clients);
    ``("below", None)`` when no level is above 0; ``("above", None)`` when it never falls
    after one is (a curve that starts at or below 0 and pays further up is not "below").
    ``from_start``: "below" already when the first level is at or below 0 (the band's lower
    bound: the first level where paying is not certain)."""
    if not xs or len(xs) != len(ys):
        raise ValueError(f"first_fall: need as many levels as values, got {len(xs)}, {len(ys)}")
    above = [i for i, y in enumerate(ys) if y > 0]
    if not above or (from_start and above[0] > 0):
        return "below", None
    for i in range(above[0], len(ys) - 1):
        if ys[i] > 0 >= ys[i + 1]:
            lx0, lx1 = math.log(xs[i]), math.log(xs[i + 1])
            t = ys[i] / (ys[i] - ys[i + 1])
            return "at", math.exp(lx0 + t * (lx1 - lx0))
    return "above", None


# How a curve's text names its states: over plain decoding speculation pays or loses; over
# another speculative config (a tree against a chain) a config is faster or slower. ``lost``
# and ``was``: a level that paid in the stored curve and loses tonight ({ref}: the reference).
WORDS = {
    "speedup": {"stops": "stops paying", "pays": "pays", "loses": "loses", "none": "does not pay",
                "lost": "speculation no longer pays", "was": "paid"},
    "comparison": {"stops": "stops being faster", "pays": "faster", "loses": "slower",
                   "none": "is not faster", "lost": "no longer faster than {ref}",
                   "was": "was faster,"},
}  # fmt: skip


@dataclass(frozen=True)
class Crossover:
    """A speedup curve against ``reference`` and where it falls to 1. ``kind``: ``speedup``
    (the reference decodes plainly: where speculation stops paying) or ``comparison`` (the
    reference speculates too: where this config stops being the faster)."""

    reference: str
    points: tuple[CurvePoint, ...]
    where: str  # "at" (it falls to 1 between two levels), "above" (never), "below" (at once)
    estimate: float | None
    low: tuple[str, float | None]  # where the CI lower bounds fall to 1
    high: tuple[str, float | None]  # where the CI upper bounds fall to 1
    kind: str = "speedup"

    def __post_init__(self) -> None:
        if self.kind not in WORDS:
            raise ValueError(f"crossover kind {self.kind!r}: one of {', '.join(WORDS)}")

    @property
    def text(self) -> str:
        xs = [p.clients for p in self.points]
        first, last = xs[0], xs[-1]

        def bound(found: tuple[str, float | None]) -> str:
            kind, value = found
            if kind == "at" and value is not None:
                return f"{value:.1f}"
            return f"≤ {first}" if kind == "below" else f"> {last}"

        words = WORDS[self.kind]
        if self.where == "at" and self.estimate is not None:
            head = (
                f"{words['stops']} at about {self.estimate:.1f} clients (band {bound(self.low)} "
                f"to {bound(self.high)} from the levels' CIs)"
            )
        elif self.where == "above":
            paying = [p.clients for p in self.points if p.ratio > 1]
            if all(p.state == "pays" for p in self.points):
                head = f"{words['pays']} at every level measured ({first} to {last} clients)"
            elif len(paying) == len(self.points):
                head = f"above 1 at every level measured ({first} to {last} clients)"
            else:
                head = f"above 1 from {paying[0]} clients to the last level measured ({last})"
            if self.low[0] != "above":
                head += f"; its CI reaches 1 from {bound(self.low)} clients"
        else:
            head = f"{words['none']} at any level measured (from {first} client{'s' * (first > 1)})"
        states: dict[str, list[str]] = {}
        for p in self.points:
            states.setdefault(words.get(p.state, p.state), []).append(str(p.clients))
        detail = "; ".join(f"{k} at {', '.join(v)}" for k, v in states.items())
        again = self._pays_again()
        return f"{head} against {self.reference}: {detail}" + (
            f"; {words['pays']} again at {again}" if again else ""
        )

    def _pays_again(self) -> str | None:
        """Levels above a losing level where the curve pays again (a curve that is not
        monotone: worth a look)."""
        seen_loss, again = False, []
        for p in self.points:
            seen_loss = seen_loss or p.state == "loses"
            if seen_loss and p.state == "pays":
                again.append(str(p.clients))
        return ", ".join(again) or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "points": [{**asdict(p), "state": p.state} for p in self.points],
            "where": self.where,
            "estimate": self.estimate,
            "low": {"where": self.low[0], "clients": self.low[1]},
            "high": {"where": self.high[0], "clients": self.high[1]},
            "text": self.text,
            "kind": self.kind,
        }


def crossover_of(
    reference: str, levels: Sequence[HasVerdict], kind: str = "speedup"
) -> Crossover | None:
    """The crossover of the speedup curve that ``levels``' verdicts (ratio and CI against
    ``reference``: a plain config, or with ``kind`` "comparison" a speculative one) make; None
    without a level that could be judged."""
    points = sorted(
        (CurvePoint(lv.clients, lv.verdict.ratio, lv.verdict.ci_low, lv.verdict.ci_high,
                    lv.verdict.provisional)
         for lv in levels if lv.verdict is not None and lv.verdict.issue is None),
        key=lambda p: p.clients,
    )  # fmt: skip
    if not points:
        return None
    xs = [float(p.clients) for p in points]

    def fall(values: Sequence[float], from_start: bool = False) -> tuple[str, float | None]:
        return first_fall(xs, [math.log(v) if v > 0 else -math.inf for v in values], from_start)

    where, estimate = fall([p.ratio for p in points])
    return Crossover(
        reference, tuple(points), where, estimate,
        low=fall([p.ci_low for p in points], from_start=True),
        high=fall([p.ci_high for p in points]), kind=kind,
    )  # fmt: skip
