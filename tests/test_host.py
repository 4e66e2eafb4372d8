"""The host's CPU around a window (measure/host.py): /proc/stat's steal and busy shares, and
the engine's processes' time on a CPU and waiting for one, from a made /proc and from this
process's own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_specdec.measure.host import (
    HostSnapshot,
    ProcessTimes,
    cpu_ticks,
    host_facts,
    host_line,
    schedstat,
    snapshot,
)

STAT = "cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 5\n"


def _proc(root: Path, stat: dict[str, int], processes: dict[int, tuple[str, list[str]]]) -> None:
    (root / "stat").write_text(STAT.format(**stat))
    for pid, (name, threads) in processes.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "comm").write_text(name + "\n")
        for tid, text in enumerate(threads, start=pid):
            task = root / str(pid) / "task" / str(tid)
            task.mkdir(parents=True)
            (task / "schedstat").write_text(text)


def test_proc_texts_parse_and_odd_ones_read_as_nothing() -> None:
    assert cpu_ticks("cpu  1 2 3 4 5 6 7 8 9 10\n") == {
        "user": 1, "nice": 2, "system": 3, "idle": 4, "iowait": 5, "irq": 6, "softirq": 7,
        "steal": 8}  # fmt: skip
    assert cpu_ticks("cpu  1 2 3 4\n")["steal"] == 0  # an old kernel: no steal column
    assert cpu_ticks("cpu0 1 2 3\n") is None  # only per-CPU lines: the total is missing
    assert schedstat("123 456 7\n") == (123, 456)
    assert schedstat("") is None and schedstat("x y") is None


def test_steal_busy_and_the_busiest_engine_process_over_a_window(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    _proc(first, {"user": 100, "system": 0, "idle": 900, "steal": 0},
          {10: ("sched", ["1000000000 0 1", "0 0 1"]), 11: ("detok", ["500 0 1"]),
           12: ("gone", ["1 1 1"])})  # fmt: skip
    # 1000 ticks later: 500 busy, 400 idle, 100 stolen; the scheduler ran 0.9 s of its second
    # (two threads) and waited 0.05 s for a CPU; the detokenizer hardly ran; one process left
    _proc(second, {"user": 600, "system": 0, "idle": 1300, "steal": 100},
          {10: ("sched", ["1600000000 50000000 9", "300000000 0 4"]), 11: ("detok", ["900 0 2"]),
           13: ("new", ["5 5 5"])})  # fmt: skip
    before = snapshot([10, 11, 12], first)
    after = snapshot([10, 11, 13], second)
    assert set(before.processes) == {10, 11, 12} and set(after.processes) == {10, 11, 13}
    window = HostSnapshot(before.at_ns + 1_000_000_000, after.cpu, after.processes)
    facts = host_facts(before, window)
    assert facts["steal"] == pytest.approx(0.1) and facts["busy"] == pytest.approx(0.5)
    assert facts["engine_cpu_s"] == pytest.approx(0.9000004)  # only processes seen in both
    assert facts["engine_wait_s"] == pytest.approx(0.05)
    assert facts["busiest"] == {"name": "sched", "cpu": pytest.approx(0.9),
                                "wait": pytest.approx(0.05)}  # fmt: skip
    assert host_line(facts) == "steal 10.0%, busy 50%, sched on a CPU 90%, waited 5.0%"


def test_nothing_read_gives_no_facts(tmp_path: Path) -> None:
    empty = snapshot([1], tmp_path)  # no stat file, no process: not Linux, or no such process
    assert empty.cpu is None and empty.processes == {}
    assert host_facts(empty, empty) == {} and host_line({}) is None
    restarted = HostSnapshot(0, None, {7: ProcessTimes("x", 5, 0)})  # the PID was reused
    assert host_facts(HostSnapshot(0, None, {7: ProcessTimes("x", 9, 0)}), restarted) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_this_process_is_read_from_the_real_proc() -> None:
    before = snapshot([os.getpid()])
    sum(i * i for i in range(200_000))  # some CPU time of our own
    facts = host_facts(before, snapshot([os.getpid()]))
    assert 0 <= facts["steal"] <= 1 and 0 <= facts["busy"] <= 1
    assert facts["engine_cpu_s"] > 0 and facts["busiest"]["cpu"] > 0
