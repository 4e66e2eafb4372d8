"""Per-(config, prompt) summaries of measured runs: what the table and the verdicts read."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats as sps

from pytest_specdec.core.results import ConfigRecord, RunRecord


@dataclass(frozen=True)
class CellSummary:
    """Output tok/s of one prompt under one config (measured runs only)."""

    n: int
    failed: int  # runs that produced no number (an error was recorded)
    mean: float | None
    ci_half: float | None  # 95% t half-width of the mean; None below 2 runs
    geomean: float | None
    accept_length: float | None
    ttft_s: float | None  # median
    tpot_s: float | None  # median
    output_tokens: float | None  # mean
    invalid: int = 0  # runs measured but ruled out by GPU hygiene (throttled, telemetry lost)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: Sequence[RunRecord]) -> CellSummary:
    ok = [r for r in runs if r.ok and r.tok_per_s and not r.invalid]
    invalid = sum(1 for r in runs if r.ok and r.tok_per_s and r.invalid)
    tps = [float(r.tok_per_s) for r in ok if r.tok_per_s]
    n = len(tps)
    mean = statistics.fmean(tps) if tps else None
    half = None
    if n >= 2 and mean is not None:
        half = float(sps.t.ppf(0.975, n - 1)) * statistics.stdev(tps) / math.sqrt(n)
    geo = math.exp(statistics.fmean(math.log(v) for v in tps)) if tps else None
    accepts = [float(r.accept_length) for r in ok if r.accept_length is not None]
    return CellSummary(
        n=n,
        failed=len(runs) - len(ok) - invalid,
        mean=mean,
        ci_half=half,
        geomean=geo,
        accept_length=statistics.fmean(accepts) if accepts else None,
        ttft_s=_median([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_s=_median([r.tpot_s for r in ok if r.tpot_s is not None]),
        output_tokens=statistics.fmean(r.output_tokens or 0 for r in ok) if ok else None,
        invalid=invalid,
    )


def config_cells(record: ConfigRecord, prompts: Sequence[str]) -> dict[str, CellSummary]:
    return {p: summarize(record.measured(p)) for p in prompts}


def suite_geomean(cells: dict[str, CellSummary]) -> float | None:
    """Geometric mean over prompts of per-prompt geometric-mean tok/s (None if any missing)."""
    values = [c.geomean for c in cells.values()]
    if not values or any(v is None for v in values):
        return None
    return math.exp(statistics.fmean(math.log(v) for v in values if v is not None))


def unmeasured_label(rec: ConfigRecord) -> str:
    """What a config with an error and nothing measured reads as in a throughput table."""
    return "WORKER LOST" if rec.extra.get("lost_worker") else "BOOT FAILED"


COST_PARTS = (
    ("start_s", "boot"),
    ("lint_s", "lint"),
    ("warmup_s", "warmup"),
    ("generation_s", "measured requests"),
    ("load_s", "load levels"),
    ("other_s", "other measuring"),
    ("cooldown_s", "cooldown"),
    ("stop_s", "stop"),
)


def cost_line(rec: ConfigRecord) -> str | None:
    """What a config's server sessions held the machine for (``extra.cost``, one entry per
    session), summed, with its parts: the GPU time its verdict cost."""
    sessions = [c for c in rec.extra.get("cost", []) if c.get("total_s") is not None]
    if not sessions:
        return None
    total = sum(float(c["total_s"]) for c in sessions)
    parts = []
    for key, label in COST_PARTS:
        values = [c[key] for c in sessions if c.get(key) is not None]
        if values:
            parts.append(f"{label} {sum(values):.1f} s")
    plural = "s" if len(sessions) > 1 else ""
    failed = sum(1 for c in sessions if c.get("failed"))
    boots = f", {failed} of them a failed boot" if failed else ""
    return (
        f"{rec.name}: machine time {total / 60:.2f} min over {len(sessions)} server "
        f"session{plural}{boots} ({', '.join(parts)})"
    )
