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
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a plain checkout

from driver_peer import PEER_PIN, install_peer, run_guidellm  # noqa: E402
from driver_plan import (  # noqa: E402
    DRIVER,
    FULL,
    QUICK,
    TOKEN,
    CeilingRow,
    OverheadRow,
    Plan,
    core_busy_s,
    pin_this_process,
    proc_cpu_s,
)
from driver_report import summary_lines, table_lines  # noqa: E402

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


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~10 s: 1 s windows, no peer")
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
