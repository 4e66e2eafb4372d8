"""Booting a plan (plan.py): the server a config is measured on, started here (a subprocess or
a container) or attached to (``--specdec-server-url``), ready when its real readiness endpoint
says so.

A boot that fails raises :class:`LaunchError` with the engine's log tail and, for engines with
a flag linter, what the installed engine does not accept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from pytest_specdec.core.configs import ConfigError, Registry, SpecConfig
from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.driver.plan import BootPlan
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.engines import Engine
from pytest_specdec.engines.base import LaunchSpec, redact
from pytest_specdec.engines.launch import (
    LaunchError,
    ServerProcess,
    exit_seen,
    free_port,
    start_process,
    wait_ready,
)
from pytest_specdec.engines.lint import LintUnavailable
from pytest_specdec.gpu.monitor import GpuMonitor
from pytest_specdec.gpu.telemetry import RunTelemetry
from pytest_specdec.measure.client import ClientSettings, LoopThread, connection_lost

PORT_RETRIES = 3
PROBE_S = 5.0  # one readiness probe at most
SETTLE_S = 0.5  # an engine that failed to bind exits within this; then its port is not ours
EXIT_SEEN_S = 1.0  # an engine whose socket is gone has exited within this, if it is exiting
# The engine's executable inside its image (the first argv element is replaced by it).
DOCKER_BINARIES = {"llamacpp": "llama-server", "sglang": "python3", "vllm": "vllm"}


@dataclass
class Server:
    """A server measured for one config: booted here, or external (``process`` is None)."""

    config: SpecConfig
    engine: Engine
    base_url: str
    client: httpx.AsyncClient
    record: ConfigRecord
    model_name: str | None = None
    process: ServerProcess | None = None
    warmed: bool = False
    gc_frozen: bool = False  # the engine's garbage collector frozen (engine settings freeze_gc)
    setup_error: str | None = None  # why it could not be made ready (a refused freeze_gc)
    session: int = 1
    telemetry: list[RunTelemetry] = field(default_factory=list)
    # What this server session held the machine for, in seconds, by part (docs/statistics.md,
    # "GPU time per verdict"); ``record.extra["cost"]`` lists it per session.
    cost: dict[str, float | None] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    secrets: tuple[str, ...] = ()  # values never to show (the API key), in its log tail too
    flushed: set[str] = field(default_factory=set)  # prompts whose caches were reset (flush)
    texts: dict[str, str] | None = None  # prompt id -> the text sent, where the harness renders

    def exit_code(self, errors: Iterable[str]) -> int | None:
        """The engine's exit code after requests failed with ``errors``, None while it runs (or
        is not ours). Where the socket was lost, its exit is waited for a moment (EXIT_SEEN_S)."""
        if self.process is None:
            return None
        lost = any(connection_lost(e) for e in errors)
        return exit_seen(self.process, EXIT_SEEN_S) if lost else self.process.exited()

    def died(self, what: str) -> str:
        """``what`` with the engine's log tail, secrets hidden (SGLang logs its API key)."""
        assert self.process is not None
        return redact(str(self.process.failure(what)), self.secrets)


def resolve_configs(
    names: Iterable[str], engine: str, registry: Registry, external: bool,
    any_engine: bool = False,
) -> list[SpecConfig]:  # fmt: skip
    """Registry lookup; with an external server any name is accepted as a label. With
    ``any_engine`` (no --specdec-engine given), a name only one engine has resolves there."""
    out: list[SpecConfig] = []
    names = list(names)
    for name in names:
        try:
            lookup = engine if engine != "openai" else "llamacpp"
            out.append(registry.resolve(name, lookup, any_engine and not external))
        except ConfigError:
            if not external:
                raise
            out.append(SpecConfig(name=name, engine=engine, source="label (external server)"))
    _check_distinct(names, out)
    return out


def _check_distinct(names: list[str], configs: list[SpecConfig]) -> None:
    """A run keys its records and verdicts by config name: one config given twice (two
    spellings of it), or two engines' configs of one name, would be measured into one record
    and judged twice."""
    seen: dict[str, tuple[str, SpecConfig]] = {}
    for name, cfg in zip(names, configs, strict=True):
        if cfg.name not in seen:
            seen[cfg.name] = (name, cfg)
            continue
        first, other = seen[cfg.name]
        if other.engine == cfg.engine:
            raise ConfigError(
                f"--spec-config names {cfg.qualified_name} twice ({first!r} and {name!r}): "
                "name each config once"
            )
        raise ConfigError(
            f"--spec-config names two configs called {cfg.name} ({other.qualified_name} and "
            f"{cfg.qualified_name}): a run keys its results by config name; run each engine's "
            "in a run of its own"
        )


class Booter:
    """Starts, attaches to and closes the servers of one run, each from its plan."""

    def __init__(
        self,
        settings: RunSettings,
        loop: LoopThread,
        gpu: GpuMonitor | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.gpu = gpu
        self.transport = transport

    def client(self, base_url: str) -> httpx.AsyncClient:
        settings = ClientSettings(
            read_timeout_s=self.settings.request_timeout_s, api_key=self.settings.api_key
        )
        return settings.build(base_url, self.transport)

    def attach(self, plan: BootPlan, record: ConfigRecord) -> Server:
        """The external server of ``--specdec-server-url``, once it answers ready."""
        engine, url = plan.engine, plan.base_url
        server = Server(plan.config, engine, url, self.client(url), record)
        deadline, probe = time.monotonic() + plan.startup_timeout_s, self.probe(server)
        while not probe():  # each probe bounded: a hung server must not outlast the timeout
            if time.monotonic() > deadline:
                path = engine.readiness_path
                raise LaunchError(
                    f"external server {url} not ready after {plan.startup_timeout_s:.0f} s ({path})"
                )
            time.sleep(0.5)
        plan.write(record)
        if self.settings.model is None:  # no --specdec-model: the model the server names
            served = self.loop.run(served_model(server.client), timeout=PROBE_S + 1)
            if served is not None:
                record.models = {**record.models, "target": {"id": served, "served": True}}
        return server

    def launch(self, plan: BootPlan, record: ConfigRecord, started: float) -> Server:
        """Start ``plan`` and wait until it is ready (a clash on its port: on another port, up
        to PORT_RETRIES times); its boot time, cost and address go on ``record``. ``started``:
        when the boot began (its plan included), for the session's cost."""
        cost: dict[str, float | None] = {"cooldown_s": None, "lint_s": plan.lint_s}
        if self.gpu is not None:
            mark = time.perf_counter()
            waited = self.gpu.before_config()
            if waited is not None:
                record.extra.setdefault("cooldown", []).append(waited)
                cost["cooldown_s"] = time.perf_counter() - mark
        for attempt in range(PORT_RETRIES):
            if attempt:
                port = free_port(self.settings.host, getattr(plan.engine, "port_offsets", ()))
                plan = plan.at_port(port, self.settings.log_dir)
            plan.write(record)
            assert plan.spec is not None and plan.log_path is not None
            server = Server(plan.config, plan.engine, plan.base_url, self.client(plan.base_url),
                            record, plan.target, secrets=plan.spec.secrets)  # fmt: skip
            try:
                server.process = self.start(plan)
                record.boot_s = wait_ready(
                    server.process, self.probe(server), plan.startup_timeout_s
                )
                code = exit_seen(server.process, SETTLE_S)
                if code is not None:  # something else answered on the port: never measure it
                    failed = server.process.failure(
                        f"engine exited with code {code} although port {plan.port} answered: "
                        "another server holds that port"
                    )
                    server.process.stop(0)
                    raise failed
            except LaunchError as exc:
                self.close_client(server)
                if attempt + 1 < PORT_RETRIES and port_clash(str(exc)):
                    continue
                hint = lint_hint(plan.engine, plan.spec)
                raise LaunchError(redact(str(exc) + hint, plan.spec.secrets)) from None
            record.server_url = plan.base_url
            server.started, server.cost = started, {**cost, "start_s": record.boot_s}
            record.extra.setdefault("cost", []).append(server.cost)
            return server
        raise AssertionError("unreachable")  # pragma: no cover

    def start(self, plan: BootPlan) -> ServerProcess:
        """A subprocess, or with --specdec-launcher docker a container of the engine image."""
        spec, cfg, log_path = plan.spec, plan.config, plan.log_path
        assert spec is not None and log_path is not None and plan.port is not None
        docker = self.settings.docker
        if docker is None:
            return start_process(spec.argv, spec.env, log_path, self.settings.cpus)
        from pytest_specdec.engines.container import start_container

        binary = self.settings.docker_binary or DOCKER_BINARIES.get(cfg.engine, spec.argv[0])
        volumes = {**model_volumes((plan.target, plan.draft)), **docker.volumes}
        settings = replace(docker, volumes=volumes)
        in_image = LaunchSpec([binary, *spec.argv[1:]], spec.env, spec.secrets)
        name = f"specdec-{os.getpid()}-{cfg.name}-{plan.port}"
        return start_container(in_image, settings, self.settings.host, plan.port, log_path, name)

    def probe(self, server: Server) -> Callable[[], bool]:
        """One readiness probe, bounded: a hung listener on the port must not stall the boot."""

        async def probe() -> bool:
            try:
                return await asyncio.wait_for(server.engine.is_ready(server.client), PROBE_S)
            except asyncio.TimeoutError:
                return False

        return lambda: self.loop.run(probe())

    def close_client(self, server: Server) -> None:
        with contextlib.suppress(Exception):  # closing must never mask the real error
            self.loop.run(server.client.aclose(), timeout=10)


async def served_model(client: httpx.AsyncClient) -> str | None:
    """The model an OpenAI-compatible server names first in ``/v1/models`` (llama-server,
    SGLang and vLLM do), so that an external server's baselines are kept per model; None
    where it names none or does not answer in time."""
    try:
        response = await asyncio.wait_for(client.get("/v1/models"), PROBE_S)
        data = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, asyncio.TimeoutError, ValueError, AttributeError):
        return None
    first = data[0] if isinstance(data, list) and data else None
    name = first.get("id") if isinstance(first, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def model_volumes(models: Sequence[str | None]) -> dict[str, str]:
    """The host folders a container mounts (at the same path) to see ``models``: a model
    file's folder, or a model folder itself (Hugging Face layout); hub ids mount nothing."""
    found = [Path(m) for m in models if m and Path(m).exists()]
    folders = {str(p if p.is_dir() else p.parent) for p in found}
    return {folder: folder for folder in folders}


def lint_hint(engine: Engine, spec: LaunchSpec) -> str:
    """The linter's findings as extra lines of a boot failure, or nothing."""
    try:
        findings = engine.lint(spec)
    except LintUnavailable:
        return ""
    return "".join(f"\nlint: {f}" for f in findings)


# What an engine says when its port is taken: llama-server's "couldn't bind HTTP server socket",
# uvicorn's (SGLang, vLLM) "[Errno 98] ... address already in use". Not any text with "bind"
# and "port" in it: SGLang logs its server_args (decoupled_spec_bind_endpoint, port=...) at
# every start, and an early crash read as a clash was booted three times.
PORT_TAKEN = ("address already in use", "couldn't bind", "errno 98", "eaddrinuse")


def port_clash(message: str) -> bool:
    text = message.lower()
    return any(sign in text for sign in PORT_TAKEN)
