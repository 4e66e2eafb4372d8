"""The engine's gauges of running and queued requests, read while a load round runs: their
peaks, and how long each read kept the engine busy (see measure/levels.py for the rounds)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class GaugeWatch:
    """The largest running and queued request counts the engine reported during a round
    (None: the engine exposes no such gauge)."""

    samples: int = 0
    max_running: float | None = None
    max_queued: float | None = None
    reads: int = 0  # reads tried, failed ones too
    read_s_max: float = 0.0  # the longest read (seconds): the engine answered that late
    read_s_total: float = 0.0

    def add(self, gauges: Mapping[str, float | None]) -> None:
        self.samples += 1
        for key, attr in (("running", "max_running"), ("queued", "max_queued")):
            value = gauges.get(key)
            if value is not None:
                now = getattr(self, attr)
                setattr(self, attr, value if now is None else max(now, value))

    def took(self, seconds: float) -> None:
        """One read tried (failed ones too), and how long the engine took to answer it."""
        self.reads += 1
        self.read_s_total += seconds
        self.read_s_max = max(self.read_s_max, seconds)

    def facts(self) -> dict[str, Any]:
        """What a round keeps of it: the gauges' peaks, and how long the engine took to answer
        the reads (where any was made)."""
        out: dict[str, Any] = {"gauge_samples": self.samples, "max_running": self.max_running,
                               "max_queued": self.max_queued}  # fmt: skip
        if self.reads:
            out.update(gauge_reads=self.reads, gauge_read_max_s=self.read_s_max,
                       gauge_read_s=self.read_s_total)  # fmt: skip
        return out


async def watch_gauges(
    read: Callable[[], Awaitable[Mapping[str, float | None] | None]],
    watch: GaugeWatch,
    every_s: float,
    stop: asyncio.Event,
) -> None:
    """Poll ``read`` every ``every_s`` seconds until ``stop`` is set, the first read one interval
    in (a failed read is skipped: the gauges are evidence about the engine, not a measurement).

    A read can delay the requests it meets: SGLang serves ``/metrics`` from its HTTP server's
    event loop, gathering every process's metrics synchronously, so requests that arrive or
    stream meanwhile wait. So no read meets a round's first requests, and each read's time is
    kept (``reads``, ``read_s_max``, ``read_s_total``)."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), every_s)
            return
        except asyncio.TimeoutError:
            pass
        start = time.perf_counter()
        try:
            found = await read()
        except Exception:
            found = None
        watch.took(time.perf_counter() - start)
        if found:
            watch.add(found)
