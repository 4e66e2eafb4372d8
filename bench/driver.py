"""The load driver is not the bottleneck: its ceiling and timing overhead, beside a peer driver.

Ceiling: the plugin's own request path (``engines.base.stream_chat`` over a
``ClientSettings(...).build(url)`` client on a ``LoopThread``; this process pinned to one core)
against ``bench/fake_stream_server.py`` (its own process, pinned to another core): unpaced
streams of 1024 one-token chunks, closed loop at each concurrency for a fixed window (3 s;
1 s with ``--quick``) after one warm-up request per stream. Streamed tok/s = tokens of the
requests started in the window ÷ wall time until the last of them ended; one token per chunk,
so it is also chunks/s.

Overhead: a second server paced at 1000 tok/s per request, token i written at
received + (i+1)/rate, so N tokens (500; 250 with ``--quick``) ideally take N/rate.
overhead = driver e2e - N/rate, as % of e2e; "own" = driver e2e - the server's span from
request received to last chunk written (both clocks CLOCK_MONOTONIC), split into "request"
(call -> server has the request) and "tail" (last chunk written -> call returned); TPOT error
= the driver's TPOT against the ideal 1/rate.

CPU columns: the driver's (or peer's) CPU seconds, the server's, and other processes' busy
time on the driver's core, each ÷ the window; tok/cpu-s = tokens ÷ the driver's CPU seconds,
the one-core ceiling with contention taken out.

Peer: guidellm from its own virtual environment (``--peer-venv``, made by
``--install-peer``), pinned to the same core, against the same unpaced server at the same
concurrencies, stream length and window, with a JSON-lines prompt file (offline: no tokenizer
is loaded; token counts come from the server's ``usage``). Its tok/s = output tokens of the
requests completed in its window ÷ the window; its CPU is sampled from /proc for its process
group.

    python bench/driver.py [--quick] [--no-peer] [--install-peer] [--json PATH]

Exit status: 0 measured; 1 some requests failed or the peer failed; 2 the server could not
start, or bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a plain checkout

from pytest_specdec.core.results import (  # noqa: E402
    RunRecord,
    atomic_write_json,
    finalize_timings,
    host_fingerprint,
)
from pytest_specdec.core.values import positive_int  # noqa: E402
from pytest_specdec.engines.base import RequestSpec, stream_chat  # noqa: E402
from pytest_specdec.engines.launch import (  # noqa: E402
    EngineProcess,
    LaunchError,
    free_port,
    start_process,
    stop_process,
    wait_ready,
)
from pytest_specdec.measure.client import ClientSettings, LoopThread, RequestFailed  # noqa: E402

DRIVER = "pytest-specdec"
TOKEN = "tok "  # what bench/fake_stream_server.py sends per chunk
PEER_PIN = "guidellm==0.8.1"


@dataclass(frozen=True)
class Plan:
    concurrencies: tuple[int, ...]
    tokens: int
    window_s: float
    rate: float
    overhead_tokens: int
    overhead_requests: int
    overhead_concurrencies: tuple[int, ...]
    peer_concurrencies: tuple[int, ...]


FULL = Plan((1, 4, 16, 64), 1024, 3.0, 1000.0, 500, 20, (1, 16), (1, 4, 16, 64))
QUICK = Plan((1, 4, 16, 64), 1024, 1.0, 1000.0, 250, 10, (1,), ())


@dataclass(frozen=True)
class CeilingRow:
    driver: str
    concurrency: int
    tokens_per_s: float | None
    requests_per_s: float | None
    requests: int
    errors: int
    window_s: float
    driver_cpu: float | None = None  # the driver's CPU seconds ÷ wall seconds
    server_cpu: float | None = None  # the same for the server process
    others_cpu: float | None = None  # other processes' share of the driver's core
    tokens_per_cpu_s: float | None = None  # tokens ÷ the driver's CPU seconds


@dataclass(frozen=True)
class OverheadRow:
    concurrency: int
    requests: int
    errors: int
    tokens: int
    rate: float
    e2e_ms_median: float
    overhead_ms_median: float
    overhead_pct_median: float
    overhead_pct_p90: float
    own_ms_median: float | None  # e2e - server span: request out + last chunk in + parse
    own_pct_p90: float | None
    request_ms_median: float | None  # call → server has the request (includes the connect)
    tail_ms_median: float | None  # server wrote the last chunk → the call returned
    tpot_err_pct_median: float | None


@dataclass
class PeerResult:
    name: str
    command: list[str] | None = None
    rows: list[CeilingRow] = field(default_factory=list)
    reason: str | None = None  # why there are no rows
    log_path: str | None = None
    run_s: float | None = None  # the whole run, start-up included
    processes: list[int] = field(default_factory=list)  # worker processes per benchmark


# --- the fake server's process -------------------------------------------------------------


def start_server(
    rate: float, cpu: int | None, log_dir: Path, batch: int = 16
) -> tuple[EngineProcess, str]:
    port = free_port()
    argv = [sys.executable, str(BENCH / "fake_stream_server.py"), "--port", str(port)]
    argv += ["--tokens-per-s", str(rate), "--batch", str(batch)]
    argv += ["--cpu", str(cpu)] if cpu is not None else []
    url = f"http://127.0.0.1:{port}"
    proc = start_process(argv, {}, log_dir / f"fake-server-{port}.log")

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    wait_ready(proc, healthy, timeout_s=15.0, poll_s=0.05)
    return proc, url


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (Linux /proc), None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_this_process(cpu: int) -> None:
    """Pin every thread of this process (and so its future threads and children) to ``cpu``."""
    for task in Path("/proc/self/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def core_busy_s(cpu: int) -> float | None:
    """Seconds core ``cpu`` spent busy (any process) since boot, from /proc/stat."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, *ticks = line.split()
        if name == f"cpu{cpu}":
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, ticks[:8])
            return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return None


def _share(before: float | None, after: float | None, minus: float, wall: float) -> float | None:
    if before is None or after is None:
        return None
    return max(0.0, after - before - minus) / wall


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# --- the plugin's request path ---------------------------------------------------------------


def _request(tokens: int) -> RequestSpec:
    messages = [{"role": "user", "content": "Count."}]
    return RequestSpec(prompt_id="driver", messages=messages, text="Count.", max_tokens=tokens)


async def _one(client: httpx.AsyncClient, req: RequestSpec) -> tuple[RunRecord, dict[str, Any]]:
    """One request as the plugin makes it; a failure is recorded as an error, never a number."""
    rec = RunRecord(config="driver", prompt=req.prompt_id, run=0)
    final: dict[str, Any] = {}
    try:
        final = await stream_chat(client, req, rec)
    except RequestFailed as exc:
        rec.error = str(exc)
    finalize_timings(rec)
    if rec.ok and rec.output_tokens != req.max_tokens:
        rec.error = f"usage.completion_tokens {rec.output_tokens}, expected {req.max_tokens}"
    elif rec.ok and rec.text != TOKEN * req.max_tokens:
        want = len(TOKEN) * req.max_tokens
        rec.error = f"parsed {len(rec.text or '')} characters of text, expected {want}"
    return rec, final


@dataclass(frozen=True)
class Sample:
    """CPU counters read at one instant: this process, the server, the driver's core."""

    wall: float
    cpu: float
    server: float | None
    core: float | None

    @classmethod
    def now(cls, server_pid: int, core: int) -> Sample:
        return cls(time.perf_counter(), _cpu_s(), proc_cpu_s(server_pid), core_busy_s(core))


async def _closed_loop(
    url: str, concurrency: int, tokens: int, window_s: float, server_pid: int, core: int
) -> tuple[list[RunRecord], Sample, Sample]:
    req = _request(tokens)
    done: list[RunRecord] = []
    async with ClientSettings(read_timeout_s=60.0).build(url) as client:
        await asyncio.gather(*(_one(client, req) for _ in range(concurrency)))  # warm-up
        start = Sample.now(server_pid, core)
        deadline = start.wall + window_s

        async def stream() -> None:
            while time.perf_counter() < deadline:
                done.append((await _one(client, req))[0])

        await asyncio.gather(*(stream() for _ in range(concurrency)))
        return done, start, Sample.now(server_pid, core)


def measure_ceiling(
    loop: LoopThread, server: EngineProcess, url: str, concurrency: int, plan: Plan, core: int
) -> CeilingRow:
    args = (url, concurrency, plan.tokens, plan.window_s, server.pid, core)
    done, start, end = loop.run(_closed_loop(*args))
    wall, cpu = end.wall - start.wall, end.cpu - start.cpu
    ok = [r for r in done if r.ok]
    failed = [r for r in done if not r.ok]
    if failed:
        print(f"  c={concurrency}: {len(failed)} requests failed; first: {failed[0].error}")
    tokens = sum(r.output_tokens or 0 for r in ok)
    return CeilingRow(
        driver=DRIVER,
        concurrency=concurrency,
        tokens_per_s=tokens / wall if ok else None,
        requests_per_s=len(ok) / wall if ok else None,
        requests=len(ok),
        errors=len(failed),
        window_s=wall,
        driver_cpu=cpu / wall,
        server_cpu=_share(start.server, end.server, 0.0, wall),
        others_cpu=_share(start.core, end.core, cpu, wall),
        tokens_per_cpu_s=tokens / cpu if ok and cpu > 0 else None,
    )


Paced = tuple[RunRecord, dict[str, Any], int]


async def _paced(url: str, concurrency: int, tokens: int, requests: int) -> list[Paced]:
    req = _request(tokens)
    out: list[Paced] = []
    async with ClientSettings(read_timeout_s=60.0).build(url) as client:
        await asyncio.gather(*(_one(client, req) for _ in range(concurrency)))  # warm-up

        async def stream() -> None:
            for _ in range(-(-requests // concurrency)):
                before_ns = time.perf_counter_ns()
                rec, final = await _one(client, req)
                out.append((rec, final, before_ns))

        await asyncio.gather(*(stream() for _ in range(concurrency)))
    return out


def p90(values: Sequence[float]) -> float:
    """The 90th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[-(-9 * len(ordered) // 10) - 1]


def _lags_s(rec: RunRecord, final: dict[str, Any], before_ns: int) -> tuple[float, float] | None:
    """(request out: call → server has the request, tail: last chunk written → call returns)."""
    timing = final.get("server_timing")
    if rec.wall_s is None or not isinstance(timing, dict):
        return None
    if not {"recv_ns", "last_send_ns"} <= timing.keys():
        return None
    end_ns = before_ns + rec.wall_s * 1e9
    return (timing["recv_ns"] - before_ns) / 1e9, (end_ns - timing["last_send_ns"]) / 1e9


def measure_overhead(loop: LoopThread, url: str, concurrency: int, plan: Plan) -> OverheadRow:
    tokens, rate = plan.overhead_tokens, plan.rate
    out = loop.run(_paced(url, concurrency, tokens, plan.overhead_requests))
    ok = [(r, f, r.wall_s, b) for r, f, b in out if r.ok and r.wall_s]
    failed = [r for r, _, _ in out if not r.ok]
    if failed:
        print(f"  overhead c={concurrency}: {len(failed)} failed; first: {failed[0].error}")
    if not ok:
        raise RequestFailed(f"overhead at c={concurrency}: every request failed")
    ideal_s, gap_s = tokens / rate, 1.0 / rate
    e2e = [w for _, _, w, _ in ok]
    lags = [(lag, w) for r, f, w, b in ok if (lag := _lags_s(r, f, b)) is not None]
    own = [sum(lag) for lag, _ in lags]
    tpot = [(r.tpot_s - gap_s) / gap_s * 100 for r, _, _, _ in ok if r.tpot_s is not None]
    over = [(w - ideal_s) / w * 100 for w in e2e]
    return OverheadRow(
        concurrency=concurrency,
        requests=len(ok),
        errors=len(failed),
        tokens=tokens,
        rate=rate,
        e2e_ms_median=statistics.median(e2e) * 1e3,
        overhead_ms_median=(statistics.median(e2e) - ideal_s) * 1e3,
        overhead_pct_median=statistics.median(over),
        overhead_pct_p90=p90(over),
        own_ms_median=statistics.median(own) * 1e3 if own else None,
        own_pct_p90=p90([sum(lag) / w * 100 for lag, w in lags]) if lags else None,
        request_ms_median=statistics.median(lag[0] for lag, _ in lags) * 1e3 if lags else None,
        tail_ms_median=statistics.median(lag[1] for lag, _ in lags) * 1e3 if lags else None,
        tpot_err_pct_median=statistics.median(tpot) if tpot else None,
    )


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
            self.samples.append((time.time(), _group_cpu_s(self.pgid), busy))
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


def _group_cpu_s(pgid: int) -> float:
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
    return _peer_rows(result, json.loads(out.read_text(encoding="utf-8")), sampler)


def _peer_rows(result: PeerResult, report: dict[str, Any], sampler: GroupSampler) -> PeerResult:
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


# --- report ----------------------------------------------------------------------------------

COLUMNS = (
    ("driver", 16), ("conc", 5), ("stream tok/s", 13), ("req/s", 8), ("reqs", 6), ("err", 4),
    ("tok/cpu-s", 11), ("drv cpu", 8), ("srv cpu", 8), ("others", 7), ("vs peer", 8),
    ("per cpu", 8),
)  # fmt: skip


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "null" if value is None else format(value, spec)


def table_lines(rows: Sequence[CeilingRow], peer: PeerResult | None) -> list[str]:
    theirs = {r.concurrency: r for r in (peer.rows if peer else [])}
    lines = [_cells([name for name, _ in COLUMNS])]
    for row in [*rows, *(peer.rows if peer else [])]:
        other = theirs.get(row.concurrency) if row.driver == DRIVER else None
        cells = [
            row.driver, str(row.concurrency), _fmt(row.tokens_per_s),
            _fmt(row.requests_per_s, ",.1f"), str(row.requests), str(row.errors),
            _fmt(row.tokens_per_cpu_s), _fmt(row.driver_cpu, ".0%"),
            _fmt(row.server_cpu, ".0%") if row.driver == DRIVER else "-",
            _fmt(row.others_cpu, ".0%"),
            _ratio(row.tokens_per_s, other.tokens_per_s) if other else "",
            _ratio(row.tokens_per_cpu_s, other.tokens_per_cpu_s) if other else "",
        ]  # fmt: skip
        lines.append(_cells(cells))
    return lines


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if ours and theirs else "null"


def _cells(cells: Sequence[str]) -> str:
    widths = [w for _, w in COLUMNS]
    return cells[0].ljust(widths[0]) + "".join(
        c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)
    )


def overhead_line(o: OverheadRow) -> str:
    return (
        f"overhead at {o.rate:,.0f} tok/s x {o.tokens} tokens, c={o.concurrency}, "
        f"{o.requests} requests: e2e median {o.e2e_ms_median:.2f} ms (ideal "
        f"{o.tokens / o.rate * 1e3:.0f}); over ideal median {o.overhead_pct_median:.3f}% "
        f"({o.overhead_ms_median:.2f} ms), p90 {o.overhead_pct_p90:.3f}%; driver's own median "
        f"{_fmt(o.own_ms_median, '.3f')} ms (medians: request {_fmt(o.request_ms_median, '.3f')}"
        f", tail {_fmt(o.tail_ms_median, '.3f')}), p90 {_fmt(o.own_pct_p90, '.3f')}%; "
        f"TPOT error median {_fmt(o.tpot_err_pct_median, '+.3f')}%"
    )


def summary_lines(
    rows: Sequence[CeilingRow], over: Sequence[OverheadRow], peer: PeerResult | None
) -> list[str]:
    lines = [overhead_line(o) for o in over]
    ours = max((r.tokens_per_s or 0.0 for r in rows), default=0.0)
    theirs = max((r.tokens_per_s or 0.0 for r in (peer.rows if peer else [])), default=0.0)
    if peer and theirs:
        verdict = "met" if ours >= 2 * theirs else "MISSED"
        lines.append(
            f"ceiling {ours:,.0f} tok/s vs {peer.name} {theirs:,.0f} tok/s: "
            f"{ours / theirs:.2f}x (target >= 2x: {verdict})"
        )
        ours_cpu = max((r.tokens_per_cpu_s or 0.0 for r in rows), default=0.0)
        theirs_cpu = max((r.tokens_per_cpu_s or 0.0 for r in peer.rows), default=0.0)
        if ours_cpu and theirs_cpu:
            lines.append(
                f"per CPU-second of the driver: {ours_cpu:,.0f} vs {theirs_cpu:,.0f} tok: "
                f"{ours_cpu / theirs_cpu:.2f}x"
            )
        lines.append(
            f"{peer.name}: {peer.run_s or 0:.0f} s in all (start-up included); worker processes "
            f"per benchmark {peer.processes}"
        )
    else:
        lines.append(f"ceiling {ours:,.0f} tok/s; ratio to peer null ({_why(peer)})")
    for o in over:
        if o.concurrency == 1:
            verdict = "met" if o.overhead_pct_p90 < 1.0 else "MISSED"
            lines.append(
                f"overhead p90 {o.overhead_pct_p90:.3f}% at {o.rate:,.0f} tok/s "
                f"(target < 1%: {verdict})"
            )
    busy = max((r.others_cpu or 0.0 for r in rows), default=0.0)
    if busy > 0.1:
        lines.append(
            f"warning: other processes took up to {busy:.0%} of the driver's core; wall tok/s "
            "understates the one-core ceiling (tok/cpu-s does not)"
        )
    return lines


def _why(peer: PeerResult | None) -> str:
    if peer is None:
        return "peer not run"
    return peer.reason or "the peer completed no request"


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~20 s: 1 s windows, no peer")
    parser.add_argument("--no-peer", action="store_true", help="skip the peer driver")
    parser.add_argument(
        "--peer-venv",
        type=Path,
        default=Path("/tmp/peer-venv"),
        help="virtual environment with guidellm (default /tmp/peer-venv)",
    )
    parser.add_argument(
        "--install-peer", action="store_true", help=f"create --peer-venv with {PEER_PIN} first"
    )
    parser.add_argument(
        "--batch",
        type=positive_int,
        default=16,
        help="SSE events per socket write of the unpaced server (default 16; 1 = one a write)",
    )
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser.parse_args(argv)


def pick_cores() -> tuple[int, int | None]:
    """The driver's core and the server's (None where only one core is allowed)."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[0], cores[1] if len(cores) > 1 else None


def measure(
    plan: Plan, driver_cpu: int, server_cpu: int | None, work: Path, batch: int
) -> dict[str, Any]:
    unpaced, unpaced_url = start_server(0.0, server_cpu, work, batch)
    paced, paced_url = start_server(plan.rate, server_cpu, work)
    pin_this_process(driver_cpu)
    loop = LoopThread()
    try:
        rows = [
            measure_ceiling(loop, unpaced, unpaced_url, c, plan, driver_cpu)
            for c in plan.concurrencies
        ]
        over = [measure_overhead(loop, paced_url, c, plan) for c in plan.overhead_concurrencies]
    finally:
        loop.close()
        stop_process(paced)
    return {"rows": rows, "overhead": over, "server": unpaced, "url": unpaced_url}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    driver_cpu, server_cpu = pick_cores()
    if server_cpu is None:
        print("warning: one core allowed; the server shares the driver's core")
    run_peer = not args.no_peer and bool(plan.peer_concurrencies)
    if args.install_peer and run_peer:
        install_peer(args.peer_venv)
    work = Path(tempfile.mkdtemp(prefix="specdec-driver-"))
    started = time.perf_counter()
    try:
        got = measure(plan, driver_cpu, server_cpu, work, args.batch)
    except LaunchError as exc:
        print(f"error: the fake streaming server could not start: {exc}", file=sys.stderr)
        return 2
    except RequestFailed as exc:
        print(f"error: {exc} (server logs in {work})", file=sys.stderr)
        return 1
    peer = None
    try:
        if run_peer:
            peer = run_guidellm(args.peer_venv, got["url"], plan, work, driver_cpu, server_cpu)
    finally:
        stop_process(got["server"])
    rows, over = got["rows"], got["overhead"]
    lines = [*table_lines(rows, peer), "", *summary_lines(rows, over, peer)]
    if peer and peer.command:
        lines.append(f"peer command: {shlex.join(peer.command)}")
    command = shlex.join(["python", *sys.argv])
    lines.append(f"command: {command}")
    lines.append(
        f"cores: driver {driver_cpu}, server {server_cpu}; load average at the end "
        f"{os.getloadavg()[0]:.1f}; {time.perf_counter() - started:.0f} s; logs in {work}"
    )
    print("\n" + "\n".join(lines))
    if args.json:
        atomic_write_json(
            args.json,
            {"command": command, "host": host_fingerprint(), "plan": asdict(plan),
             "batch": args.batch, "cores": {"driver": driver_cpu, "server": server_cpu},
             "lines": lines,
             "ceiling": [asdict(r) for r in rows], "overhead": [asdict(o) for o in over],
             "peer": asdict(peer) if peer else None},
        )  # fmt: skip
    failed = any(r.errors for r in rows) or any(o.errors for o in over)
    return 1 if failed or (peer is not None and peer.reason) else 0


if __name__ == "__main__":
    sys.exit(main())
