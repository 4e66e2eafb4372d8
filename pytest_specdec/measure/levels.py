"""Load levels: closed-loop clients against one server, measured in rounds.

A *level* is a number of concurrent clients. Each client is a closed loop: it sends its next
request when its last one ends. One *round* at a level: every client covers the whole workload
once, each starting at another prompt (client k begins at prompt k mod P), so that the batch
mixes the prompts; with a fixed output length (``ignore_eos``) every client then does the same
work. A level is measured in several rounds, so that its throughput has a confidence interval.

Per round: aggregate output tok/s (all output tokens over the round's wall time), per-request
TTFT and TPOT percentiles, decode tok/s (1 / TPOT) at the median and the slow 99th percentile,
accept length from the engine's counter deltas around the round (per request deltas mean nothing
while requests overlap), and what the engine's gauges said about running and queued requests.
A round in which any request failed has no throughput: its errors are kept, never a number.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scipy import stats as sps

from pytest_specdec.core.results import RunRecord

Send = Callable[[int, int], Awaitable[RunRecord]]  # (client, prompt index) -> record
PROTOCOL = "closed-loop, each client covers the workload once per round"
# Each request of a round, one row of these (thousands of requests a level: the round keeps
# them as rows, not as run records).
ROW_FIELDS = (
    "client", "prompt", "output_tokens", "ttft_s", "tpot_s", "wall_s", "accept_length", "error",
)  # fmt: skip


def request_row(rec: RunRecord) -> list[Any]:
    """One request of a round as a row of ``ROW_FIELDS``."""
    return [rec.extra.get("client"), rec.prompt, rec.output_tokens, rec.ttft_s, rec.tpot_s,
            rec.wall_s, rec.accept_length, rec.error]  # fmt: skip


def percentiles(
    values: Sequence[float], points: Sequence[int] = (50, 99)
) -> dict[str, float | None]:
    """``{"p50": …, "p99": …}`` (inclusive method); None for an empty list."""
    if not values:
        return {f"p{p}": None for p in points}
    if len(values) == 1:
        return {f"p{p}": float(values[0]) for p in points}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {f"p{p}": q[p - 1] for p in points}


def client_order(client: int, prompts: int) -> list[int]:
    """The prompt indices client ``client`` sends in one round: all of them, from its own."""
    start = client % prompts
    return [(start + i) % prompts for i in range(prompts)]


async def run_round(clients: int, prompts: int, send: Send) -> tuple[list[RunRecord], float]:
    """One round: ``clients`` closed loops, each over every prompt once; returns the records
    (in client, then send order) and the round's wall time in seconds.

    A client whose request failed sends no more in the round: the round has no throughput
    once one request failed, and an engine that hangs would otherwise hold every client for
    a timeout per prompt. Should ``send`` raise, the other clients are cancelled before the
    error goes on, so none keeps loading the engine after the round."""
    if clients < 1 or prompts < 1:
        raise ValueError(f"a round needs clients >= 1 and prompts >= 1, got {clients}, {prompts}")

    async def loop(client: int) -> list[RunRecord]:
        sent = []
        for index in client_order(client, prompts):
            sent.append(await send(client, index))
            if sent[-1].error is not None:
                break
        return sent

    start = time.perf_counter_ns()
    tasks = [asyncio.ensure_future(loop(c)) for c in range(clients)]
    try:
        done = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    wall = (time.perf_counter_ns() - start) / 1e9
    return [rec for records in done for rec in records], wall


@dataclass(frozen=True)
class RoundResult:
    """One round of one level in one server session."""

    clients: int
    round: int
    session: int
    requests: int
    failed: int
    wall_s: float
    output_tokens: int
    output_tok_per_s: float | None  # aggregate; None when a request failed
    ttft_s: Mapping[str, float | None]
    tpot_s: Mapping[str, float | None]
    decode_tok_per_s: Mapping[str, float | None]  # 1 / TPOT at its p50 and (slow) p99
    accept_length: float | None
    verify_steps: float | None
    accept_source: str | None
    engine: Mapping[str, Any] = field(default_factory=dict)  # gauges, log facts
    errors: tuple[str, ...] = ()
    gpu: Mapping[str, Any] | None = None  # the round's GPU telemetry
    invalid: tuple[str, ...] = ()  # GPU hygiene reasons: kept, never averaged in
    warmup: bool = False  # the level's warm-up round: kept, never judged
    rows: tuple[tuple[Any, ...], ...] = ()  # one row of ROW_FIELDS per request

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["errors"] = list(self.errors)
        out["invalid"] = list(self.invalid) or None
        out["rows"] = [list(row) for row in self.rows]
        out["row_fields"] = list(ROW_FIELDS)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundResult:
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        values["errors"] = tuple(values.get("errors") or ())
        values["invalid"] = tuple(values.get("invalid") or ())
        values["rows"] = tuple(tuple(row) for row in values.get("rows") or ())
        return cls(**values)

    @property
    def ok(self) -> bool:
        """Measured cleanly: every request succeeded and GPU hygiene kept the round."""
        return self.output_tok_per_s is not None and not self.invalid


def summarize_round(
    clients: int, round_no: int, session: int, records: Sequence[RunRecord], wall_s: float,
    counted: Mapping[str, float | None] | None = None, engine: Mapping[str, Any] | None = None,
    warmup: bool = False,
) -> RoundResult:  # fmt: skip
    """A round's summary. ``counted``: accept length and verify steps from the engine's counter
    deltas around the round; without them, from the requests' own (tokens over verify steps)."""
    ok = [r for r in records if r.ok and r.output_tokens]
    failed = len(records) - len(ok)
    tokens = sum(r.output_tokens or 0 for r in ok)
    tpots = [r.tpot_s for r in ok if r.tpot_s]
    tpot = percentiles(tpots)
    accept, steps, source = _round_accept(ok, counted or {})
    return RoundResult(
        clients=clients, round=round_no, session=session, requests=len(records), failed=failed,
        wall_s=wall_s, output_tokens=tokens,
        output_tok_per_s=tokens / wall_s if ok and not failed and wall_s > 0 else None,
        ttft_s=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]), tpot_s=tpot,
        decode_tok_per_s={k: (1.0 / v if v else None) for k, v in tpot.items()},
        accept_length=accept, verify_steps=steps, accept_source=source,
        engine=dict(engine or {}),
        errors=tuple(f"client {r.extra.get('client')} {r.prompt}: {r.error}" for r in records
                     if r.error),
        warmup=warmup, rows=tuple(tuple(request_row(r)) for r in records),
    )  # fmt: skip


def _round_accept(
    ok: Sequence[RunRecord], counted: Mapping[str, float | None]
) -> tuple[float | None, float | None, str | None]:
    accept, steps = counted.get("accept_length"), counted.get("verify_steps")
    if accept is not None:
        return accept, steps, "metrics-delta"
    verified = [r for r in ok if r.verify_steps]
    if verified and len(verified) == len(ok):
        total = sum(r.verify_steps or 0 for r in verified)
        return sum(r.output_tokens or 0 for r in verified) / total, float(total), "requests"
    return None, None, None


@dataclass(frozen=True)
class LevelSummary:
    """A level of one config over its measured rounds (every server session)."""

    clients: int
    rounds: int
    failed_rounds: int
    output_tok_per_s: float | None  # geometric mean over the rounds
    ci_half: float | None  # 95% t half-width, as a fraction of the geometric mean
    decode_tok_per_s: Mapping[str, float | None]  # p50 and (slow) p99 over every request
    ttft_s: Mapping[str, float | None]  # p50 and p99 over every request of the good rounds
    accept_length: float | None
    wall_s: float
    max_running: float | None
    max_queued: float | None
    outside_graphs: int  # decode log lines that ran outside CUDA graphs (SGLang)
    prefill_batches: int = 0  # prefill batches the engine's log listed (SGLang)
    prefill_outside_graphs: int = 0  # of which ran outside CUDA graphs
    prefill_outside_max_tokens: int | None = None  # the most new tokens of one of those
    engine_gc_pauses: int = 0  # long garbage collections the engine's log listed (SGLang)
    engine_gc_max_s: float | None = None  # the longest of them

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize_level(rounds: Sequence[RoundResult]) -> LevelSummary:
    """``rounds`` of one level (failed rounds counted, never averaged in)."""
    if not rounds:
        raise ValueError("summarize_level: no rounds")
    good = [r for r in rounds if r.ok]
    logs = [math.log(r.output_tok_per_s) for r in good if r.output_tok_per_s]
    geo = math.exp(statistics.fmean(logs)) if logs else None
    half = None
    if len(logs) >= 2:
        t = float(sps.t.ppf(0.975, len(logs) - 1))
        half = math.expm1(t * statistics.stdev(logs) / math.sqrt(len(logs)))

    def most(key: str) -> float | None:
        values = [float(v) for r in rounds if (v := r.engine.get(key)) is not None]
        return max(values) if values else None

    accepts = [r.accept_length for r in good if r.accept_length is not None]
    ttft, decode = _pooled(good) or (
        _medians([r.ttft_s for r in good]),
        _medians([r.decode_tok_per_s for r in good]),
    )
    return LevelSummary(
        clients=rounds[0].clients, rounds=len(good), failed_rounds=len(rounds) - len(good),
        output_tok_per_s=geo, ci_half=half, decode_tok_per_s=decode, ttft_s=ttft,
        accept_length=statistics.fmean(accepts) if accepts else None,
        wall_s=sum(r.wall_s for r in rounds),
        max_running=most("max_running"), max_queued=most("max_queued"),
        outside_graphs=_total(rounds, "outside_graphs"),
        prefill_batches=_total(rounds, "prefill_batches"),
        prefill_outside_graphs=_total(rounds, "prefill_outside_graphs"),
        prefill_outside_max_tokens=None if (m := most("prefill_outside_max_tokens")) is None
        else int(m),
        engine_gc_pauses=_total(rounds, "engine_gc_pauses"),
        engine_gc_max_s=most("engine_gc_max_s"),
    )  # fmt: skip


def _total(rounds: Sequence[RoundResult], key: str) -> int:
    """An engine count summed over rounds (rounds without it count 0)."""
    return int(sum(float(r.engine.get(key) or 0) for r in rounds))


def _pooled(
    good: Sequence[RoundResult],
) -> tuple[dict[str, float | None], dict[str, float | None]] | None:
    """TTFT and decode tok/s (1 / TPOT) percentiles over every request of the ``good`` rounds
    together, so that a stall in one round shows in the level's p99; None where a round keeps
    no rows (results written before rounds kept them)."""
    if not good or any(not r.rows for r in good):
        return None
    rows = [row for r in good for row in r.rows]
    at_ttft, at_tpot = ROW_FIELDS.index("ttft_s"), ROW_FIELDS.index("tpot_s")
    ttft = percentiles([float(row[at_ttft]) for row in rows if row[at_ttft] is not None])
    tpot = percentiles([float(row[at_tpot]) for row in rows if row[at_tpot]])
    return ttft, {k: (1.0 / v if v else None) for k, v in tpot.items()}


def _medians(cells: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per percentile (p50, p99), the median over the rounds that have it (results whose
    rounds keep no rows)."""
    out: dict[str, float | None] = {}
    for key in ("p50", "p99"):
        values = [v for c in cells if (v := c.get(key)) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def rounds_of(
    config: Mapping[str, Any], clients: int | None = None, session: int | None = None,
    warmups: bool = False,
) -> list[RoundResult]:  # fmt: skip
    """The measured rounds a config record keeps (``extra.load``), of one level and session
    where given, in order (the levels' warm-up rounds too with ``warmups``)."""
    out = []
    for entry in (config.get("extra") or {}).get("load") or []:
        if entry.get("warmup") and not warmups:
            continue
        if clients is not None and entry.get("clients") != clients:
            continue
        if session is not None and entry.get("session", 1) != session:
            continue
        out.append(RoundResult.from_dict(entry))
    return out


def phase_means(rounds: Sequence[RoundResult]) -> dict[str, float]:
    """Mean GPU seconds per round by forward phase (the engine's device timer,
    ``engine.phase_s``), over the rounds that succeeded and timed them."""
    timed: list[Mapping[str, Any]] = [p for r in rounds if r.ok and (p := r.engine.get("phase_s"))]
    keys = sorted({k for t in timed for k in t})
    return {k: sum(float(t.get(k, 0.0)) for t in timed) / len(timed) for k in keys}


def client_cpu_s(rounds: Sequence[RoundResult]) -> float | None:
    """The load client's CPU seconds per measured round (its threads' run time over the round,
    ``engine.host.client``), None where not read. A round's requests and streamed tokens are
    the same in every run of a config at a level, so a change in these seconds between runs is
    the host's pace (its clock, or what shares its cores), not work the engine did."""
    spent = [float(c["cpus"]) * r.wall_s for r in rounds
             if r.ok and not r.warmup and (c := (r.engine.get("host") or {}).get("client"))
             and c.get("cpus") is not None]  # fmt: skip
    return sum(spent) / len(spent) if spent else None


def decode_passes(r: RoundResult) -> float | None:
    """The engine's decode passes in a round (SGLang's counter, ``engine.passes``: a verify
    step each when speculating), None where not counted."""
    passes = r.engine.get("passes") or {}
    decode = sum(float(v) for k, v in passes.items() if str(k).startswith("decode"))
    return decode or None


def no_forward_s(rounds: Sequence[RoundResult]) -> tuple[float, float] | None:
    """Seconds per round in which the GPU ran no forward, and their share of the round: a
    round's wall time less the GPU seconds of every phase (the engine's device timer), over
    the measured rounds that timed them (None: none did). The host's part of a round: its
    scheduling between forwards, the prefill's bookkeeping, the streams written. None too
    where a round's GPU seconds exceed its wall time (by more than 1%): then the timer's
    seconds are not the GPU's alone, and cannot be set against the wall."""
    timed = [r for r in rounds if r.ok and not r.warmup and r.engine.get("phase_s")]
    if not timed:
        return None
    idle = [r.wall_s - sum(float(v) for v in r.engine["phase_s"].values()) for r in timed]
    if any(i < -0.01 * r.wall_s for i, r in zip(idle, timed, strict=True)):
        return None
    wall = sum(r.wall_s for r in timed)
    return sum(idle) / len(idle), (sum(idle) / wall if wall > 0 else 0.0)


def gauge_read_summary(rounds: Sequence[RoundResult]) -> str | None:
    """How long the engine took to answer the gauge reads of these rounds: how many, the
    longest, and their time as a share of the rounds' (None: no read timed)."""
    timed = [r for r in rounds if r.engine.get("gauge_reads")]
    if not timed:
        return None
    reads = sum(int(r.engine["gauge_reads"]) for r in timed)
    longest = max(float(r.engine.get("gauge_read_max_s") or 0.0) for r in timed)
    spent = sum(float(r.engine.get("gauge_read_s") or 0.0) for r in timed)
    wall = sum(r.wall_s for r in timed)
    share = f", {spent / wall:.1%} of the rounds' time" if wall > 0 else ""
    return f"{reads} metrics reads during the rounds, the longest {longest * 1000:.0f} ms{share}"


def levels_of(config: Mapping[str, Any]) -> list[int]:
    """The levels (client counts) a config record measured, ascending."""
    return sorted({int(e["clients"]) for e in (config.get("extra") or {}).get("load") or []})


@dataclass(frozen=True)
class LoadLimits:
    """What an engine's command line lets it do at once: the requests it runs together
    (``slots``) and the largest batch it runs in CUDA graphs (``graph_max_batch``, 0: graphs
    off). None where the command line does not say (the engine's default applies)."""

    slots: int | None = None
    slots_flag: str | None = None
    graph_max_batch: int | None = None
    graph_flag: str | None = None
    prefill_graphs_off: str | None = None  # the flag that turned prefill CUDA graphs off

    def notes(self, clients: int) -> list[str]:
        """What a level of ``clients`` meets, by the command line."""
        out = []
        if self.slots is not None and clients > self.slots:
            out.append(
                f"queued by its settings: {clients} clients, {self.slots} requests at once "
                f"({self.slots_flag} {self.slots})"
            )
        if self.graph_max_batch == 0:
            out.append(f"outside CUDA graphs: they are off ({self.graph_flag})")
        elif self.graph_max_batch is not None and clients > self.graph_max_batch:
            out.append(
                f"outside CUDA graphs above batch {self.graph_max_batch} "
                f"({self.graph_flag} {self.graph_max_batch})"
            )
        if self.prefill_graphs_off is not None:
            out.append(f"prefill outside CUDA graphs: they are off ({self.prefill_graphs_off})")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def observed_notes(level: LevelSummary) -> list[str]:
    """What the engine itself reported during a level's rounds: queued requests (its gauge or
    log), decode steps and prefill batches outside CUDA graphs (its log)."""
    out = []
    if level.max_queued:
        out.append(f"queued: up to {level.max_queued:.0f} requests waited (engine's own count)")
    if level.outside_graphs:
        out.append(f"outside CUDA graphs: {level.outside_graphs} decode log lines said so")
    if level.prefill_outside_graphs:
        most = level.prefill_outside_max_tokens
        size = "" if most is None else f", of {most} new token{'s' if most != 1 else ''} at most"
        out.append(
            f"prefill outside CUDA graphs: {level.prefill_outside_graphs} of "
            f"{level.prefill_batches} prefill batches{size} (the engine's log)"
        )
    return out


def gc_note(level: LevelSummary) -> str | None:
    """The engine's long garbage collections during a level's rounds (its log), if any."""
    if not level.engine_gc_pauses:
        return None
    longest = "" if level.engine_gc_max_s is None else (
        f", the longest {level.engine_gc_max_s * 1000:.0f} ms")  # fmt: skip
    plural = "s" if level.engine_gc_pauses != 1 else ""
    return (
        f"engine paused to collect garbage: {level.engine_gc_pauses} long collection{plural}"
        f"{longest} (the engine's log)"
    )
