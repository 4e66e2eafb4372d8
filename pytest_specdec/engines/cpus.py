"""The CPU cores an engine may use: given (``--specdec-cpus``), or a CPU host's cores split
between pytest-xdist workers, so that engines started side by side do not starve each other
(llama.cpp's worker threads spin: two engines that each take every core of a 2-core machine
slow each other down many times over).

Each share is a contiguous block of ``cores // workers`` cores; the engine is pinned to it
(CPU affinity, set in the child before it starts) and, for llama.cpp, runs that many threads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


class CpuShareError(ValueError):
    """The cores cannot be split as asked; the message names the numbers and the fix."""


def available() -> tuple[int, ...]:
    """The cores this process may run on (its CPU affinity), sorted."""
    return tuple(sorted(os.sched_getaffinity(0)))


def describe(cores: Sequence[int]) -> str:
    """``(0, 1, 2, 5)`` → ``"0-2,5"``."""
    parts: list[str] = []
    for core in sorted(cores):
        if parts and core == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{core}"
        else:
            parts.append(str(core))
    return ",".join(parts)


def share(cores: Sequence[int], index: int, workers: int) -> tuple[int, ...]:
    """Worker ``index`` of ``workers``: its own block of ``len(cores) // workers`` cores."""
    per = len(cores) // workers
    if per < 1:
        raise CpuShareError(
            f"{workers} pytest-xdist workers on {len(cores)} core(s) ({describe(cores)}) would "
            f"leave a worker less than one core; run with -n {len(cores)} or fewer"
            + ("" if len(cores) > 1 else ", or without -n")
        )
    return tuple(sorted(cores)[index * per : (index + 1) * per])


def engine_cpus(
    given: Sequence[int] | None, index: int, workers: int, gpu_host: bool
) -> tuple[int, ...] | None:
    """The cores of this worker's engine: ``given`` (shared between the workers), else on a
    CPU host under pytest-xdist this process's cores shared between the workers, else None
    (no pinning: the engine's own default)."""
    if given is not None:
        missing = sorted(set(given) - set(available()))
        if missing:
            raise CpuShareError(
                f"--specdec-cpus {describe(given)}: core(s) {describe(missing)} are not "
                f"available to this process (it may use {describe(available())})"
            )
        return share(given, index, workers) if workers > 1 else tuple(given)
    if workers > 1 and not gpu_host:
        return share(available(), index, workers)
    return None
