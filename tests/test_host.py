"""The host's CPU around a window (measure/host.py): /proc/stat's steal and busy shares over the
machine and per CPU, and the engine's processes' time on a CPU and waiting for one, thread by
thread, from a made /proc and from this process's own."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_specdec.measure.host import (
    HostSnapshot,
    ProcessTimes,
    cpu_lines,
    host_facts,
    host_summary,
    other_busy,
    schedstat,
    shared_cpus,
    snapshot,
    stat_cpu,
)

STAT = (
    "cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\n"
    "cpu0 {user} 0 0 {idle0} 0 0 0 {steal} 0 0\n"
    "cpu1 0 0 0 {idle1} 0 0 0 0 0 0\nintr 5\n"
)


def _proc(root: Path, stat: dict[str, int], processes: dict[int, tuple[str, list[str]]]) -> None:
    root.mkdir()
    (root / "stat").write_text(STAT.format(**stat))
    for pid, (name, threads) in processes.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "comm").write_text(name + "\n")
        for n, text in enumerate(threads):
            task = root / str(pid) / "task" / str(pid * 100 + n)
            task.mkdir(parents=True)
            (task / "schedstat").write_text(text)


def test_proc_texts_parse_and_odd_ones_read_as_nothing() -> None:
    assert cpu_lines("cpu  1 2 3 4 5 6 7 8 9 10\n").get("cpu") == {
        "user": 1, "nice": 2, "system": 3, "idle": 4, "iowait": 5, "irq": 6, "softirq": 7,
        "steal": 8}  # fmt: skip
    assert cpu_lines("cpu  1 2 3 4\n")["cpu"]["steal"] == 0  # an old kernel: no steal column
    assert cpu_lines("cpu0 1 2 3\n").get("cpu") is None  # only per-CPU lines: no total
    assert cpu_lines("cpu  1 x 3\n").get("cpu") is None
    assert schedstat("123 456 7\n") == (123, 456)
    assert schedstat("") is None and schedstat("x y") is None


def test_steal_busy_and_the_busiest_engine_process_over_a_window(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _proc(first, {"user": 100, "system": 0, "idle": 900, "steal": 0, "idle0": 400, "idle1": 500},
          {10: ("sched", ["1000000000 0 1", "0 0 1", "70 0 1"]), 11: ("detok", ["500 0 1"]),
           12: ("gone", ["1 1 1"])})  # fmt: skip
    # 1000 ticks later: 500 busy, 400 idle, 100 stolen, all of it from cpu0 (100 of its 600
    # ticks); the scheduler's first thread ran 0.6 s more and waited 0.05 s, its second ran
    # 0.3 s, its third ended and a new one ran 0.1 s; the detokenizer hardly ran
    _proc(second, {"user": 600, "system": 0, "idle": 1300, "steal": 100, "idle0": 400,
                   "idle1": 900},
          {10: ("sched", ["1600000000 50000000 9", "300000000 0 4"]), 11: ("detok", ["900 0 2"]),
           13: ("new", ["5 5 5"])})  # fmt: skip
    (second / "10" / "task" / "1003").mkdir()  # a thread that started during the window
    (second / "10" / "task" / "1003" / "schedstat").write_text("100000000 0 1")
    before = snapshot([10, 11, 12], first)
    after = snapshot([10, 11, 13], second)
    assert set(before.processes) == {10, 11, 12} and set(after.processes) == {10, 11, 13}
    assert set(after.processes[10].threads) == {1000, 1001, 1003}
    window = HostSnapshot(before.at_ns + 1_000_000_000, after.cpu, after.processes, after.cpus)
    facts = host_facts(before, window)
    assert facts["steal"] == pytest.approx(0.1) and facts["busy"] == pytest.approx(0.5)
    assert facts["steal_max_cpu"] == pytest.approx(100 / 600)  # diluted to 10% over both
    # the ended thread's 70 ns are lost, never subtracted; process 13 counts in full
    assert facts["engine_cpu_s"] == pytest.approx(1.0000004 + 5e-9)
    assert facts["engine_wait_s"] == pytest.approx(0.05 + 5e-9)
    assert facts["busiest"] == {"name": "sched", "cpus": pytest.approx(1.0),
                                "wait": pytest.approx(0.05)}  # fmt: skip
    calm = {"steal": 0.0, "steal_max_cpu": 0.0, "busy": 0.5,
            "busiest": {"name": "sched", "cpus": 1.0, "wait": 0.0}}  # fmt: skip
    assert host_summary([calm, facts, {}]) == (
        "2 rounds: steal 0.00%-10.00% (one CPU at most 16.67%), busy 50%, sched ran 1.00 CPUs, "
        "waited at most 0.050")  # fmt: skip


def test_counters_that_go_back_are_floored_and_a_reused_thread_id_starts_afresh() -> None:
    old = {"user": 100, "nice": 0, "system": 0, "idle": 100, "iowait": 50, "irq": 0,
           "softirq": 0, "steal": 0}  # fmt: skip
    new = {**old, "user": 200, "idle": 200, "iowait": 40}  # iowait went back (proc(5))
    before = HostSnapshot(0, old, {7: ProcessTimes("x", {70: (900, 50)})})
    after = HostSnapshot(10**9, new, {7: ProcessTimes("x", {70: (300, 10)})})
    facts = host_facts(before, after)
    assert facts["busy"] == pytest.approx(0.5) and facts["steal"] == 0
    assert facts["engine_cpu_s"] == pytest.approx(300e-9)  # counted from the new thread's 0


def test_nothing_read_gives_no_facts(tmp_path: Path) -> None:
    empty = snapshot([1], tmp_path)  # no stat file, no process: not Linux, or no such process
    assert empty.cpu is None and empty.processes == {} and empty.cpus == {}
    assert host_facts(empty, empty) == {} and host_summary([{}, {}]) is None
    # results written before the busiest process's "cpu" became "cpus" still read
    old = {"steal": 0.0, "busiest": {"name": "s", "cpu": 1.01, "wait": 0.0}}
    assert host_summary([old]) == "1 round: steal 0.00%, s ran 1.01 CPUs, waited at most 0.000"


def _stat(comm: str, cpu: int) -> str:
    """A /proc/<pid>/task/<tid>/stat line whose field 39 (processor) is ``cpu``."""
    rest = ["S"] + ["0"] * 35 + [str(cpu)] + ["0"] * 13  # fields 3..52
    return f"4242 ({comm}) " + " ".join(rest) + "\n"


def test_where_the_busy_threads_ran(tmp_path: Path) -> None:
    assert stat_cpu(_stat("sglang::scheduler", 7)) == 7
    assert stat_cpu(_stat("odd ) name (x", 3)) == 3  # counted from the last parenthesis
    assert stat_cpu("4242 (short) S 1 2") is None and stat_cpu("") is None
    assert stat_cpu(_stat("x", 5).replace(" 5 ", " five ")) is None
    first, second = tmp_path / "a", tmp_path / "b"
    stat = {"user": 0, "system": 0, "idle": 100, "steal": 0, "idle0": 50, "idle1": 50}
    _proc(first, stat, {10: ("sched", ["0 0 1", "0 0 1"]), 11: ("http", ["0 0 1", "0 0 1"])})
    # one second later: the scheduler's loop ran 0.98 s and was last on CPU 5, its other thread
    # 0.05 s (not busy enough to place); the HTTP server's two threads 0.4 and 0.2 s, one of
    # them last on CPU 5 too, the other's stat unreadable (it is not placed)
    _proc(second, {**stat, "user": 100},
          {10: ("sched", ["980000000 0 1", "50000000 0 1"]),
           11: ("http", ["400000000 0 1", "200000000 0 1"])})  # fmt: skip
    (second / "10" / "task" / "1000" / "stat").write_text(_stat("sglang::schedul", 5))
    (second / "10" / "task" / "1001" / "stat").write_text(_stat("sglang::schedul", 2))
    (second / "11" / "task" / "1100" / "stat").write_text(_stat("python3", 5))
    before = snapshot([10, 11], first)
    after = snapshot([10, 11], second)
    assert after.processes[10].last_cpu == {1000: 5, 1001: 2}
    assert before.processes[10].last_cpu == {}
    window = HostSnapshot(before.at_ns + 1_000_000_000, after.cpu, after.processes, after.cpus)
    facts = host_facts(before, window)
    assert facts["busiest"]["on_cpu"] == 5
    assert facts["busy_threads"] == [
        {"name": "sched", "cpu": 5, "cpus": pytest.approx(0.98)},
        {"name": "http", "cpu": 5, "cpus": pytest.approx(0.4)}]  # fmt: skip
    assert shared_cpus(facts["busy_threads"]) == [5]
    apart = {**facts, "busy_threads": [{"name": "sched", "cpu": 3, "cpus": 1.0}],
             "busiest": {**facts["busiest"], "on_cpu": 3}}  # fmt: skip
    assert host_summary([facts, apart]) == (
        "2 rounds: steal 0.00% (one CPU at most 0.00%), busy 100%, sched ran 1.03 CPUs on CPUs 3, "
        "5, waited at most 0.000, busy threads shared a CPU in 1 of them")  # fmt: skip


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_this_process_is_read_from_the_real_proc() -> None:
    before = snapshot([os.getpid()])
    deadline = time.monotonic() + 0.2  # CPU work across several clock ticks
    while time.monotonic() < deadline:
        sum(i * i for i in range(10_000))
    facts = host_facts(before, snapshot([os.getpid()]))
    assert 0 <= facts["steal"] <= 1 and 0 <= facts["busy"] <= 1
    assert 0 <= facts["steal_max_cpu"] <= 1
    assert facts["engine_cpu_s"] > 0 and facts["busiest"]["cpus"] > 0
    assert facts["busiest"]["on_cpu"] in os.sched_getaffinity(0)  # this thread ran 0.2 s
    assert "client" not in facts  # read only when asked for


def test_the_measuring_process_is_read_as_the_client(tmp_path: Path) -> None:
    """The load generator's own CPU, apart from the engine's: its busiest thread near one CPU
    says the client may be what paces a level."""
    first, second = tmp_path / "a", tmp_path / "b"
    stat = {"user": 100, "system": 0, "idle": 900, "steal": 0, "idle0": 400, "idle1": 500}
    _proc(first, stat, {10: ("sched", ["0 0 1"]), 20: ("pytest", ["100 0 1", "0 0 1"])})
    # one second later: the client's event loop ran 0.85 s, another thread 0.1 s
    _proc(second, {**stat, "idle": 1900, "idle0": 900, "idle1": 1000},
          {10: ("sched", ["1000000000 0 1"]),
           20: ("pytest", ["850000100 0 1", "100000000 0 1"])})  # fmt: skip
    before, after = snapshot([10], first, client=20), snapshot([10], second, client=20)
    assert 20 not in after.processes and after.client is not None
    window = HostSnapshot(
        before.at_ns + 10**9, after.cpu, after.processes, after.cpus, after.client
    )
    facts = host_facts(before, window)
    assert facts["client"] == {"cpus": pytest.approx(0.95), "thread": pytest.approx(0.85)}
    assert facts["engine_cpu_s"] == pytest.approx(1.0)  # the client is not the engine's
    calm = {**facts, "client": {"cpus": 0.4, "thread": 0.3}}
    assert host_summary([calm, facts]).endswith(  # type: ignore[union-attr]
        "the load client's busiest thread 0.30-0.85 CPUs (near one CPU: the level may be paced "
        "by the client, not the engine)")  # fmt: skip
    assert host_summary([calm]).endswith("the load client's busiest thread 0.30 CPUs")  # type: ignore[union-attr]
    gone = snapshot([10], second, client=99)  # no such process: nothing, never zeros
    assert gone.client is None and "client" not in host_facts(before, gone)


def test_another_process_near_one_cpu_is_named() -> None:
    """SGLang's HTTP server and tokenizer manager (``python3``) streamed every token of 64
    requests at 0.77-0.91 CPUs on an H200; the summary names it beside the scheduler, whose
    polling loop reads one CPU at any load, and says a thread that busy can pace the level."""

    def facts(front: float, detok: float) -> dict[str, object]:
        return {"steal": 0.0, "busiest": {"name": "sglang::schedul", "cpus": 1.0, "wait": 0.0},
                "busy_threads": [{"name": "sglang::schedul", "cpu": 1, "cpus": 1.0},
                                 {"name": "python3", "cpu": 7, "cpus": front},
                                 {"name": "python3", "cpu": 8, "cpus": 0.2},
                                 {"name": "sglang::detoken", "cpu": 2, "cpus": detok}]}  # fmt: skip

    assert other_busy([facts(0.77, 0.21), facts(0.91, 0.29)]) == (
        "busiest thread of another process: python3 0.77-0.91 CPUs (python3 near one CPU: a "
        "thread that busy can pace what it serves)")  # fmt: skip
    assert other_busy([facts(0.55, 0.6), facts(0.6, 0.2)]) == (
        "busiest thread of another process: python3 0.55-0.60 CPUs; sglang::detoken "
        "0.20-0.60 CPUs")  # fmt: skip
    assert other_busy([facts(0.35, 0.2)]) is None  # SGLang's front at 16 clients
    # a round in which the front out-ran the scheduler: it is that round's busiest, left out
    # of that round alone, and the scheduler's loop is named for it
    front_first = {**facts(0.9, 0.2), "busiest": {"name": "python3", "cpus": 1.1, "wait": 0.0}}
    near = "(python3, sglang::schedul near one CPU: a thread that busy can pace what it serves)"
    assert other_busy([facts(0.95, 0.2), front_first]) == (
        f"busiest thread of another process: python3 0.95 CPUs; sglang::schedul 1.00 CPUs {near}"
    )
    assert host_summary([facts(0.9, 0.2)]) == (
        "1 round: steal 0.00%, sglang::schedul ran 1.00 CPUs, waited at most 0.000, busiest "
        "thread of another process: python3 0.90 CPUs (python3 near one CPU: a thread that busy "
        "can pace what it serves)")  # fmt: skip
