"""Concurrency levels: N clients at once, aggregate output tok/s and latency percentiles.

Each level sends ``requests`` requests from ``level`` concurrent clients, cycling over the
prompts. Aggregate throughput is all output tokens over the level's wall time; TTFT and
TPOT are per request. Accept length comes from counter deltas around the whole level (per
request deltas are meaningless while requests overlap).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_specdec.core.results import RunRecord

Send = Callable[[int], Awaitable[RunRecord]]


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99 (inclusive method); None for an empty list."""
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    if len(values) == 1:
        return {"p50": values[0], "p90": values[0], "p99": values[0]}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": q[49], "p90": q[89], "p99": q[98]}


@dataclass(frozen=True)
class LevelResult:
    level: int
    requests: int
    failed: int
    wall_s: float
    output_tokens: int
    output_tok_per_s: float | None  # aggregate: all tokens / wall time
    requests_per_s: float | None
    ttft_s: Mapping[str, float | None]
    tpot_s: Mapping[str, float | None]
    accept_length: float | None
    errors: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_level(level: int, requests: int, send: Send) -> tuple[list[RunRecord], float]:
    """``requests`` sends over ``level`` workers; returns the records and the wall time."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    records: list[RunRecord] = []

    async def worker() -> None:
        while True:
            try:
                index = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            records.append(await send(index))

    start = time.perf_counter_ns()
    await asyncio.gather(*(worker() for _ in range(level)))
    return sorted(records, key=lambda r: r.run), (time.perf_counter_ns() - start) / 1e9


def summarize_level(
    level: int, records: Sequence[RunRecord], wall_s: float, accept_length: float | None
) -> LevelResult:
    ok = [r for r in records if r.ok and r.output_tokens]
    tokens = sum(r.output_tokens or 0 for r in ok)
    return LevelResult(
        level=level,
        requests=len(records),
        failed=len(records) - len(ok),
        wall_s=wall_s,
        output_tokens=tokens,
        output_tok_per_s=tokens / wall_s if ok and wall_s > 0 else None,
        requests_per_s=len(ok) / wall_s if ok and wall_s > 0 else None,
        ttft_s=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_s=percentiles([r.tpot_s for r in ok if r.tpot_s is not None]),
        accept_length=accept_length,
        errors=tuple(f"request {r.run}: {r.error}" for r in records if r.error),
    )


def table(levels: Sequence[LevelResult]) -> list[list[str]]:
    """Rows for the terminal: one per level."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f}"

    rows = [["clients", "out tok/s", "req/s", "TTFT p50/p90/p99 ms", "TPOT p50/p90/p99 ms",
             "accept", "failed"]]  # fmt: skip
    for lv in levels:
        rows.append(
            [
                str(lv.level),
                "-" if lv.output_tok_per_s is None else f"{lv.output_tok_per_s:.1f}",
                "-" if lv.requests_per_s is None else f"{lv.requests_per_s:.2f}",
                "/".join(ms(lv.ttft_s[k]) for k in ("p50", "p90", "p99")),
                "/".join(ms(lv.tpot_s[k]) for k in ("p50", "p90", "p99")),
                "-" if lv.accept_length is None else f"{lv.accept_length:.2f}",
                str(lv.failed),
            ]
        )
    return rows


SLOT_FLAGS = ("-np", "--parallel", "--max-running-requests", "--max-num-seqs")


def parallel_slots(command: list[str] | None) -> int | None:
    """The engine's parallel-slot / max-running setting from its command line (last wins)."""
    args = command or []
    found = None
    for i, arg in enumerate(args[:-1]):
        if arg in SLOT_FLAGS and args[i + 1].isdigit():
            found = int(args[i + 1])
    return found
