"""The host's CPU around a measured window: evidence for rounds that ran slow with the GPU idle.

Under load, a speculative engine's step is a loop on the host (draft, verify, accept, schedule)
around the GPU's work; a host CPU that is shared or taken away stretches every step while the
GPU waits. Two readings of Linux's ``/proc``, one before and one after a window, say how much:

* the machine's CPU time by kind (``/proc/stat``): the share the hypervisor took from this
  machine's CPUs (``steal``: a virtual machine's CPUs running another guest's work) and the
  share that was busy;
* for each process of the engine, the CPU seconds its threads ran and the seconds they waited,
  runnable, for a CPU (``/proc/<pid>/task/<tid>/schedstat``: time on a CPU, time on a run
  queue), and the busiest one (SGLang's scheduler, llama-server's main process).

A system without ``/proc`` (not Linux) reads nothing: the facts are then empty, never zeros.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
# The fields of /proc/stat's "cpu" line, in clock ticks, in the kernel's order.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE = ("idle", "iowait")


@dataclass(frozen=True)
class ProcessTimes:
    """One process: its name and, summed over its threads, nanoseconds on a CPU and
    nanoseconds runnable but waiting for one."""

    name: str
    run_ns: int
    wait_ns: int


@dataclass(frozen=True)
class HostSnapshot:
    """One reading: when (monotonic ns), the machine's CPU ticks by kind, the processes."""

    at_ns: int
    cpu: Mapping[str, int] | None
    processes: Mapping[int, ProcessTimes] = field(default_factory=dict)


def cpu_ticks(text: str) -> dict[str, int] | None:
    """The machine-wide ``cpu`` line of ``/proc/stat`` text, by field (None: not found)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1 : 1 + len(CPU_FIELDS)]]
            values += [0] * (len(CPU_FIELDS) - len(values))  # an old kernel: no steal column
            return dict(zip(CPU_FIELDS, values, strict=True))
    return None


def schedstat(text: str) -> tuple[int, int] | None:
    """``/proc/…/schedstat`` text: (ns on a CPU, ns waiting on a run queue), or None."""
    parts = text.split()
    if len(parts) < 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def process_times(pid: int, proc: Path = PROC) -> ProcessTimes | None:
    """A process's name and its threads' schedstat sums (None: gone, or no schedstat)."""
    base = proc / str(pid)
    name = (_read(base / "comm") or "").strip() or str(pid)
    try:
        tasks = [t for t in (base / "task").iterdir() if t.name.isdigit()]
    except OSError:
        return None
    run = wait = 0
    seen = False
    for task in tasks:
        got = schedstat(_read(task / "schedstat") or "")
        if got is not None:
            seen = True
            run, wait = run + got[0], wait + got[1]
    return ProcessTimes(name, run, wait) if seen else None


def snapshot(pids: Iterable[int] = (), proc: Path = PROC) -> HostSnapshot:
    """Read the machine's CPU ticks and each of ``pids`` now."""
    processes = {}
    for pid in pids:
        times = process_times(pid, proc)
        if times is not None:
            processes[pid] = times
    return HostSnapshot(time.monotonic_ns(), cpu_ticks(_read(proc / "stat") or ""), processes)


def host_facts(before: HostSnapshot, after: HostSnapshot) -> dict[str, Any]:
    """What the host's CPU did between two readings: ``steal`` and ``busy`` (shares of all
    CPUs' time), and over the processes seen in both, ``engine_cpu_s`` and ``engine_wait_s``
    and the ``busiest`` process (its share of the window on a CPU and waiting for one)."""
    wall_ns = after.at_ns - before.at_ns
    out: dict[str, Any] = {}
    if before.cpu is not None and after.cpu is not None:
        delta = {k: after.cpu.get(k, 0) - before.cpu.get(k, 0) for k in CPU_FIELDS}
        total = sum(delta.values())
        if total > 0:
            out["steal"] = delta["steal"] / total
            out["busy"] = (total - sum(delta[k] for k in _IDLE) - delta["steal"]) / total
    both = {
        pid: (after.processes[pid], times)
        for pid, times in before.processes.items()
        if pid in after.processes and after.processes[pid].run_ns >= times.run_ns
    }
    if both and wall_ns > 0:
        runs = {pid: a.run_ns - b.run_ns for pid, (a, b) in both.items()}
        waits = {pid: max(0, a.wait_ns - b.wait_ns) for pid, (a, b) in both.items()}
        out["engine_cpu_s"] = sum(runs.values()) / 1e9
        out["engine_wait_s"] = sum(waits.values()) / 1e9
        top = max(runs, key=lambda pid: runs[pid])
        out["busiest"] = {
            "name": both[top][0].name,
            "cpu": runs[top] / wall_ns,
            "wait": waits[top] / wall_ns,
        }
    return out


def host_line(facts: Mapping[str, Any]) -> str | None:
    """One line for a report: ``steal 3.1%, busy 22%, sglang::schedul on a CPU 98%, waited
    0.4%`` (None: nothing was read)."""
    parts = []
    if facts.get("steal") is not None:
        parts.append(f"steal {facts['steal']:.1%}")
    if facts.get("busy") is not None:
        parts.append(f"busy {facts['busy']:.0%}")
    top = facts.get("busiest")
    if top:
        parts.append(f"{top['name']} on a CPU {top['cpu']:.0%}, waited {top['wait']:.1%}")
    return ", ".join(parts) or None
