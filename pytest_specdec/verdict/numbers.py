"""Small numeric primitives the verdict maths shares: Student-t tails, logs of tok/s values
with their validation, mean and sd, range checks, the smallest n that satisfies a test."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from scipy import special


def t_cdf(x: float, df: float) -> float:
    return float(special.stdtr(df, x))


@functools.lru_cache(maxsize=4096)
def t_ppf(q: float, df: float) -> float:
    return float(special.stdtrit(df, q))


def log_values(values: Sequence[float], name: str) -> list[float]:
    if len(values) == 0:
        raise ValueError(f"{name} is empty: need at least one tok/s value")
    out = []
    for i, v in enumerate(values):
        x = float(v)
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"{name}[{i}] = {v!r} is not a tok/s value: must be finite and > 0")
        out.append(math.log(x))
    return out


def mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample sd (0.0 for one value or identical values)."""
    if max(xs) == min(xs):
        return float(xs[0]), 0.0
    m = math.fsum(xs) / len(xs)
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def check_range(name: str, value: object, ok: bool, valid: str) -> None:
    if not ok:
        raise ValueError(f"{name} = {value!r} is out of range: must be {valid}")


def drop_fraction(x: float) -> float:
    """Log-space distance → drop fraction."""
    return -math.expm1(-x)


def smallest_n(pred: Callable[[int], bool], lo: int, cap: int) -> int | None:
    """Smallest n in [lo, cap] with pred(n), pred monotone; None if none."""
    hi = lo
    while not pred(hi):
        if hi >= cap:
            return None
        lo, hi = hi + 1, min(cap, hi * 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid + 1, hi)
    return hi
