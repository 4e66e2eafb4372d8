"""The host's CPU around a measured window: evidence for rounds that ran slow with the GPU idle.

Under load, a speculative engine's step is a loop on the host (draft, verify, accept, schedule)
around the GPU's work; a host CPU that is shared or taken away stretches every step while the
GPU waits. Two readings of Linux's ``/proc``, one before and one after a window, say how much:

* the machine's CPU time by kind (``/proc/stat``): the share the hypervisor took from this
  machine's CPUs (``steal``: a virtual machine's CPUs running another guest's work), over all
  CPUs and on the CPU that lost the most (``steal_max_cpu``: steal on one CPU is diluted in the
  machine's total), and the share that was busy;
* for each process of the engine, thread by thread (``/proc/<pid>/task/<tid>/schedstat``: time
  on a CPU, time runnable on a run queue), the CPU seconds its threads ran and the seconds they
  waited for a CPU, and the busiest process (SGLang's scheduler, llama-server's main process)
  with both as CPUs' worth over the window (1.0: one CPU all the time; several threads can make
  it more). A thread started during the window counts in full; one that ended during it is not
  seen (its time is lost, never negative);
* the measuring process itself (``client``: the load generator, whose event loop reads every
  streamed event of every client on one thread): CPUs' worth it ran, and its busiest thread's,
  so that a level paced by the client is not taken for one paced by the engine;
* where the engine's busy threads ran (``/proc/<pid>/task/<tid>/stat``: the CPU each thread was
  last on when the window ended): the busiest process's busiest thread's CPU, and every thread
  that ran a tenth of a CPU or more, so that rounds and boots can be told apart by placement
  (two busy threads on one CPU, a thread on a CPU far from the GPU).

A system without ``/proc`` (not Linux) reads nothing: the facts are then empty, never zeros.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
# The fields of /proc/stat's "cpu" lines, in clock ticks, in the kernel's order.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE = ("idle", "iowait")
Ticks = Mapping[str, int]


@dataclass(frozen=True)
class ProcessTimes:
    """One process: its name and, per thread id, (ns on a CPU, ns runnable waiting for one), and
    the CPU each thread was last on (``last_cpu``; a thread whose stat could not be read is
    missing)."""

    name: str
    threads: Mapping[int, tuple[int, int]]
    last_cpu: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class HostSnapshot:
    """One reading: when (monotonic ns), the machine's CPU ticks by kind (``cpu``) and per CPU
    (``cpus``), the processes."""

    at_ns: int
    cpu: Ticks | None
    processes: Mapping[int, ProcessTimes] = field(default_factory=dict)
    cpus: Mapping[str, Ticks] = field(default_factory=dict)
    client: ProcessTimes | None = None


def _ticks(parts: list[str]) -> dict[str, int]:
    values = [int(v) for v in parts[1 : 1 + len(CPU_FIELDS)]]
    values += [0] * (len(CPU_FIELDS) - len(values))  # an old kernel: no steal column
    return dict(zip(CPU_FIELDS, values, strict=True))


def cpu_lines(text: str) -> dict[str, dict[str, int]]:
    """Every ``cpu`` line of ``/proc/stat`` text by name (``cpu`` is the machine's total,
    ``cpu0``, ``cpu1``… each CPU), by field."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu"):
            try:
                out[parts[0]] = _ticks(parts)
            except ValueError:
                continue
    return out


def schedstat(text: str) -> tuple[int, int] | None:
    """``/proc/…/schedstat`` text: (ns on a CPU, ns waiting on a run queue), or None."""
    parts = text.split()
    if len(parts) < 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


def stat_cpu(text: str) -> int | None:
    """``/proc/…/stat`` text: the CPU the task last ran on (field 39, ``processor``), or None.
    The command name (field 2) is in parentheses and may hold spaces and parentheses itself, so
    the fields are counted from the last ``)``."""
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 37:
        return None
    try:
        return int(fields[36])  # fields[0] is field 3 (state)
    except ValueError:
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def process_times(pid: int, proc: Path = PROC) -> ProcessTimes | None:
    """A process's name and its threads' schedstat (None: gone, or no schedstat)."""
    base = proc / str(pid)
    name = (_read(base / "comm") or "").strip() or str(pid)
    try:
        tasks = [t for t in (base / "task").iterdir() if t.name.isdigit()]
    except OSError:
        return None
    threads, last_cpu = {}, {}
    for task in tasks:
        got = schedstat(_read(task / "schedstat") or "")
        if got is not None:
            threads[int(task.name)] = got
            cpu = stat_cpu(_read(task / "stat") or "")
            if cpu is not None:
                last_cpu[int(task.name)] = cpu
    return ProcessTimes(name, threads, last_cpu) if threads else None


def snapshot(
    pids: Iterable[int] = (), proc: Path = PROC, client: int | None = None
) -> HostSnapshot:
    """Read the machine's CPU ticks, each of ``pids`` and the ``client`` process now."""
    processes = {}
    for pid in pids:
        times = process_times(pid, proc)
        if times is not None:
            processes[pid] = times
    lines = cpu_lines(_read(proc / "stat") or "")
    total = lines.pop("cpu", None)
    mine = process_times(client, proc) if client is not None else None
    return HostSnapshot(time.monotonic_ns(), total, processes, lines, mine)


def _shares(before: Ticks, after: Ticks) -> dict[str, float] | None:
    """``steal`` and ``busy`` as shares of the ticks between two readings of one line (each
    counter's difference floored at 0: iowait may go back, proc(5) says)."""
    delta = {k: max(0, after.get(k, 0) - before.get(k, 0)) for k in CPU_FIELDS}
    total = sum(delta.values())
    if total <= 0:
        return None
    idle = sum(delta[k] for k in _IDLE) + delta["steal"]
    return {"steal": delta["steal"] / total, "busy": (total - idle) / total}


BUSY_THREAD_CPUS = 0.1  # a thread that ran this many CPUs' worth of a window is placed


def _thread_spent(before: ProcessTimes | None, after: ProcessTimes, tid: int) -> tuple[int, int]:
    """ns one thread ran and waited between two readings (a new thread in full; a thread id
    whose counters went back is a new thread)."""
    r1, w1 = after.threads[tid]
    r0, w0 = (before.threads.get(tid) if before else None) or (0, 0)
    return (r1, w1) if r1 < r0 or w1 < w0 else (r1 - r0, w1 - w0)


def placement(
    before: Mapping[int, ProcessTimes], after: Mapping[int, ProcessTimes], wall_ns: int
) -> list[dict[str, Any]]:
    """The engine's threads that ran at least ``BUSY_THREAD_CPUS`` of the window, busiest
    first: process name, the CPU the thread was last on, CPUs' worth it ran."""
    out = []
    for pid, times in after.items():
        for tid in times.threads:
            ran = _thread_spent(before.get(pid), times, tid)[0] / wall_ns
            if ran >= BUSY_THREAD_CPUS and tid in times.last_cpu:
                out.append({"name": times.name, "cpu": times.last_cpu[tid], "cpus": ran})
    return sorted(out, key=lambda t: -t["cpus"])


def _spent(before: ProcessTimes | None, after: ProcessTimes) -> tuple[int, int]:
    """ns on a CPU and ns waiting between two readings of one process, thread by thread."""
    spent = [_thread_spent(before, after, tid) for tid in after.threads]
    return sum(r for r, _ in spent), sum(w for _, w in spent)


def host_facts(before: HostSnapshot, after: HostSnapshot) -> dict[str, Any]:
    """What the host's CPU did between two readings: ``steal`` and ``busy`` (shares of all
    CPUs' time), ``steal_max_cpu`` (the most stolen from one CPU), and over the engine's
    processes still there at the end, ``engine_cpu_s`` and ``engine_wait_s`` and the
    ``busiest`` process (``cpus``: CPUs' worth it ran, ``wait``: CPUs' worth it waited)."""
    wall_ns = after.at_ns - before.at_ns
    out: dict[str, Any] = {}
    if before.cpu is not None and after.cpu is not None:
        out.update(_shares(before.cpu, after.cpu) or {})
    per_cpu = [s["steal"] for name, ticks in after.cpus.items() if name in before.cpus
               and (s := _shares(before.cpus[name], ticks)) is not None]  # fmt: skip
    if per_cpu:
        out["steal_max_cpu"] = max(per_cpu)
    spent = {pid: _spent(before.processes.get(pid), times)
             for pid, times in after.processes.items()}  # fmt: skip
    if spent and wall_ns > 0:
        out["engine_cpu_s"] = sum(r for r, _ in spent.values()) / 1e9
        out["engine_wait_s"] = sum(w for _, w in spent.values()) / 1e9
        top = max(spent, key=lambda pid: spent[pid][0])
        out["busiest"] = {
            "name": after.processes[top].name,
            "cpus": spent[top][0] / wall_ns,
            "wait": spent[top][1] / wall_ns,
        }
        busy = placement(before.processes, after.processes, wall_ns)
        mine = [t for t in busy if t["name"] == after.processes[top].name]
        if mine:  # the busiest process's busiest thread: SGLang's scheduler loop
            out["busiest"]["on_cpu"] = mine[0]["cpu"]
        if busy:
            out["busy_threads"] = busy
    if after.client is not None and wall_ns > 0:
        out["client"] = client_cpus(before.client, after.client, wall_ns)
    return out


def client_cpus(before: ProcessTimes | None, after: ProcessTimes, wall_ns: int) -> dict[str, Any]:
    """The measuring process over a window: ``cpus`` (CPUs' worth its threads ran) and
    ``thread`` (its busiest thread's)."""
    ran = [_thread_spent(before, after, tid)[0] for tid in after.threads]
    return {"cpus": sum(ran) / wall_ns, "thread": max(ran) / wall_ns}


def shared_cpus(busy_threads: Sequence[Mapping[str, Any]]) -> list[int]:
    """CPUs that two or more busy threads were last on at the end of one window."""
    seen: dict[int, int] = {}
    for thread in busy_threads:
        seen[int(thread["cpu"])] = seen.get(int(thread["cpu"]), 0) + 1
    return sorted(cpu for cpu, n in seen.items() if n > 1)


def _span(values: Sequence[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else (
        f"{format(low, fmt)}-{format(high, fmt)}")  # fmt: skip


def host_summary(rounds: Sequence[Mapping[str, Any]]) -> str | None:
    """The host's CPU over several rounds, as ranges: ``12 rounds: steal 0.00-0.66% (one CPU
    at most 1.20%), busy 13-14%, sglang::schedul ran 1.01-1.02 CPUs, waited at most 0.000``
    (None: nothing was read)."""
    read = [f for f in rounds if f]
    if not read:
        return None
    parts = []
    steal = [float(f["steal"]) for f in read if f.get("steal") is not None]
    if steal:
        worst = [float(f["steal_max_cpu"]) for f in read if f.get("steal_max_cpu") is not None]
        parts.append(f"steal {_span(steal, '.2%')}"
                     + (f" (one CPU at most {max(worst):.2%})" if worst else ""))  # fmt: skip
    busy = [float(f["busy"]) for f in read if f.get("busy") is not None]
    if busy:
        parts.append(f"busy {_span(busy, '.0%')}")
    tops = [f["busiest"] for f in read if f.get("busiest")]
    if tops:
        names = sorted({str(t["name"]) for t in tops})
        ran = [float(t.get("cpus", t.get("cpu", 0.0))) for t in tops]
        waited = max(float(t["wait"]) for t in tops)
        on = sorted({int(t["on_cpu"]) for t in tops if t.get("on_cpu") is not None})
        where = f" on CPU{'s' * (len(on) > 1)} {', '.join(map(str, on))}" if on else ""
        parts.append(f"{'/'.join(names)} ran {_span(ran, '.2f')} CPUs{where}, waited at most "
                     f"{waited:.3f}")  # fmt: skip
    others = other_busy(read)
    if others:
        parts.append(others)
    mine = [float(f["client"]["thread"]) for f in read if f.get("client")]
    if mine:
        near = (" (near one CPU: the level may be paced by the client, not the engine)"
                if max(mine) >= NEAR_ONE_CPU else "")  # fmt: skip
        parts.append(f"the load client's busiest thread {_span(mine, '.2f')} CPUs{near}")
    crowded = [f for f in read if shared_cpus(f.get("busy_threads") or [])]
    if crowded:
        parts.append(f"busy threads shared a CPU in {len(crowded)} of them")
    return f"{len(read)} round{'s' * (len(read) != 1)}: " + ", ".join(parts) if parts else None


OTHER_BUSY_CPUS = 0.5  # a thread of another engine process this busy is named in the summary
NEAR_ONE_CPU = 0.8  # a thread this busy is close to all one CPU can give it


def other_threads(facts: Mapping[str, Any]) -> dict[str, float]:
    """One round's busiest thread of each engine process other than the round's busiest
    process, by process name: CPUs' worth it ran (threads under ``BUSY_THREAD_CPUS`` unseen)."""
    top = str((facts.get("busiest") or {}).get("name"))
    most: dict[str, float] = {}
    for thread in facts.get("busy_threads") or []:
        name = str(thread["name"])
        if name != top:
            most[name] = max(most.get(name, 0.0), float(thread["cpus"]))
    return most


def other_busy(read: Sequence[Mapping[str, Any]]) -> str | None:
    """The busiest thread of each engine process other than the busiest process, over the
    rounds, where it ran ``OTHER_BUSY_CPUS`` or more in some round: ``python3 0.77-0.91 CPUs``,
    and a word where one came near a whole CPU. A thread's work is serial: at one CPU it can
    go no faster, and what it serves (SGLang's HTTP server and tokenizer manager stream every
    token of every request) waits on it. The busiest process's own loop is left out: SGLang's
    scheduler polls and reads one CPU whatever its load."""
    per_name: dict[str, list[float]] = {}
    for facts in read:
        for name, cpus in other_threads(facts).items():
            per_name.setdefault(name, []).append(cpus)
    shown = {n: v for n, v in sorted(per_name.items()) if max(v) >= OTHER_BUSY_CPUS}
    if not shown:
        return None
    text = "; ".join(f"{name} {_span(v, '.2f')} CPUs" for name, v in shown.items())
    near = [n for n, v in shown.items() if max(v) >= NEAR_ONE_CPU]
    note = (f" ({', '.join(near)} near one CPU: a thread that busy can pace what it serves)"
            if near else "")  # fmt: skip
    return f"busiest thread of another process: {text}{note}"
