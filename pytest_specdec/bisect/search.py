"""Where the first bad candidate can still be, and which one to measure next: git bisect's
search over candidates marked good, bad or skip. Pure: indices and marks in, indices out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GOOD, BAD, SKIP = "good", "bad", "skip"


@dataclass(frozen=True)
class Bounds:
    """The first bad candidate lies in (lo, hi]: lo is the last known good, hi the first
    known bad; ``skipped`` are the candidates in between that could not be decided."""

    lo: int
    hi: int
    skipped: tuple[int, ...]

    @property
    def open(self) -> list[int]:
        """Candidates strictly between lo and hi not yet measured (skipped ones excluded)."""
        return [i for i in range(self.lo + 1, self.hi) if i not in self.skipped]


def bounds(good: int, bad: int, marks: Mapping[int, str]) -> Bounds:
    """The search range after the given marks (index → good | bad | skip)."""
    lo = max([good, *(i for i, m in marks.items() if m == GOOD and good <= i < bad)])
    hi = min([bad, *(i for i, m in marks.items() if m == BAD and lo < i <= bad)])
    skipped = tuple(sorted(i for i, m in marks.items() if m == SKIP and lo < i < hi))
    return Bounds(lo, hi, skipped)


def next_index(b: Bounds) -> int | None:
    """The candidate to measure next: the middle of the range, or when the middle was skipped
    its nearest neighbour (lower one first); None when nothing is left to measure."""
    left = b.open
    if not left:
        return None
    mid = (b.lo + b.hi) // 2
    return min(left, key=lambda i: (abs(i - mid), i))


def suspects(b: Bounds) -> list[int]:
    """Where the first bad can be once nothing is left to measure: the skipped ones and hi."""
    return [*b.skipped, b.hi]
