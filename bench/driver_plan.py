"""The load-driver benchmark's plan and rows (see driver.py), and the /proc readings of CPU
time it and the peer comparison share."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DRIVER = "pytest-specdec"
TOKEN = "tok "  # what bench/fake_stream_server.py sends per chunk


@dataclass(frozen=True)
class Plan:
    concurrencies: tuple[int, ...]
    tokens: int
    window_s: float
    rate: float
    overhead_tokens: int
    overhead_requests: int
    overhead_concurrencies: tuple[int, ...]
    peer_concurrencies: tuple[int, ...]


FULL = Plan((1, 4, 16, 64), 1024, 3.0, 1000.0, 500, 20, (1, 16), (1, 4, 16, 64))
QUICK = Plan((1, 4, 16, 64), 1024, 1.0, 1000.0, 250, 10, (1,), ())


@dataclass(frozen=True)
class CeilingRow:
    driver: str
    concurrency: int
    tokens_per_s: float | None
    requests_per_s: float | None
    requests: int
    errors: int
    window_s: float
    driver_cpu: float | None = None  # the driver's CPU seconds ÷ wall seconds
    server_cpu: float | None = None  # the same for the server process
    others_cpu: float | None = None  # other processes' share of the driver's core
    tokens_per_cpu_s: float | None = None  # tokens ÷ the driver's CPU seconds


@dataclass(frozen=True)
class OverheadRow:
    concurrency: int
    requests: int
    errors: int
    tokens: int
    rate: float
    e2e_ms_median: float
    overhead_ms_median: float
    overhead_pct_median: float
    overhead_pct_p90: float
    own_ms_median: float | None  # e2e - server span: request out + last chunk in + parse
    own_pct_p90: float | None
    request_ms_median: float | None  # call → server has the request (includes the connect)
    tail_ms_median: float | None  # server wrote the last chunk → the call returned
    tpot_err_pct_median: float | None


# --- CPU time from /proc ---------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (Linux /proc), None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_this_process(cpu: int) -> None:
    """Pin every thread of this process (and so its future threads and children) to ``cpu``."""
    for task in Path("/proc/self/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def core_busy_s(cpu: int) -> float | None:
    """Seconds core ``cpu`` spent busy (any process) since boot, from /proc/stat."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, *ticks = line.split()
        if name == f"cpu{cpu}":
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, ticks[:8])
            return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return None
