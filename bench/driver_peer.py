"""The peer driver of the load-driver benchmark (see driver.py): guidellm from its own
virtual environment, pinned to the driver's core, against the same unpaced server; its
tok/s and CPU time as ``CeilingRow`` rows."""

from __future__ import annotations

import bisect
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver_plan import CeilingRow, Plan, core_busy_s

PEER_PIN = "guidellm==0.8.1"


@dataclass
class PeerResult:
    name: str
    command: list[str] | None = None
    rows: list[CeilingRow] = field(default_factory=list)
    reason: str | None = None  # why there are no rows
    log_path: str | None = None
    run_s: float | None = None  # the whole run, start-up included
    processes: list[int] = field(default_factory=list)  # worker processes per benchmark


# --- the peer: guidellm ----------------------------------------------------------------------


def guidellm_command(exe: Path, url: str, plan: Plan, work: Path, cpu: int) -> list[str]:
    data = work / "peer-prompts.jsonl"
    row = json.dumps({"prompt": "Count.", "output_tokens_count": plan.tokens})
    data.write_text((row + "\n") * 5000, encoding="utf-8")
    taskset = ["taskset", "-c", str(cpu)] if shutil.which("taskset") else []
    return [
        *taskset, str(exe), "run",
        "--backend", f"kind=openai_http,target={url}",
        "--profile", "kind=concurrent",
        "--override", "profile.streams", ",".join(str(c) for c in plan.peer_concurrencies),
        "--data", f"kind=json_file,path={data}",
        "--constraint", f"kind=max_duration,seconds={plan.window_s:g}",
        "--output", f"kind=json,path={work / 'peer.json'}",
        "--disable-console-interactive",
    ]  # fmt: skip


class GroupSampler(threading.Thread):
    """Samples, every ``period_s``, the CPU seconds of process group ``pgid`` (reaped children
    included) and the busy seconds of core ``core``; runs on ``own_core`` so that it takes
    nothing from the sampled core."""

    def __init__(self, pgid: int, core: int, own_core: int | None, period_s: float = 0.1):
        super().__init__(name="cpu-sampler", daemon=True)
        self.pgid, self.core, self.own_core, self.period_s = pgid, core, own_core, period_s
        self.samples: list[tuple[float, float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        if self.own_core is not None:
            os.sched_setaffinity(0, {self.own_core})
        while True:
            busy = core_busy_s(self.core) or 0.0
            self.samples.append((time.time(), group_cpu_s(self.pgid), busy))
            if self.halt.wait(self.period_s):
                return

    def between(self, start: float, end: float) -> tuple[float, float]:
        """(group CPU, core busy) seconds between two ``time.time()`` instants, interpolated."""
        a, b = self._at(start), self._at(end)
        return b[0] - a[0], b[1] - a[1]

    def _at(self, t: float) -> tuple[float, float]:
        s = self.samples
        i = min(max(bisect.bisect_left([x[0] for x in s], t), 1), len(s) - 1)
        (t0, *v0), (t1, *v1) = s[i - 1], s[i]
        f = 0.0 if t1 == t0 else min(max((t - t0) / (t1 - t0), 0.0), 1.0)
        group, busy = (x0 + (x1 - x0) * f for x0, x1 in zip(v0, v1, strict=True))
        return group, busy


def group_cpu_s(pgid: int) -> float:
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def run_guidellm(
    venv: Path, url: str, plan: Plan, work: Path, cpu: int, spare: int | None
) -> PeerResult:
    """Run guidellm pinned to ``cpu`` in its own process group; read its JSON report."""
    exe = venv / "bin" / "guidellm"
    if not exe.is_file():
        return PeerResult("guidellm", reason=f"{exe} not found; run with --install-peer")
    log = work / "peer.log"
    result = PeerResult("guidellm", guidellm_command(exe, url, plan, work, cpu), log_path=str(log))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    timeout = 60 + 40 * len(plan.peer_concurrencies)
    t0 = time.perf_counter()
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            result.command or [], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=work, start_new_session=True,
        )  # fmt: skip
    sampler = GroupSampler(proc.pid, cpu, spare)
    sampler.start()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        result.reason = f"guidellm did not finish in {timeout} s (log {log})"
        return result
    finally:
        sampler.halt.set()
        sampler.join()
    result.run_s = time.perf_counter() - t0
    out = work / "peer.json"
    if code != 0 or not out.is_file():
        result.reason = f"guidellm exited with {code} (log {log})"
        return result
    return peer_rows(result, json.loads(out.read_text(encoding="utf-8")), sampler)


def peer_rows(result: PeerResult, report: dict[str, Any], sampler: GroupSampler) -> PeerResult:
    """Streamed tok/s = output tokens of completed requests ÷ the benchmark's duration."""
    result.name = f"guidellm {report.get('metadata', {}).get('guidellm_version', '?')}"
    for bench in report.get("benchmarks", []):
        timing = bench["scheduler_metrics"]
        start, end = timing["measure_start_time"], timing["measure_end_time"]
        wall = end - start
        made = timing["requests_made"]
        tokens = bench["metrics"]["output_token_count"]["successful"]["total_sum"]
        used, busy = sampler.between(start, end)  # this process sleeps in wait()
        ok = int(made["successful"])
        result.processes.append(int(bench["scheduler_state"]["num_processes"]))
        result.rows.append(
            CeilingRow(
                driver=result.name,
                concurrency=int(bench["config"]["strategy"]["streams"]),
                tokens_per_s=tokens / wall if ok else None,
                requests_per_s=ok / wall if ok else None,
                requests=ok,
                errors=int(made["errored"]),
                window_s=wall,
                driver_cpu=used / wall,
                others_cpu=max(0.0, busy - used) / wall,
                tokens_per_cpu_s=tokens / used if ok and used > 0 else None,
            )
        )
    if not result.rows:
        result.reason = "guidellm wrote no benchmarks"
    return result


def install_peer(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PEER_PIN], check=True)
