"""Keeping the harness's own process from pausing while it measures.

Python's cyclic garbage collector stops every thread of a process while it runs, for a time
that grows with the objects the process holds (a full collection of a process that imports
numpy, scipy, httpx and pytest takes tens of milliseconds). A pause in the process that sends
the requests delays the next request of a closed-loop client and the reading of the streams,
which the engine's speed never caused. So each measured window starts with the collection done
(before its clock starts) and runs with the collector held off; reference counting still frees
everything that is not in a cycle, and the collector is back as it was when the window ends.
This is what ``timeit`` does for its timed loops.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """Collect now, then hold the cyclic collector off until the block ends (it is enabled
    again only if it was enabled before; nesting is safe)."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
