"""The steps of a session: boot (see boot.py), warm up, one measured run, a prompt's runs,
stop, and the results document that records them.

Every run ends as a :class:`RunRecord`, with an ``error`` instead of numbers when the request
failed. Knows nothing of pytest.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx

from pytest_specdec import __version__
from pytest_specdec.core.configs import ConfigError, Registry, SpecConfig
from pytest_specdec.core.results import (
    ConfigRecord,
    RunRecord,
    finalize_timings,
    results_document,
    utc_now,
    write_results_file,
)
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.core.workloads import Prompt, Workload
from pytest_specdec.driver.boot import Booter, Server, resolve_configs
from pytest_specdec.driver.plan import Planner, PlanRefused, untried_note
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.engines import EngineNotInstalled
from pytest_specdec.engines.base import Rendering, RequestSpec
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.gpu.monitor import GpuMonitor, RunWindow, telemetry_dict
from pytest_specdec.measure.client import LoopThread, RequestFailed
from pytest_specdec.measure.lossless import GreedyOutput
from pytest_specdec.measure.quiet import collector_held
from pytest_specdec.measure.roofline import annotate
from pytest_specdec.verdict.judge import Judgement


class Steps:
    """The steps every session is made of, each small: boot or attach, warm up, one run,
    measure a prompt, stop, write the results document. :class:`runner.Runner` adds the
    steps built from these (concurrency sweep, lossless reference, verdicts)."""

    def __init__(
        self,
        settings: RunSettings,
        registry: Registry,
        suite: SuiteSettings,
        workload: Workload,
        transport: httpx.AsyncBaseTransport | None = None,
        gpu: GpuMonitor | None = None,
        on_write: Callable[[dict[str, Any]], None] | None = None,
        configs: list[SpecConfig] | None = None,
    ) -> None:
        self.settings = settings
        self.gpu_monitor = gpu
        self.registry = registry
        self.suite = suite
        self.workload = workload
        self.configs = configs or resolve_configs(  # the pytest face resolved them already
            settings.config_names, settings.engine, registry, settings.server_url is not None
        )
        self.records: dict[str, ConfigRecord] = {}
        self.started_at = utc_now()
        self.loop = LoopThread()
        self.planner = Planner(settings, suite, gpu)
        self.booter = Booter(settings, self.loop, gpu, transport)
        self.gpu: Any = gpu.describe() if gpu is not None else None
        self.notes: list[str] = []
        if gpu is not None and not gpu.available:
            self.notes.append(f"no GPU telemetry: {gpu.reason}")
        self.verdicts: list[Judgement] = []
        self.drift: list[dict[str, Any]] = []
        self.references: dict[tuple[str, str], dict[str, GreedyOutput]] = {}
        self.renderings: dict[tuple[str, str], Rendering] = {}  # (engine, target) -> prompts
        self.reference_records: list[ConfigRecord] = []
        self.lossless_lines: list[str] = []  # outputs that differ from the reference
        self.on_write = on_write  # sees the results document before each write

    # --- boot (the booter starts or attaches; these keep the record) -------------------------

    def record_for(self, cfg: SpecConfig) -> ConfigRecord:
        """The config's record: one per config, holding the runs of all its sessions."""
        if cfg.name not in self.records:
            self.records[cfg.name] = ConfigRecord(cfg.name, cfg.engine, cfg.to_dict())
        return self.records[cfg.name]

    def boot(self, cfg: SpecConfig, session: int = 1) -> Server:
        """Server session ``session`` of ``cfg``, in order: its plan (what will be booted,
        decided once: plan.py), its record written from the plan, the boot (boot.py), and the
        engine's preparation once it is ready (the prompts as it is sent them). A config with
        alternative interfaces boots as the installed engine takes it (chosen at its first
        plan, kept on its record)."""
        started = time.perf_counter()
        try:
            plan = self.planner.plan(cfg)
        except PlanRefused as exc:
            plan_record = self.record_for(exc.plan.config)
            exc.plan.write(plan_record)
            self._failed(plan_record, exc, session)
            raise
        except (ConfigError, EngineNotInstalled) as exc:
            self._failed(self.record_for(cfg), exc, session)
            raise
        record = self.record_for(plan.config)
        try:
            if self.settings.server_url:
                server = self.booter.attach(plan, record)
            else:
                server = self.booter.launch(plan, record, started)
        except LaunchError as exc:  # the machine time it held counts against the budget
            spent = time.perf_counter() - started
            record.extra.setdefault("cost", []).append({"total_s": spent, "failed": True})
            untried = self.planner.untried(plan)
            if not untried:
                self._failed(record, exc, session)
                raise
            failure = LaunchError(untried_note(str(exc), untried))
            self._failed(record, failure, session)
            raise failure from exc
        server.session = session
        server.texts = self.prompt_texts(server)
        lint = record.extra.get("lint")
        for line in lint if isinstance(lint, list) else []:  # a config that measures badly
            note = f"{plan.config.name}: lint {line}"
            if line.startswith("warning: ") and note not in self.notes:
                self.notes.append(note)
        record.extra.setdefault("sessions", []).append(
            {"session": session, "server_url": server.base_url, "log_path": record.log_path,
             "boot_s": record.boot_s, "started_at": utc_now()}
        )  # fmt: skip
        return server

    def _failed(self, record: ConfigRecord, exc: Exception, session: int) -> None:
        record.error = str(exc) if session == 1 else f"session {session}: {exc}"
        self.write_results()

    def prompt_texts(self, server: Server) -> dict[str, str] | None:
        """The workload as the text ``server``'s engine is sent (rendered once per engine and
        target with the model's chat template), or None where the engine renders it itself;
        how, on the record (``extra.prompt_rendering``)."""
        key = (server.engine.name, server.model_name or "")
        if key not in self.renderings:
            prompts = self.workload.prompts
            conversations = [[m.to_dict() for m in p.messages] for p in prompts]
            try:
                self.renderings[key] = server.engine.render(key[1], conversations)
            except EngineNotInstalled as exc:
                server.record.error = str(exc)
                self.stop(server)
                raise
        rendering = self.renderings[key]
        server.record.extra["prompt_rendering"] = {"kind": rendering.kind, "how": rendering.how}
        if rendering.texts is None:
            return None
        return {p.id: t for p, t in zip(self.workload.prompts, rendering.texts, strict=True)}

    def stop(self, server: Server) -> None:
        self.booter.close_client(server)
        if server.process is not None:
            mark = time.perf_counter()
            code = server.process.stop()
            server.record.extra["exit_code"] = code
            settle_cost(server, time.perf_counter() - mark)
        self.write_results()

    # --- measure ----------------------------------------------------------------------------

    def request_spec(
        self, prompt: Prompt, model: str | None = None, run: int = 0,
        texts: dict[str, str] | None = None,
    ) -> RequestSpec:  # fmt: skip
        """Request ``run`` of ``prompt``, with the run's sampling settings (greedy by default;
        a fixed seed makes request i of a prompt reproducible from night to night). ``texts``:
        the prompts rendered with the model's chat template, for an engine sent text."""
        messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
        max_tokens = prompt.max_tokens or self.settings.max_tokens
        text = (texts or {}).get(prompt.id) or prompt.text()
        o = self.settings
        return RequestSpec(
            prompt.id, messages, text, max_tokens, model=model,
            temperature=o.temperature, top_p=o.top_p, seed=o.request_seed(run),
            ignore_eos=o.ignore_eos,
        )  # fmt: skip

    def greedy_spec(self, prompt: Prompt, model: str | None = None) -> RequestSpec:
        """The request the lossless check compares: greedy whatever the run samples with."""
        return replace(self.request_spec(prompt, model), temperature=0.0, top_p=None, seed=None)

    async def send(self, server: Server, req: RequestSpec, rec: RunRecord) -> RunRecord:
        """One request, bounded in time; any failure is recorded on ``rec``, never raised."""
        try:
            await asyncio.wait_for(
                server.engine.request(server.client, req, rec), self.settings.request_timeout_s
            )
        except RequestFailed as exc:
            rec.error = str(exc)
        except asyncio.TimeoutError:
            rec.error = f"request timed out after {self.settings.request_timeout_s:g} s"
        except Exception as exc:  # a response the adapter could not read, a dropped socket
            rec.error = f"{type(exc).__name__}: {exc}"
        return rec

    async def _one(
        self, server: Server, req: RequestSpec, rec: RunRecord, flush: bool = False
    ) -> RunRecord:
        engine, client = server.engine, server.client
        if flush:  # the config's flush: the engine's caches reset before this request
            try:
                await engine.flush(client)
            except RequestFailed as exc:
                rec.error = f"flush before the request failed: {exc}"
                return rec
            rec.extra["flushed"] = True
        before = await engine.spec_counters(client)
        await self.send(server, req, rec)
        if rec.error is None and before is not None:
            after = await engine.spec_counters(client)
            if after is not None:
                stats = engine.accept_from_counters(before, after)
                counted = stats.get("accept_length")
                if rec.accept_length is None and counted is not None:
                    rec.accept_length = counted
                    rec.accept_source = "metrics-delta"
                elif counted is not None:  # per request and from the counters: both kept
                    rec.extra["accept_length_metrics"] = counted
                if stats.get("verify_steps") is not None and rec.verify_steps is None:
                    rec.verify_steps = int(stats["verify_steps"] or 0)
                phases = getattr(engine, "phase_seconds", None)
                spent = phases(before, after) if phases is not None else {}
                if spent:  # GPU seconds per forward phase, where the engine times them
                    rec.extra["phase_s"] = spent
                per_pos = {k: v for k, v in stats.items() if k.startswith("accept_rate_pos")}
                if per_pos:
                    rec.extra["accept_rate_per_position"] = [
                        per_pos[k] for k in sorted(per_pos, key=lambda k: int(k[15:]))
                    ]
        return finalize_timings(rec)

    def run_once(self, server: Server, prompt: Prompt, run: int, phase: str) -> RunRecord:
        rec = RunRecord(
            config=server.config.name,
            prompt=prompt.id,
            run=run,
            phase=phase,
            session=server.session,
        )
        req = self.request_spec(prompt, server.model_name, run, server.texts)
        rec.max_tokens = req.max_tokens
        mode = server.config.flush
        flush = mode == "run" or (mode == "prompt" and prompt.id not in server.flushed)
        server.flushed.add(prompt.id)
        with collector_held(), self._telemetry_window() as window:
            try:
                self.loop.run(self._one(server, req, rec, flush))
            except Exception as exc:
                rec.error = rec.error or f"{type(exc).__name__}: {exc}"
        if rec.error is not None and (code := server.exit_code([rec.error])) is not None:
            # the engine died: say so, with its log tail, not just the socket
            rec.error = server.died(f"engine exited with code {code}: {rec.error}")
        if window.telemetry is not None:
            rec.gpu = telemetry_dict(window.telemetry, rec.output_tokens)
            if phase == "measure":
                server.telemetry.append(window.telemetry)
                rec.invalid = self.gpu_monitor.invalid(window.telemetry, server.telemetry) or None  # type: ignore[union-attr]
        server.record.runs.append(rec)
        return rec

    def _telemetry_window(self) -> contextlib.AbstractContextManager[RunWindow]:
        if self.gpu_monitor is None:
            return contextlib.nullcontext(RunWindow())
        return self.gpu_monitor.window()

    def warmup(self, server: Server) -> list[RunRecord]:
        """One full-length request per prompt before anything is measured."""
        start = time.perf_counter()
        out = [self.run_once(server, p, 0, "warmup") for p in self.workload.prompts]
        server.record.warmup_s = server.cost["warmup_s"] = time.perf_counter() - start
        server.warmed = True
        return out

    def ready(self, server: Server) -> None:
        """Before a server's first measured request: its warm-up (unless turned off), then the
        engine's garbage collector frozen where its settings ask (``freeze_gc``). A freeze that
        fails fails the config (LaunchError, on its record): what followed would be measured
        otherwise than the record says."""
        if self.settings.warmup and not server.warmed:
            self.warmup(server)
        if server.setup_error is not None:  # refused once: never measured, never asked again
            raise LaunchError(server.setup_error)
        if not server.engine.settings.freeze_gc or server.gc_frozen:
            return
        try:
            self.loop.run(server.engine.freeze_gc(server.client))  # type: ignore[attr-defined]
        except RequestFailed as exc:
            failed = LaunchError(
                f"{server.config.name}: the engine settings ask for freeze_gc = true, but {exc}; "
                f"drop freeze_gc from [engines.{server.config.engine}] to measure without it"
            )
            server.setup_error = str(failed)
            self._failed(server.record, failed, server.session)
            raise failed from exc
        server.gc_frozen = True
        when = "after the warm-up" if server.warmed else "once booted (no warm-up)"
        server.record.extra["engine_gc"] = f"frozen {when}"

    def measure(self, server: Server, prompt: Prompt) -> list[RunRecord]:
        self.ready(server)
        runs = [self.run_once(server, prompt, i, "measure") for i in range(self.settings.runs)]
        # Runs that GPU hygiene rules out (thermal or power-brake throttling, clock sag) are
        # kept in the record, marked invalid, never averaged in; each is rerun, boundedly.
        budget = self.gpu_monitor.settings.policy.max_reruns if self.gpu_monitor else 0
        index = len(runs)
        while (
            budget > 0 and any(r.invalid for r in runs) and self._valid(runs) < self.settings.runs
        ):
            runs.append(self.run_once(server, prompt, index, "measure"))
            index += 1
            budget -= 1
        self.write_results()
        return runs

    def _valid(self, runs: list[RunRecord]) -> int:
        return sum(1 for r in runs if r.ok and not r.invalid)

    # --- record -----------------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        """The results document, with each config's roofline share (see measure/roofline.py)."""
        doc = results_document(
            self.records.values(),
            started_at=self.started_at,
            options=self.settings.public(),
            workload={
                "name": self.workload.name,
                "source": self.workload.source,
                "sha256": self.workload.sha256,
                "prompts": [p.id for p in self.workload.prompts],
            },
            gpu=self.gpu,
            tool_version=__version__,
            host_fields=dict(self.settings.hardware_fields),
            extra={
                "verdicts": [j.to_dict() for j in self.verdicts],
                "drift": self.drift,
                "notes": self.notes,
                "references": [r.to_dict() for r in self.reference_records],
            },
        )
        return annotate(doc)

    def write_results(self, doc: dict[str, Any] | None = None) -> None:
        """Write the results file (atomically); ``doc``: the document, when the caller has
        just made it."""
        if self.settings.results_path is not None:
            doc = doc if doc is not None else self.document()
            if self.on_write is not None:
                self.on_write(doc)
            write_results_file(self.settings.results_path, doc)

    def close(self) -> None:
        self.write_results()
        self.loop.close()
        self.planner.close()
        if self.gpu_monitor is not None:
            self.gpu_monitor.close()


def settle_cost(server: Server, stop_s: float) -> None:
    """A stopped server session's cost: its whole span (from the cooldown before its boot to
    the end of its stop), the stop itself, the measured requests' own wall time, the load
    levels' (warm-ups and rounds, ``load_s``, counted as they ran), and the rest of the
    measuring (requests' set-up, counters, telemetry, lossless checks, writes)."""
    cost = server.cost
    total = time.perf_counter() - server.started
    generation = sum(
        r.wall_s or 0.0
        for r in server.record.runs
        if r.session == server.session and r.phase == "measure"
    )
    cost.update(stop_s=stop_s, total_s=total, generation_s=generation)
    parts = ("cooldown_s", "lint_s", "start_s", "warmup_s", "stop_s", "generation_s", "load_s")
    cost["other_s"] = total - sum(cost.get(k) or 0.0 for k in parts)
