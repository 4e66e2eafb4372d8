"""Change points over nightly history: on which night a config's speed changed, and by how much.

A *night* is one run of the suite (verdict/nights.py): the mean of its sessions'
suite scores (ln tok/s), its mean accept length, its engine version and commit. Over a
config's series of nights, change points are found by PELT from ``ruptures`` (a maintained
implementation; its C kernel version with the linear kernel, i.e. a least-squares cost) with
the penalty

    penalty x sigma^2 x ln(n)

where sigma is the noise of the nightly series, estimated robustly from its first differences
(median absolute deviation / 0.6745 / sqrt 2, which a step in the mean barely moves), and n
the number of nights: a BIC-style penalty whose factor and minimal segment length are
calibrated by simulation (``python bench/calibration.py --drift``, docs/history.md). Then the
weakest change point is dropped while its two segments differ by less than the magnitude floor
(2%) or not significantly (p of the shift between them, against sigma, ≥ alpha, 0.01); the
nightly gate asks p < 0.005 of a new drop. Each change
point carries the ratio of the segment after it to the segment before (with its CI, against the
series' noise), the accept-length change, and the engine version and commit on either side.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import fmean
from typing import Any, Protocol

from pytest_specdec.core.results import ResultsError, load_results
from pytest_specdec.verdict.baselines import (
    BaselineError,
    baseline_path,
    key_for,
    key_mismatch,
    load_baseline,
)
from pytest_specdec.verdict.nights import Night, nights
from pytest_specdec.verdict.sessions import session_entries

DASH = "\u2013"
TOK = "tok/s"
ACCEPT = "accept length"


class HistoryUnavailable(RuntimeError):
    """Change-point detection needs ``ruptures``; the message says how to install it."""


@dataclass(frozen=True)
class HistoryPolicy:
    """Knobs of change-point detection (defaults calibrated in docs/history.md)."""

    penalty: float = 1.5  # factor of sigma^2 ln(n)
    min_size: int = 2  # nights per segment at least
    floor: float = 0.02  # segments closer than this (ratio - 1) are merged
    alpha: float = 0.01  # a change point needs p below this for the shift between its segments
    gate_alpha: float = 0.005  # and the nightly gate reports a drift only below this
    ci_level: float = 0.90
    accept_floor: float = 0.01  # the floor for change points in accept length

    def __post_init__(self) -> None:
        if not (math.isfinite(self.penalty) and self.penalty > 0):
            raise ValueError(f"HistoryPolicy.penalty is {self.penalty!r}; it must be > 0")
        if not (isinstance(self.min_size, int) and self.min_size >= 2):
            raise ValueError(f"HistoryPolicy.min_size is {self.min_size!r}; it must be >= 2")
        for name in ("floor", "accept_floor"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"HistoryPolicy.{name} is {value!r}; it must be in [0, 1)")
        for name in ("alpha", "gate_alpha"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"HistoryPolicy.{name} is {value!r}; it must be in (0, 1]")


def noise_sd(values: Sequence[float]) -> float | None:
    """Robust noise of a series: MAD of the first differences / 0.6745 / sqrt(2).

    The plain standard deviation of the differences is used when the MAD is zero (many
    identical nights); None below three values or for a constant series."""
    if len(values) < 3:
        return None
    diffs = [b - a for a, b in itertools.pairwise(values)]
    center = statistics.median(diffs)
    mad = statistics.median(abs(d - center) for d in diffs)
    sd = mad / 0.6745 / math.sqrt(2) if mad > 0 else statistics.pstdev(diffs) / math.sqrt(2)
    return sd if sd > 0 else None


def _pelt(values: Sequence[float], pen: float, min_size: int) -> list[int]:
    try:
        import numpy as np
        import ruptures
    except ImportError as exc:
        raise HistoryUnavailable(
            f"change-point detection needs ruptures ({exc}); pip install ruptures "
            "(a dependency of pytest-specdec on Python < 3.14)"
        ) from exc
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    # PELT with the linear kernel: the least-squares (l2) cost, in ruptures' C implementation
    # (the same change points as Pelt(model="l2"), some 2000x faster on 100 nights).
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(signal)
    return [int(b) for b in algo.predict(pen=pen)[:-1]]


def detect(values: Sequence[float], policy: HistoryPolicy = HistoryPolicy()) -> list[int]:
    """Indices where a new segment starts (0 < i < n), after merging segments closer than
    the floor. Fewer than 2 x min_size values, or no noise, give none."""
    n = len(values)
    sigma = noise_sd(values)
    if n < 2 * policy.min_size or sigma is None:
        return []
    starts = _pelt(values, policy.penalty * sigma * sigma * math.log(n), policy.min_size)
    floor = math.log1p(policy.floor)
    while starts:  # drop the weakest change point while it is under the floor or not significant
        edges = [0, *starts, n]
        segments = [values[a:b] for a, b in itertools.pairwise(edges)]
        gaps = [abs(fmean(b) - fmean(a)) for a, b in itertools.pairwise(segments)]
        pvalues = [shift(a, b, sigma, n - 1)[3] for a, b in itertools.pairwise(segments)]
        weakest = max(range(len(gaps)), key=lambda i: (gaps[i] < floor, pvalues[i]))
        if gaps[weakest] >= floor and pvalues[weakest] < policy.alpha:
            break
        del starts[weakest]
    return starts


def shift(
    before: Sequence[float], after: Sequence[float], sigma: float, df: float, level: float = 0.90
) -> tuple[float, float, float, float]:
    """Ratio after/before of two segments of ln tok/s, its CI and two-sided p, against the
    series' noise ``sigma`` (one estimate for the whole series: a segment of two nights has
    no usable variance of its own). t with ``df`` degrees of freedom."""
    from scipy.special import stdtr, stdtrit

    diff = fmean(after) - fmean(before)
    se = sigma * math.sqrt(1 / len(before) + 1 / len(after))
    half = float(stdtrit(df, 0.5 + level / 2)) * se
    p = float(2 * stdtr(df, -abs(diff) / se))
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half), p


@dataclass(frozen=True)
class ChangePoint:
    """The night a new level starts, and the segment after it against the one before."""

    index: int
    night: str
    previous_night: str
    engine_before: str | None
    engine_after: str | None
    commit_before: str | None
    commit_after: str | None
    ratio: float
    ci_low: float
    ci_high: float
    p: float  # two-sided p of the shift between the segments (see shift)
    n_before: int
    n_after: int
    accept_before: float | None
    accept_after: float | None
    signal: str = TOK  # what changed: output tok/s, or accept length (ACCEPT)

    @property
    def accept_change(self) -> float | None:
        if self.accept_before and self.accept_after:
            return self.accept_after / self.accept_before - 1
        return None

    @property
    def drop(self) -> bool:
        return self.ratio < 1

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accept_change": self.accept_change}

    def engines(self) -> str:
        before, after = self.engine_before or "unknown", self.engine_after or "unknown"
        text = f"engine {after}" if before == after else f"engine {before} → {after}"
        if self.commit_before != self.commit_after:
            text += f", commit {self.commit_before or '?'} → {self.commit_after or '?'}"
        return text

    def size(self) -> str:
        """E.g. ``-4.1% (0.959x, 90% CI 0.951 to 0.967; 12 → 8 nights, accept length +0.0%)``."""
        accept = self.accept_change
        acc = f", accept length {accept:+.1%}" if accept is not None and self.signal == TOK else ""
        return (
            f"{self.ratio - 1:+.1%} ({self.ratio:.3f}x, 90% CI {self.ci_low:.3f}{DASH}"
            f"{self.ci_high:.3f}; {self.n_before} → {self.n_after} nights{acc})"
        )

    def describe(self) -> str:
        """What the nightly gate prints: ``drift since <night>, engine <version>: <size>``."""
        what = "drift" if self.signal == TOK else "accept length drift"
        return f"{what} since {self.night}, {self.engines()}: {self.size()}"


def _segment_accept(segment: Sequence[Night]) -> float | None:
    values = [n.accept for n in segment if n.accept is not None]
    return statistics.fmean(values) if values else None


def change_points(
    series: Sequence[Night], policy: HistoryPolicy = HistoryPolicy(), signal: str = TOK
) -> list[ChangePoint]:
    """The change points of a config's nights, oldest first: in the suite score (``TOK``), or
    in the mean accept length of the nights that have one (``ACCEPT``, with its own floor)."""
    if signal == ACCEPT:
        series = [n for n in series if n.accept]
        values = [math.log(n.accept or 1.0) for n in series]
        policy = replace(policy, floor=policy.accept_floor)
    else:
        values = [n.mean_log for n in series]
    starts = detect(values, policy)
    if not starts:
        return []
    sigma, edges = noise_sd(values) or 0.0, [0, *starts, len(series)]
    out = []
    for i, start in enumerate(starts):
        before, after = series[edges[i] : start], series[start : edges[i + 2]]
        ratio, low, high, p = shift(
            values[edges[i] : start], values[start : edges[i + 2]], sigma, len(values) - 1,
            policy.ci_level,
        )  # fmt: skip
        out.append(
            ChangePoint(
                index=start,
                night=after[0].started_at,
                previous_night=before[-1].started_at,
                engine_before=before[-1].engine_version,
                engine_after=after[0].engine_version,
                commit_before=before[-1].commit,
                commit_after=after[0].commit,
                ratio=ratio,
                ci_low=low,
                ci_high=high,
                p=p,
                n_before=len(before),
                n_after=len(after),
                accept_before=_segment_accept(before),
                accept_after=_segment_accept(after),
                signal=signal,
            )
        )
    return out


def drift(
    history: Sequence[Night], tonight: Sequence[Night], policy: HistoryPolicy = HistoryPolicy()
) -> ChangePoint | None:
    """A drop that tonight reveals: the last change point of history + tonight, with the
    level after it below the level before at p < gate_alpha, where the history alone showed
    no such drop (within one night): reported once, on the first night it is clear."""
    found = change_points([*history, *tonight], policy)
    if not found or not _gating(found[-1], policy):
        return None
    last = found[-1]
    if any(abs(last.index - c.index) <= 1 for c in change_points(history, policy)
           if _gating(c, policy)):  # fmt: skip
        return None
    return last


def _gating(point: ChangePoint, policy: HistoryPolicy) -> bool:
    return point.drop and point.p < policy.gate_alpha


@dataclass
class Series:
    """One baseline key's nights and change points, for ``specdec history``."""

    name: str
    key: Mapping[str, Any]
    nights: list[Night]
    points: list[ChangePoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    accept_points: list[ChangePoint] = field(default_factory=list)  # in accept length

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": dict(self.key),
            "nights": len(self.nights),
            "first_night": self.nights[0].started_at if self.nights else None,
            "last_night": self.nights[-1].started_at if self.nights else None,
            "change_points": [c.to_dict() for c in self.points],
            "accept_change_points": [c.to_dict() for c in self.accept_points],
            "notes": self.notes,
        }


# ------------------------------------------------------------------------ loading


def _results_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        out += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    return out


class Keyed(Protocol):
    """Anything that names its baseline key (a history series, a dashboard key)."""

    @property
    def key(self) -> Mapping[str, Any]: ...


def joined(
    doc: Mapping[str, Any], config: Mapping[str, Any], root: Path,
    known: Mapping[str, Keyed],
) -> tuple[str, dict[str, Any], list[dict[str, Any]], list[str]]:  # fmt: skip
    """A results file's config as sessions of a baseline key: the key's file name under
    ``root``, the key, its session entries, and why it is left out ([] when it joins): a key
    that differs from the one ``known`` has under that name, or no clean session."""
    key = key_for(doc, config)
    name = str(baseline_path(root, key).relative_to(root))
    stored = known.get(name)
    diff = key_mismatch(stored.key, key) if stored is not None else []
    entries: list[dict[str, Any]] = []
    try:
        entries = session_entries(doc, config)
    except BaselineError as exc:
        diff = diff or [str(exc)]
    return name, key, entries, diff


def load_series(
    baseline_dir: Path,
    results: Sequence[Path] = (),
    policy: HistoryPolicy = HistoryPolicy(),
) -> list[Series]:
    """Every baseline key's nights, from the baseline store and (optionally) nightly results
    files, each session once; with their change points."""
    found: dict[str, Series] = {}
    sessions: dict[str, dict[str, Mapping[str, Any]]] = {}

    def add(name: str, key: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]) -> None:
        found.setdefault(name, Series(name, dict(key), []))
        sessions.setdefault(name, {}).update({str(e.get("id")): e for e in entries})

    if baseline_dir.is_dir():
        for path in sorted(baseline_dir.rglob("*.json")):
            if path.name.startswith("."):
                continue
            baseline = load_baseline(path)
            if baseline is not None:
                add(str(path.relative_to(baseline_dir)), baseline.key, baseline.sessions)
    for path in _results_files(results):
        try:
            doc = load_results(path)
        except ResultsError as exc:
            notes = found.setdefault("(inputs)", Series("(inputs)", {}, [])).notes
            notes.append(f"left out: {exc}")
            continue
        for config in doc["configs"]:
            name, key, entries, diff = joined(doc, config, baseline_dir, found)
            if diff:
                target = found.setdefault(name, Series(name, dict(key), []))
                target.notes.append(f"{path}: {config['name']} left out: {'; '.join(diff)}")
                continue
            add(name, key, entries)
    out = []
    for name, series in sorted(found.items()):
        series.nights = nights(sessions.get(name, {}).values())
        series.points = change_points(series.nights, policy)
        series.accept_points = change_points(series.nights, policy, ACCEPT)
        if series.nights or series.notes:
            out.append(series)
    return out


def drift_for(
    results: Mapping[str, Any],
    config: Mapping[str, Any],
    root: Path,
    policy: HistoryPolicy = HistoryPolicy(),
) -> ChangePoint | None:
    """The nightly gate: does tonight's run of ``config`` reveal a drop in its baseline's
    history? None without a baseline of the same key, or without clean sessions tonight."""
    key = key_for(results, config)
    baseline = load_baseline(baseline_path(root, key))
    if baseline is None or key_mismatch(baseline.key, key):
        return None
    try:
        tonight = nights(session_entries(results, config))
    except BaselineError:
        return None
    return drift(nights(baseline.sessions), tonight, policy)
