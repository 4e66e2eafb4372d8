"""The engine's CPU cores: the split between pytest-xdist workers on a CPU host, --specdec-cpus,
the refusal of a split that leaves a worker less than a core, and real pinning of a process."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from pytest_specdec.core.values import cpu_list
from pytest_specdec.engines.cpus import (
    CpuShareError,
    available,
    describe,
    engine_cpus,
    share,
)
from pytest_specdec.engines.launch import start_process
from pytest_specdec.verdict.baselines import key_for


def test_cores_are_split_in_contiguous_blocks() -> None:
    cores = (0, 1, 2, 3, 4, 5, 6)
    assert [share(cores, i, 3) for i in range(3)] == [(0, 1), (2, 3), (4, 5)]
    assert share((0, 1), 1, 2) == (1,) and describe((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    with pytest.raises(CpuShareError, match=r"3 pytest-xdist workers on 2 core\(s\) \(0-1\).*-n 2"):
        share((0, 1), 0, 3)


def test_who_gets_which_cores() -> None:
    mine = available()
    assert engine_cpus(None, 0, 1, gpu_host=False) is None  # one process: the engine's default
    assert engine_cpus(None, 0, 2, gpu_host=True) is None  # GPU host: workers own GPUs
    if len(mine) >= 2:
        assert engine_cpus(None, 1, 2, gpu_host=False) == share(mine, 1, 2)
    assert engine_cpus(mine[:1], 0, 1, gpu_host=True) == mine[:1]  # asked for: always pinned
    with pytest.raises(CpuShareError, match="not available to this process"):
        engine_cpus((max(mine) + 1,), 0, 1, gpu_host=False)


def test_cpu_list_values() -> None:
    assert cpu_list("3,0-1") == (0, 1, 3)
    for bad in ("x", "2-1", "0,,1"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"give e\.g\. 0 or 0-3,6"):
            cpu_list(bad)


def test_a_started_process_runs_on_its_share_only(tmp_path: Path) -> None:
    core = available()[-1]
    proc = start_process(["sleep", "30"], {}, tmp_path / "log", cpus=(core,))
    try:
        assert os.sched_getaffinity(proc.pid) == {core}
    finally:
        proc.stop()


def test_the_share_is_part_of_the_hardware_key() -> None:
    results = {"host": {"cpu_model": "cpu", "cpu_count": 2}, "options": {"cpus": [1]}}
    assert key_for(results, {})["hardware"]["count"] == 1
    assert key_for({**results, "options": {}}, {})["hardware"]["count"] == 2


def test_too_many_workers_for_the_cores_are_refused_with_the_reason(
    suite_project: pytest.Pytester,
) -> None:
    """No engine is started: every config's tests error with the reason and the fix."""
    workers = len(available()) + 1
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "-n", str(workers), "--spec-config", "baseline",
        "-p", "no:cacheprovider", "--specdec-results", "r.json",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes().get("passed", 0) == 0
    result.stdout.fnmatch_lines([f"*{workers} pytest-xdist workers on {workers - 1} core(s)*"])
    assert not (suite_project.path / "results" / "logs").exists()  # no engine was started
