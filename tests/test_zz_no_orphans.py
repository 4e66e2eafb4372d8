"""No engine started by this test run outlives it (the file's name makes it run last).

An engine belongs to this run when its working directory or its log file lies under the run's
base temporary folder, where every pytester project and ``tmp_path`` of the run is, or when
its environment marks it as started by this process or one this process started
(``engines_started_here``); engines of other runs on a shared machine are not counted. The
test checks once every test before it is done; the session-scoped fixture checks again when
the session ends, after every test of this process (under xdist, of this worker: each worker
has its own base folder and its own lineage).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_server import cmdline, engine_pids

from pytest_specdec.engines.launch import engines_started_here

GRACE_S = 10.0  # an engine killed with its parent (PR_SET_PDEATHSIG) may take a moment to go


def ours(root: Path) -> list[int]:
    return sorted(set(engine_pids(root)) | set(engines_started_here()))


def leftover_engines(root: Path) -> list[str]:
    """``"PID: command line"`` of each engine under ``root`` still alive after the grace."""
    deadline = time.monotonic() + GRACE_S
    pids = ours(root)
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = ours(root)
    return [f"{pid}: {cmdline(pid)}" for pid in pids]


@pytest.fixture(scope="session", autouse=True)
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.getbasetemp()
    yield root
    left = leftover_engines(root)
    assert not left, "engines outlived the test session:\n" + "\n".join(left)


def test_no_engine_outlives_the_tests_before_it(run_folder: Path) -> None:
    left = leftover_engines(run_folder)
    assert not left, "engines outlived their tests:\n" + "\n".join(left)
