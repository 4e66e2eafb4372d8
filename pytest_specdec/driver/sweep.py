"""The load step: one level of concurrent closed-loop clients against one server, measured in
rounds (see measure/levels.py), kept on the config's record (``extra.load``, one entry per
round; its requests in ``runs`` with phase ``load``). A step of :class:`Steps`, as the runner
is made of them.

Per round it reads the engine's counters around the round (accept length), polls its gauges of
running and queued requests while the round runs, and reads what its log said meanwhile (SGLang:
decode batches outside CUDA graphs), where the engine's adapter knows how; an adapter without
these hooks is measured all the same.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_specdec.core.results import RunRecord, finalize_timings
from pytest_specdec.driver.boot import Server
from pytest_specdec.driver.steps import Steps
from pytest_specdec.engines.base import fetch_metrics
from pytest_specdec.engines.launch import EngineProcess, group_members
from pytest_specdec.gpu.monitor import telemetry_dict
from pytest_specdec.gpu.telemetry import RunTelemetry
from pytest_specdec.measure.gauges import GaugeWatch, watch_gauges
from pytest_specdec.measure.host import host_facts, snapshot
from pytest_specdec.measure.levels import (
    LevelSummary,
    LoadLimits,
    RoundResult,
    rounds_of,
    run_round,
    summarize_level,
    summarize_round,
)
from pytest_specdec.measure.quiet import collector_held

GAUGE_EVERY_S = 0.5  # how often the engine's running/queued gauges are read during a round
Counted = dict[str, float | None] | None  # accept length and verify steps from counter deltas


class SweepSteps(Steps):
    """:class:`Steps` with the load levels."""

    def load_level(self, server: Server, clients: int) -> LevelSummary:
        """``clients`` closed-loop clients: a warm-up round at the level (kept, never judged),
        then ``--specdec-rounds`` rounds, each client covering the workload once per round.
        Rounds that GPU hygiene rules out are kept, marked, and rerun (boundedly), as measured
        runs are."""
        self.ready(server)
        server.record.extra["load_limits"] = self.load_limits(server).to_dict()
        seen: list[RunTelemetry] = []
        if self.settings.warmup:
            self._round(server, clients, 0, seen, warmup=True)
        budget = self.gpu_monitor.settings.policy.max_reruns if self.gpu_monitor else 0
        results: list[RoundResult] = []
        for n in range(1, self.settings.rounds + 1):
            results.append(self._round(server, clients, n, seen))
            if results[-1].errors and n < self.settings.rounds:
                _stopped_after(server, self.settings.rounds - n)
                break  # the level has failed: a hung engine would hold every round
        while budget > 0 and sum(1 for r in results if r.ok) < self.settings.rounds:
            if not any(r.invalid for r in results):
                break  # failed requests are errors, never rerun away
            results.append(self._round(server, clients, len(results) + 1, seen))
            budget -= 1
        self.write_results()
        return summarize_level(results)

    def load_limits(self, server: Server) -> LoadLimits:
        """What the engine's command line allows at once (nothing known for an attached server
        or an adapter without ``load_limits``)."""
        known = getattr(server.engine, "load_limits", None)
        if known is None or not server.record.command:
            return LoadLimits()
        return known(server.record.command)  # type: ignore[no-any-return]

    def level_rounds(self, server: Server, clients: int) -> list[RoundResult]:
        """The rounds of this server session at ``clients``, as recorded."""
        return rounds_of({"extra": server.record.extra}, clients, server.session)

    async def _load_request(
        self, server: Server, clients: int, round_no: int, client: int, index: int
    ) -> RunRecord:
        """One request of a round: a record the round keeps as a row (measure/levels.py)."""
        prompt = self.workload.prompts[index]
        rec = RunRecord(
            config=server.config.name, prompt=prompt.id, run=round_no, phase="load",
            session=server.session, extra={"clients": clients, "round": round_no, "client": client},
        )  # fmt: skip
        req = self.request_spec(prompt, server.model_name, round_no, server.texts)
        rec.max_tokens = req.max_tokens
        await self.send(server, req, rec)
        short = rec.error is None and (rec.output_tokens or 0) < req.max_tokens
        if short and req.ignore_eos:  # a round measures fixed-length requests
            rec.error = (
                f"decoded {rec.output_tokens or 0} of {req.max_tokens} tokens with ignore_eos "
                f"(finish_reason {rec.finish_reason}): the engine ended it early, e.g. at a "
                "full context; give each of its slots more context, or lower "
                "--specdec-max-tokens"
            )
        elif short:
            rec.extra["short"] = True  # ended at EOS: the level's note counts these
        return finalize_timings(rec)

    def _round(
        self, server: Server, clients: int, number: int, seen: list[RunTelemetry],
        warmup: bool = False,
    ) -> RoundResult:  # fmt: skip
        """One round (``warmup``: the level's first, whose batch sizes, kernels and caches run
        before any round is judged: on an H200 the first round at 4 clients ran 8-13% slower
        than the next ones in three configs of four)."""
        engine, client, n = server.engine, server.client, len(self.workload.prompts)
        gauges = getattr(engine, "load_gauges", None)

        async def send(who: int, index: int) -> RunRecord:
            return await self._load_request(server, clients, number, who, index)

        async def read_gauges() -> dict[str, float | None] | None:
            metrics = await fetch_metrics(client)
            return gauges(metrics) if metrics is not None and gauges is not None else None

        timed: dict[str, Any] = {}  # what the engine's counters said of the round

        async def measured() -> tuple[list[RunRecord], float, Counted, GaugeWatch]:
            before = await engine.spec_counters(client)
            watch, stop = GaugeWatch(), asyncio.Event()
            poll = asyncio.ensure_future(watch_gauges(read_gauges, watch, GAUGE_EVERY_S, stop))
            try:
                records, wall = await run_round(clients, n, send)
            finally:
                stop.set()
                await poll
            after = await engine.spec_counters(client) if before is not None else None
            if before is None or after is None:
                return records, wall, None, watch
            timed.update(counter_facts(engine, before, after))
            return records, wall, engine.accept_from_counters(before, after), watch

        with collector_held():
            offset = _log_size(server.record.log_path)
            pids = _engine_pids(server)
            host_before = snapshot(pids, client=os.getpid())
            with self._telemetry_window() as window:
                records, wall, counted, watch = self.loop.run(measured())
            host = host_facts(host_before, snapshot(pids, client=os.getpid()))
        facts = {**watch.facts(), **self._log_facts(server, offset), **timed}
        short = sum(1 for r in records if r.extra.get("short"))
        if short:  # requests that ended at EOS before max_tokens (no ignore_eos)
            facts["short_requests"] = short
        if host:  # the host's CPU over the round: steal, and the engine's processes
            facts["host"] = host
        if facts.get("max_queued") is None and facts.get("log_max_queued") is not None:
            facts["max_queued"] = facts["log_max_queued"]
        result = summarize_round(
            clients, number, server.session, records, wall, counted, facts, warmup
        )  # fmt: skip
        result = self._engine_exit(server, result)
        if not warmup:  # the warm-up's clocks are not the level's
            result = self._hygiene(result, window.telemetry, seen)
        server.record.extra.setdefault("load", []).append(result.to_dict())
        server.cost["load_s"] = (server.cost.get("load_s") or 0.0) + wall
        return result

    def _log_facts(self, server: Server, offset: int | None) -> dict[str, Any]:
        facts = getattr(server.engine, "log_facts", None)
        path = server.record.log_path
        if facts is None or offset is None or path is None:
            return {}
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return {}
        return dict(facts(text))

    def _engine_exit(self, server: Server, result: RoundResult) -> RoundResult:
        """A round whose requests failed because the engine died says so, with its log tail."""
        code = server.exit_code(result.errors) if result.errors else None
        if code is None:
            return result
        died = server.died(f"engine exited with code {code} during the round")
        return replace(result, errors=(died, *result.errors))

    def _hygiene(
        self, result: RoundResult, telemetry: RunTelemetry | None, seen: list[RunTelemetry]
    ) -> RoundResult:
        """The round's GPU telemetry, and why GPU hygiene rules it out (against the clocks of
        this level's rounds: under load the clock sits lower than at one request)."""
        if telemetry is None or self.gpu_monitor is None:
            return result
        seen.append(telemetry)
        invalid = tuple(self.gpu_monitor.invalid(telemetry, seen))
        return replace(result, gpu=telemetry_dict(telemetry, result.output_tokens), invalid=invalid)


def counter_facts(
    engine: Any, before: dict[str, float], after: dict[str, float]
) -> dict[str, dict[str, float]]:
    """What two reads of the engine's counters around a round say of it, where its adapter
    knows how: GPU seconds per forward phase (``phase_s``: SGLang's device timer) and forward
    passes by kind (``passes``); a part the adapter lacks, or that counted nothing, is left
    out."""
    out = {}
    for key, hook in (("phase_s", "phase_seconds"), ("passes", "forward_passes")):
        read = getattr(engine, hook, None)
        found = read(before, after) if read is not None else {}
        if found:
            out[key] = found
    return out


def _stopped_after(server: Server, left: int) -> None:
    """Say on the last recorded round that the level stopped there, ``left`` rounds unrun."""
    last = server.record.extra["load"][-1]
    last["errors"] = [*last["errors"], f"the level stopped here: its {left} later round(s) "
                      "were not run (a failed round fails the level)"]  # fmt: skip


def _engine_pids(server: Server) -> list[int]:
    """The live processes of an engine started here (its process group); none for an
    attached server or a container."""
    if not isinstance(server.process, EngineProcess):
        return []
    return group_members(server.process.pid)


def _log_size(path: str | None) -> int | None:
    if path is None:
        return None
    try:
        return Path(path).stat().st_size
    except OSError:
        return None
