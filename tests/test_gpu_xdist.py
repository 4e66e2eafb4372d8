"""pytest-xdist on a GPU host, with a real CUDA llama-server: one worker per GPU.

- Every engine runs on its worker's GPU only: NVML's compute processes, sampled on every GPU
  while the run goes, show each engine (by the ``PYTEST_XDIST_WORKER`` it inherited) on one
  GPU, and each worker on its own one.
- The merged results hold every config, each with the telemetry and hardware key of the GPU
  its worker owned.
- More workers than GPUs are refused with the count and the fix.
- A worker killed while its engine serves leaves no engine on any GPU; its config is marked
  in the merged results and the others are kept.

With one GPU the run has one worker; on a host with two, two. Skipped (with the reason)
without an NVIDIA GPU or without a CUDA llama-server ($SPECDEC_LLAMA_SERVER,
./scripts/build-llama-cuda).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fault_server import parent_pid

from pytest_specdec.core.results import load_results
from pytest_specdec.gpu.nvml import fingerprints

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parent.parent
CONFIGS = "baseline,ngram,draft-d4,draft-d16"
ON_GPU = "--specdec-engine-args=-ngl 99 --spec-draft-ngl 99"


@pytest.fixture
def cuda_server() -> str:
    binary = os.environ.get("SPECDEC_LLAMA_SERVER")
    if not binary:
        pytest.skip("no CUDA llama-server: build one with ./scripts/build-llama-cuda and set "
                    "SPECDEC_LLAMA_SERVER")  # fmt: skip
    return binary


def _xdist_worker(pid: int) -> str | None:
    """The xdist worker an engine belongs to: the PYTEST_XDIST_WORKER it inherited."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"PYTEST_XDIST_WORKER="):
            return item.split(b"=", 1)[1].decode()
    return None


class GpuProcesses:
    """NVML's compute processes on every GPU, sampled in a thread: GPU index → {pid: worker}."""

    def __init__(self, nvml: Any, period_s: float = 0.2) -> None:
        self.nvml = nvml
        self.period_s = period_s
        self.seen: dict[int, dict[int, str | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def now(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for index in range(self.nvml.nvmlDeviceGetCount()):
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            out[index] = [p.pid for p in procs]
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            for index, pids in self.now().items():
                for pid in pids:
                    self.seen.setdefault(index, {}).setdefault(pid, _xdist_worker(pid))
            self._stop.wait(self.period_s)

    @contextmanager
    def watching(self) -> Iterator[GpuProcesses]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)


def _pytest(tmp: Path, workers: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "suites/test_throughput.py", "-q", "-p", "no:cacheprovider",
        "-n", str(workers), "--dist", "loadgroup", "--max-worker-restart", "0",
        ON_GPU, "--specdec-require-gpu", "--specdec-cooldown-cap", "5",
        "--specdec-runs", "2", "--specdec-max-tokens", "32", "-k", "fibonacci or haiku or verdict",
        "--specdec-results", str(tmp / "r.json"), "--specdec-baseline-dir", str(tmp / "b"),
        *extra,
    ]  # fmt: skip


def test_one_worker_per_gpu_each_engine_on_its_own_gpu(
    nvml: Any, cuda_server: str, tmp_path: Path
) -> None:
    n = nvml.nvmlDeviceGetCount()
    uuids = [fp.uuid for fp in fingerprints(list(range(n)), nvml=nvml)]
    start = time.monotonic()
    with GpuProcesses(nvml).watching() as gpus:
        proc = subprocess.run(_pytest(tmp_path, n, "--spec-config", CONFIGS), cwd=REPO,
                              capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.monotonic() - start
    print(proc.stdout[-4000:], f"wall {wall:.1f} s with {n} worker(s); engines seen {gpus.seen}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    owners = {index: set(pids.values()) for index, pids in gpus.seen.items()}
    assert all(len(workers) == 1 and None not in workers for workers in owners.values()), owners
    worker_gpu = {next(iter(w)): index for index, w in owners.items()}
    assert len(worker_gpu) == len(owners), f"a worker used two GPUs: {owners}"
    doc = load_results(tmp_path / "r.json")
    assert {c["name"] for c in doc["configs"]} == set(CONFIGS.split(","))
    assert {name.split(".")[-2] for name in doc["workers"]} == set(worker_gpu)
    for worker, index in worker_gpu.items():  # each worker's file: its GPU, its configs on it
        part = load_results(tmp_path / f"r.{worker}.json")
        [device] = part["gpu"]["devices"]
        assert (device["index"], device["uuid"]) == (index, uuids[index]), (worker, device)
        for cfg in part["configs"]:
            runs = [r for r in cfg["runs"] if r["phase"] == "measure"]
            assert runs and all(r["ok"] for r in runs), cfg["name"]
            assert {d["index"] for r in runs for d in r["gpu"]["devices"]} == {index}
            assert all(r["gpu"]["devices"][0]["sm_clock_mhz"]["median"] for r in runs)


def test_more_workers_than_gpus_are_refused_with_the_count(nvml: Any, tmp_path: Path) -> None:
    n = nvml.nvmlDeviceGetCount()
    proc = subprocess.run(_pytest(tmp_path, n + 1, "--spec-config", "baseline"), cwd=REPO,
                          capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert f"{n + 1} xdist workers x 1 GPU(s) each need {n + 1} GPUs, but only {n} " in out, out[
        -3000:
    ]
    assert f"run with -n {n} or fewer" in out, out[-3000:]


def test_a_killed_worker_leaves_no_engine_on_any_gpu(
    nvml: Any, cuda_server: str, tmp_path: Path
) -> None:
    n = nvml.nvmlDeviceGetCount()
    gpus = GpuProcesses(nvml)
    before = {pid for pids in gpus.now().values() for pid in pids}
    args = _pytest(tmp_path, n, "--spec-config", "baseline,ngram", "--specdec-runs", "3")
    with subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:  # fmt: skip
        deadline = time.monotonic() + 300
        worker = None
        while worker is None and time.monotonic() < deadline and proc.poll() is None:
            for pids in gpus.now().values():  # an engine serving a worker that has written
                for pid in set(pids) - before:
                    name = _xdist_worker(pid)
                    if name and (tmp_path / f"r.{name}.json").is_file():
                        worker = parent_pid(pid)
            time.sleep(0.2)
        assert worker, "no engine of an xdist worker that had written results, on any GPU"
        os.kill(worker, signal.SIGKILL)
        output, _ = proc.communicate(timeout=600)
    print(output[-4000:])
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, output[-4000:]
    left = {pid for pids in gpus.now().values() for pid in pids} - before
    assert not left, f"engines left on the GPUs: {left}"
    doc = load_results(tmp_path / "r.json")
    [lost] = doc["lost_workers"]
    records = {c["name"]: c for c in doc["configs"]}
    assert records[lost["config"]]["error"].startswith("incomplete: xdist worker")
    for name in {"baseline", "ngram"} - {lost["config"]}:
        if n > 1:  # the other worker's config is whole
            assert records[name].get("error") is None and records[name]["runs"]
