"""Keeping the harness's own process from pausing while it measures.

Python's cyclic garbage collector stops every thread of a process while it runs, for a time
that grows with the objects the process holds (a full collection of a process that imports
numpy, scipy, httpx and pytest takes tens of milliseconds). A pause in the process that sends
the requests delays the next request of a closed-loop client and the reading of the streams,
which the engine's speed never caused. So each measured window runs with the collector held
off: reference counting still frees everything that is not in a cycle, and the collections
that come due meanwhile run once the window ends, between measurements (as ``timeit`` does for
its timed loops). No collection is forced on the way in: a forced one at every run widens the
moments in which an interrupt (Ctrl-C, SIGTERM) lands in a weak reference's callback, where
Python drops it instead of stopping the run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """Hold the cyclic collector off until the block ends (it is enabled again only if it was
    enabled before; nesting is safe)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
