"""Booting: the server a config is measured on, started here (a subprocess or a container)
or attached to (``--specdec-server-url``), ready when its real readiness endpoint says so.

A boot that fails raises :class:`LaunchError` or :class:`ConfigError` with the engine's log
tail and, for engines with a flag linter, what the installed engine does not accept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from pytest_specdec.core.configs import ConfigError, Registry, SpecConfig
from pytest_specdec.core.modelfile import model_identity
from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.core.suitefile import EngineSettings, SuiteSettings
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.engines import Engine, make_engine
from pytest_specdec.engines.base import BootContext, LaunchSpec, redact
from pytest_specdec.engines.cpus import describe
from pytest_specdec.engines.launch import (
    LaunchError,
    ServerProcess,
    free_port,
    start_process,
    wait_ready,
)
from pytest_specdec.engines.lint import LintUnavailable, errors
from pytest_specdec.gpu.monitor import GpuMonitor
from pytest_specdec.gpu.telemetry import RunTelemetry
from pytest_specdec.measure.client import ClientSettings, LoopThread

PORT_RETRIES = 3
PROBE_S = 5.0  # one readiness probe at most
SETTLE_S = 0.5  # an engine that failed to bind exits within this; then its port is not ours
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
    session: int = 1
    telemetry: list[RunTelemetry] = field(default_factory=list)
    # What this server session held the machine for, in seconds, by part (docs/statistics.md,
    # "GPU time per verdict"); ``record.extra["cost"]`` lists it per session.
    cost: dict[str, float | None] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    flushed: set[str] = field(default_factory=set)  # prompts whose caches were reset (flush)
    texts: dict[str, str] | None = None  # prompt id -> the text sent, where the harness renders


def resolve_configs(
    names: Iterable[str], engine: str, registry: Registry, external: bool,
    any_engine: bool = False,
) -> list[SpecConfig]:  # fmt: skip
    """Registry lookup; with an external server any name is accepted as a label. With
    ``any_engine`` (no --specdec-engine given), a name only one engine has resolves there."""
    out: list[SpecConfig] = []
    for name in names:
        try:
            lookup = engine if engine != "openai" else "llamacpp"
            out.append(registry.resolve(name, lookup, any_engine and not external))
        except ConfigError:
            if not external:
                raise
            out.append(SpecConfig(name=name, engine=engine, source="label (external server)"))
    return out


class Booter:
    """Starts, attaches to and closes the servers of one run."""

    def __init__(
        self,
        settings: RunSettings,
        suite: SuiteSettings,
        loop: LoopThread,
        gpu: GpuMonitor | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.suite = suite
        self.loop = loop
        self.gpu = gpu
        self.transport = transport
        self._secrets: Path | None = None
        # engine name -> (interface, its settings, what was tried): chosen once per engine
        self.engine_choice: dict[str, tuple[str, EngineSettings, dict[str, str]]] = {}

    def engine_for(self, cfg: SpecConfig) -> Engine:
        name = self.settings.engine if self.settings.server_url else cfg.engine
        settings = self.suite.engine_settings(cfg.engine)
        if settings.interfaces:
            settings = self.engine_interface(name, cfg, settings)
        return make_engine(name, settings)

    def engine_interface(
        self, name: str, cfg: SpecConfig, settings: EngineSettings
    ) -> EngineSettings:
        """Of a suite's engine settings with interfaces, the first whose extra_args the
        installed engine's own lint accepts (its own first), chosen once per engine; its own
        where none does (the boot's lint then names the flags) or where lint is off."""
        if name in self.engine_choice:
            return self.engine_choice[name][1]
        variants = dict(settings.variants())
        chosen = next(iter(variants))  # its own extra_args
        tried: dict[str, str] = {}
        if self.settings.lint and not self.settings.server_url:
            plain = SpecConfig(name="(engine arguments)", engine=name)
            try:
                target = self.models_for(replace(cfg, draft=None))[0]
            except ConfigError:  # the boot says so; the flags are checked all the same
                target = "model"
            ctx = BootContext(plain, target, None, self.settings.host, 0)
            taken, tried, unchecked = first_accepted(
                (label, make_engine(name, variant), ctx) for label, variant in variants.items()
            )
            if unchecked is not None:
                tried[unchecked[0]] = f"not checked: {unchecked[1]}"
            chosen = taken or chosen
        self.engine_choice[name] = (chosen, variants[chosen], tried)
        return variants[chosen]

    def models_for(self, cfg: SpecConfig) -> tuple[str, str | None]:
        """The target and draft model of ``cfg``: the run's settings, then the config, then
        the suite."""
        models = self.suite.models_for(cfg.engine)
        target = self.settings.model or cfg.model or models.target
        if not target:
            raise ConfigError(
                f"no target model for engine {cfg.engine}: set [models.{cfg.engine}] target in "
                f"{self.suite.path or 'suites/specdec.toml'} or pass --specdec-model PATH"
            )
        draft = None
        if cfg.draft:
            draft = (
                self.settings.draft_model
                or cfg.draft_model
                or models.draft_for(cfg.draft, cfg.engine)
            )
        for role, path in (("target", target), ("draft", draft)):
            if (
                path
                and (path.endswith(".gguf") or path.startswith(("/", ".")))
                and not Path(path).exists()
            ):
                raise ConfigError(
                    f"{role} model {path} does not exist; make it (./scripts/setup for the CPU "
                    "models, docs/gpu-run.md for the GPU ones) or fix the path"
                )
        return target, draft

    def client(self, base_url: str) -> httpx.AsyncClient:
        settings = ClientSettings(
            read_timeout_s=self.settings.request_timeout_s, api_key=self.settings.api_key
        )
        return settings.build(base_url, self.transport)

    def attach(self, cfg: SpecConfig, engine: Engine, record: ConfigRecord) -> Server:
        """The external server of ``--specdec-server-url``, once it answers ready."""
        url = str(self.settings.server_url).rstrip("/")
        server = Server(cfg, engine, url, self.client(url), record)
        record.server_url = url
        timeout = self.settings.startup_timeout_s or 30.0
        deadline = time.monotonic() + timeout
        while not self.loop.run(engine.is_ready(server.client)):
            if time.monotonic() > deadline:
                path = engine.readiness_path
                raise LaunchError(f"external server {url} not ready after {timeout:.0f} s ({path})")
            time.sleep(0.5)
        record.models = {"target": {"id": self.settings.model or "external"}}
        return server

    def launch(self, cfg: SpecConfig, engine: Engine, record: ConfigRecord) -> Server:
        """Start ``engine`` with ``cfg`` on a free port and wait until it is ready; the
        command, environment, models and boot time go on ``record``."""
        started = time.perf_counter()
        cost: dict[str, float | None] = {"cooldown_s": None, "lint_s": None}
        docker = self.settings.docker
        target, draft = self.prepare(cfg, engine, record, cost)
        timeout = self.settings.startup_timeout_s or engine.settings.startup_timeout_s
        for attempt in range(PORT_RETRIES):
            port = free_port(self.settings.host, getattr(engine, "port_offsets", ()))
            ctx = BootContext(
                cfg, target, draft, self.settings.host, port, self.settings.api_key,
                secret_dir=self.secret_dir() if docker is None else None,
                cpus=self.settings.cpus if docker is None else None,
            )  # fmt: skip
            spec = engine.build_command(ctx)
            if self.gpu is not None:  # this worker's GPUs, unless the config pins its own
                spec.env.update({**self.gpu.engine_env(), **spec.env})
            record.command, record.env = spec.redacted_argv(), spec.redacted_env()
            if docker is None:  # what the engine inherits and reads, beside its own variables
                inherited = engine.inherited_env(os.environ)
                record.extra["engine_env"] = {
                    k: v for k, v in inherited.items() if k not in spec.env
                }
            if attempt == 0 and self.settings.lint and engine.name != "llamacpp":
                mark = time.perf_counter()
                self.lint_or_raise(cfg, engine, spec, record)
                cost["lint_s"] = time.perf_counter() - mark
            log_path = self.settings.log_dir / f"{cfg.engine}-{cfg.name}-{port}.log"
            record.log_path = str(log_path)
            base_url = f"http://{self.settings.host}:{port}"
            server = Server(cfg, engine, base_url, self.client(base_url), record, target)
            try:
                server.process = self.start(cfg, spec, port, log_path, (target, draft))
                record.boot_s = wait_ready(server.process, self.probe(server), timeout)
                time.sleep(SETTLE_S)
                code = server.process.exited()
                if code is not None:  # something else answered on the port: never measure it
                    raise server.process.failure(
                        f"engine exited with code {code} although port {port} answered: another "
                        "server holds that port"
                    )
            except LaunchError as exc:
                self.close_client(server)
                if attempt + 1 < PORT_RETRIES and port_clash(str(exc)):
                    continue
                hint = lint_hint(engine, spec)
                raise LaunchError(redact(str(exc) + hint, spec.secrets)) from None
            record.server_url = base_url
            server.started, server.cost = started, {**cost, "start_s": record.boot_s}
            record.extra.setdefault("cost", []).append(server.cost)
            return server
        raise AssertionError("unreachable")  # pragma: no cover

    def prepare(
        self, cfg: SpecConfig, engine: Engine, record: ConfigRecord,
        cost: dict[str, float | None],
    ) -> tuple[str, str | None]:  # fmt: skip
        """Before a launch: the config checked against the engine, the models and the engine
        identified on ``record``, the cooldown gate (its time in ``cost``); the models."""
        if cfg.flush and not engine.flushes:
            raise ConfigError(
                f"config {cfg.qualified_name} asks for flush = {cfg.flush!r}, but the "
                f"{engine.name} adapter cannot reset the engine's caches between requests; "
                "drop flush from the config"
            )
        docker = self.settings.docker
        if docker is None:
            engine.check_installed()
        target, draft = self.models_for(cfg)
        record.models = {"target": model_identity(target)}
        if draft:
            record.models["draft"] = model_identity(draft)
        record.engine_version = engine.version() if docker is None else f"image {docker.image}"
        if self.gpu is not None:
            mark = time.perf_counter()
            waited = self.gpu.before_config()
            if waited is not None:
                record.extra.setdefault("cooldown", []).append(waited)
                cost["cooldown_s"] = time.perf_counter() - mark
        record.extra["engine_args"] = list(engine.settings.extra_args)
        if engine.name in self.engine_choice:
            label, _, tried = self.engine_choice[engine.name]
            record.extra["engine_interface"] = {"chosen": label, "tried": tried}
        if self.settings.cpus is not None and docker is None:
            record.extra["engine_cpus"] = describe(self.settings.cpus)
        return target, draft

    def start(
        self, cfg: SpecConfig, spec: LaunchSpec, port: int, log_path: Path,
        models: tuple[str, str | None],
    ) -> ServerProcess:  # fmt: skip
        """A subprocess, or with --specdec-launcher docker a container of the engine image."""
        docker = self.settings.docker
        if docker is None:
            return start_process(spec.argv, spec.env, log_path, self.settings.cpus)
        from pytest_specdec.engines.container import start_container

        binary = self.settings.docker_binary or DOCKER_BINARIES.get(cfg.engine, spec.argv[0])
        folders = {str(Path(m).parent) for m in models if m and Path(m).is_file()}
        settings = replace(docker, volumes={**{f: f for f in folders}, **docker.volumes})
        in_image = LaunchSpec([binary, *spec.argv[1:]], spec.env, spec.secrets)
        name = f"specdec-{os.getpid()}-{cfg.name}-{port}"
        return start_container(in_image, settings, self.settings.host, port, log_path, name)

    def interface(self, cfg: SpecConfig, engine: Engine) -> tuple[SpecConfig, dict[str, object]]:
        """The config as the installed engine takes it: of a config with alternative
        interfaces, the first whose command line the engine's own lint accepts (its own
        interface first); and what was tried. Without alternatives, or without lint, the config
        as it is."""
        if not cfg.alternatives or not self.settings.lint or self.settings.server_url:
            return cfg, {}
        target, draft = self.models_for(cfg)
        host = self.settings.host
        taken, tried, unchecked = first_accepted(
            (name, engine, BootContext(cfg.with_interface(name), target, draft, host, 0))
            for name in [cfg.interface, *cfg.alternatives]
        )
        if unchecked is not None:
            return cfg.with_interface(cfg.interface), {"chosen": cfg.interface,
                                                       "not checked": unchecked[1]}  # fmt: skip
        if taken is not None:
            return cfg.with_interface(taken), {"chosen": taken, "tried": tried}
        return cfg.with_interface(cfg.interface), {"chosen": None, "tried": tried}

    def lint_or_raise(
        self, cfg: SpecConfig, engine: Engine, spec: LaunchSpec, record: ConfigRecord
    ) -> None:
        """Check the flags against the installed engine before a boot that takes minutes."""
        try:
            findings = engine.lint(spec)
        except LintUnavailable as exc:
            record.extra["lint"] = f"not checked: {exc}"
            return
        record.extra["lint"] = [str(f) for f in findings]
        if not errors(findings):  # warnings are recorded, never a reason not to boot
            return
        listed = "; ".join(str(f) for f in errors(findings))
        installed = record.engine_version or engine.name
        tried = (record.extra.get("interface") or {}).get("tried") or {}
        if len(tried) > 1:
            each = "; ".join(f"interface {name}: {why}" for name, why in tried.items())
            raise ConfigError(
                f"config {cfg.qualified_name} ({cfg.description}) has interfaces "
                f"{', '.join(tried)}, and the installed {installed} takes none of them: {each}; "
                "install an engine build with one of them, or pick an upstream config "
                "(specdec configs list)"
            )
        if cfg.interface != "upstream":
            raise ConfigError(
                f"config {cfg.qualified_name} needs the interface {cfg.interface} ("
                f"{cfg.description}), which the installed {installed} does not have: {listed}; "
                "install an engine build with that interface, or pick an upstream config "
                "(specdec configs list)"
            )
        raise ConfigError(
            f"config {cfg.qualified_name} has flags the installed {installed} does not accept: "
            f"{listed}; fix the config or pass --specdec-no-lint"
        )

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

    def secret_dir(self) -> Path | None:
        """A 0700 folder for files that carry the API key to an engine; removed at close."""
        if not self.settings.api_key:
            return None
        if self._secrets is None:
            self._secrets = Path(tempfile.mkdtemp(prefix="specdec-secrets-"))
        return self._secrets

    def close(self) -> None:
        if self._secrets is not None:
            shutil.rmtree(self._secrets, ignore_errors=True)
            self._secrets = None


def first_accepted(
    candidates: Iterable[tuple[str, Engine, BootContext]],
) -> tuple[str | None, dict[str, str], tuple[str, str] | None]:
    """Of (label, engine, context) candidates, in order, the label of the first whose command
    line the engine's own lint accepts (None if none does); the findings of each one before it;
    and, where lint could not run, the label it stopped at and why (nothing tried after)."""
    tried: dict[str, str] = {}
    for label, engine, ctx in candidates:
        try:
            found = errors(engine.lint(engine.build_command(ctx)))
        except LintUnavailable as exc:
            return None, tried, (label, str(exc))
        if not found:
            return label, tried, None
        tried[label] = "; ".join(str(f) for f in found)
    return None, tried, None


def lint_hint(engine: Engine, spec: LaunchSpec) -> str:
    """The linter's findings as extra lines of a boot failure, or nothing."""
    try:
        findings = engine.lint(spec)
    except LintUnavailable:
        return ""
    return "".join(f"\nlint: {f}" for f in findings)


def port_clash(message: str) -> bool:
    text = message.lower()
    return (
        "address already in use" in text
        or "couldn't bind" in text
        or ("bind" in text and "port" in text)
    )
