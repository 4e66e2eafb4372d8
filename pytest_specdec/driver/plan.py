"""What will be booted, decided in one place: the boot plan.

:meth:`Planner.plan` turns a config and the run's settings into a complete, immutable
:class:`BootPlan`: the engine and the interface of its settings the installed engine takes (and
why the others were refused), the config's own interface likewise, the models, the command line
and environment (and their redacted forms), the port and the ports the engine derives from it,
and what the engine's own lint said. A config the installed engine would refuse stops here,
before a boot that takes minutes. The record is written from the plan (:meth:`BootPlan.write`),
the booter starts it (boot.py), and a failed boot says what it was.

Choices that hold for a whole run are made once: the interface of an engine's settings (per
engine) and a config's interface (per config), at their first plan.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_specdec.core.configs import ConfigError, SpecConfig
from pytest_specdec.core.modelfile import model_identity
from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.core.suitefile import EngineSettings, SuiteSettings
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.engines import Engine, make_engine
from pytest_specdec.engines.base import BootContext, LaunchSpec
from pytest_specdec.engines.cpus import describe
from pytest_specdec.engines.launch import free_port
from pytest_specdec.engines.lint import LintUnavailable, errors
from pytest_specdec.gpu.monitor import GpuMonitor


@dataclass(frozen=True)
class BootPlan:
    """One boot of one config, complete before anything starts."""

    config: SpecConfig  # as it boots: its interface chosen
    engine: Engine
    target: str | None
    draft: str | None
    base_url: str
    startup_timeout_s: float
    context: BootContext | None = None  # None: an external server (--specdec-server-url)
    spec: LaunchSpec | None = None
    log_path: Path | None = None
    models: Mapping[str, Any] = field(default_factory=dict)  # identities, for the record
    engine_version: str | None = None
    inherited_env: Mapping[str, str] | None = None  # None: a container's (not this machine's)
    interface: Mapping[str, object] = field(default_factory=dict)  # the config's choice
    engine_interface: Mapping[str, object] | None = None  # its engine settings' choice
    lint: Sequence[str] | str | None = None  # findings, "not checked: …", or None (not asked)
    lint_s: float | None = None
    cpus: str | None = None  # the engine's cores, as "0-2,5"

    @property
    def port(self) -> int | None:
        return None if self.context is None else self.context.port

    def at_port(self, port: int, log_dir: Path) -> BootPlan:
        """The same boot on another port (its command line and log follow)."""
        if self.context is None:
            raise ValueError("an external server has no port to change")
        ctx = replace(self.context, port=port)
        spec = self.engine.build_command(ctx)
        if self.spec is not None:  # the GPUs the planner gave it stay
            spec.env.update({k: v for k, v in self.spec.env.items() if k not in spec.env})
        return replace(
            self, context=ctx, spec=spec, base_url=f"http://{ctx.host}:{port}",
            log_path=log_path(log_dir, self.config, port),
        )  # fmt: skip

    def write(self, record: ConfigRecord) -> None:
        """Everything the record says about this boot (what a failed boot reports too)."""
        record.models = dict(self.models)
        if self.spec is None:  # an external server: its address is all that is known
            record.server_url = self.base_url
            return
        record.command, record.env = self.spec.redacted_argv(), self.spec.redacted_env()
        record.engine_version = self.engine_version
        record.log_path = None if self.log_path is None else str(self.log_path)
        extra = record.extra
        extra["engine_args"] = list(self.engine.settings.extra_args)
        if self.inherited_env is not None:
            extra["engine_env"] = dict(self.inherited_env)
        if self.engine_interface is not None:
            extra["engine_interface"] = dict(self.engine_interface)
        if self.interface:
            extra["interface"] = dict(self.interface)
        if self.cpus is not None:
            extra["engine_cpus"] = self.cpus
        if self.lint is not None:
            extra["lint"] = self.lint if isinstance(self.lint, str) else list(self.lint)


class PlanRefused(ConfigError):
    """The installed engine refuses the plan's flags; ``plan`` is what was to be booted (its
    lint findings on the record say which)."""

    def __init__(self, message: str, plan: BootPlan) -> None:
        super().__init__(message)
        self.plan = plan


def log_path(log_dir: Path, cfg: SpecConfig, port: int) -> Path:
    return log_dir / f"{cfg.engine}-{cfg.name}-{port}.log"


class Planner:
    """Makes the boot plans of one run; holds the choices made once per run and the private
    folder that carries secrets to an engine."""

    def __init__(
        self, settings: RunSettings, suite: SuiteSettings, gpu: GpuMonitor | None = None
    ) -> None:
        self.settings = settings
        self.suite = suite
        self.gpu = gpu
        self._secrets: Path | None = None
        # engine name -> (interface, its settings, what was tried): chosen once per engine
        self.engine_choice: dict[str, tuple[str, EngineSettings, dict[str, str]]] = {}
        # config name -> (the config as it boots, how it was chosen): chosen once per config
        self.config_choice: dict[str, tuple[SpecConfig, dict[str, object]]] = {}

    # --- the plan ---------------------------------------------------------------------------

    def plan(self, cfg: SpecConfig) -> BootPlan:
        """The boot of ``cfg``: every choice made, the command line built, its port free, its
        flags checked by the installed engine's own lint (ConfigError where it refuses them,
        EngineNotInstalled where the engine is missing)."""
        engine = self.engine_for(cfg)
        if engine.settings.freeze_gc and not getattr(engine, "freezes_gc", False):
            raise ConfigError(
                f"[engines.{cfg.engine}] freeze_gc = true, but the {engine.name} adapter cannot "
                "freeze the engine's garbage collector (SGLang's can, through its /freeze_gc); "
                f"drop freeze_gc from [engines.{cfg.engine}]"
            )
        owned_flags(cfg, engine.settings.extra_args)
        cfg, how = self.interface(cfg, engine)
        if self.settings.server_url:
            url = str(self.settings.server_url).rstrip("/")
            timeout = self.settings.startup_timeout_s or 30.0
            models = {"target": {"id": self.settings.model or "external"}}
            return BootPlan(cfg, engine, None, None, url, timeout, models=models, interface=how)
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
        models = {"target": model_identity(target)}
        if draft:
            models["draft"] = model_identity(draft)
        port = free_port(self.settings.host, getattr(engine, "port_offsets", ()))
        ctx = BootContext(
            cfg, target, draft, self.settings.host, port, self.settings.api_key,
            secret_dir=self.secret_dir() if docker is None else None,
            cpus=self.settings.cpus if docker is None else None,
        )  # fmt: skip
        spec = engine.build_command(ctx)
        if self.gpu is not None:  # this worker's GPUs, unless the config pins its own
            spec.env.update({**self.gpu.engine_env(), **spec.env})
        inherited = None
        if docker is None:  # what the engine inherits and reads, beside its own variables
            found = engine.inherited_env(os.environ)
            inherited = {k: v for k, v in found.items() if k not in spec.env}
        choice = self.engine_choice.get(engine.name)
        plan = BootPlan(
            cfg, engine, target, draft, f"http://{self.settings.host}:{port}",
            self.settings.startup_timeout_s or engine.settings.startup_timeout_s,
            context=ctx, spec=spec, log_path=log_path(self.settings.log_dir, cfg, port),
            models=models,
            engine_version=engine.version() if docker is None else f"image {docker.image}",
            inherited_env=inherited, interface=how,
            engine_interface=None if choice is None else {"chosen": choice[0],
                                                          "tried": choice[2]},
            cpus=describe(self.settings.cpus) if self.settings.cpus is not None
            and docker is None else None,
        )  # fmt: skip
        if self.settings.lint and engine.name != "llamacpp":
            plan = self.linted(plan)
        return plan

    def linted(self, plan: BootPlan) -> BootPlan:
        """The plan with the installed engine's verdict on its flags; ConfigError where it
        refuses them (warnings are kept, never a reason not to boot)."""
        assert plan.spec is not None
        mark = time.perf_counter()
        try:
            findings = plan.engine.lint(plan.spec)
            lint_load = getattr(plan.engine, "lint_load", None)
            if lint_load is not None:  # load levels its settings measure badly
                findings += lint_load(plan.spec, self.settings.concurrency)
        except LintUnavailable as exc:
            return replace(plan, lint=f"not checked: {exc}", lint_s=time.perf_counter() - mark)
        plan = replace(plan, lint=[str(f) for f in findings], lint_s=time.perf_counter() - mark)
        wrong = errors(findings)
        if wrong:
            raise PlanRefused(refusal(plan, "; ".join(str(f) for f in wrong)), plan)
        return plan

    # --- the choices ------------------------------------------------------------------------

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
        where none does (the plan's lint then names the flags) or where lint is off."""
        if name in self.engine_choice:
            return self.engine_choice[name][1]
        variants = dict(settings.variants())
        chosen = next(iter(variants))  # its own extra_args
        tried: dict[str, str] = {}
        if self.settings.lint and not self.settings.server_url:
            plain = SpecConfig(name="(engine arguments)", engine=name)
            try:
                target = self.models_for(replace(cfg, draft=None))[0]
            except ConfigError:  # the plan says so; the flags are checked all the same
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

    def interface(self, cfg: SpecConfig, engine: Engine) -> tuple[SpecConfig, dict[str, object]]:
        """The config as the installed engine takes it, chosen once per config: of a config
        with alternative interfaces, the first whose command line the engine's own lint
        accepts (its own first); and what was tried. Without alternatives, or without lint, the
        config as it is."""
        if cfg.name in self.config_choice:
            return self.config_choice[cfg.name]
        if not cfg.alternatives or not self.settings.lint or self.settings.server_url:
            return cfg, {}
        target, draft = self.models_for(cfg)
        host = self.settings.host
        taken, tried, unchecked = first_accepted(
            (name, engine, BootContext(cfg.with_interface(name), target, draft, host, 0))
            for name in [cfg.interface, *cfg.alternatives]
        )
        how: dict[str, object]
        if unchecked is not None:
            how = {"chosen": cfg.interface, "not checked": unchecked[1]}
            chosen = cfg.with_interface(cfg.interface)
        elif taken is not None:
            chosen, how = cfg.with_interface(taken), {"chosen": taken, "tried": tried}
        else:
            chosen, how = cfg.with_interface(cfg.interface), {"chosen": None, "tried": tried}
        self.config_choice[cfg.name] = (chosen, how)
        return chosen, how

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

    def untried(self, plan: BootPlan) -> list[str]:
        """The interfaces the suite offers for ``plan``'s engine settings and config that no
        lint chose between (``--specdec-no-lint``): the first of each was booted as written."""
        if self.settings.lint or self.settings.server_url:
            return []
        engine = [name for name, _ in self.suite.engine_settings(plan.config.engine).variants()]
        return engine[1:] + list(plan.config.alternatives)

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


def refusal(plan: BootPlan, listed: str) -> str:
    """Why the installed engine refuses a plan's flags, and the fix."""
    cfg = plan.config
    installed = plan.engine_version or plan.engine.name
    tried = plan.interface.get("tried") or {}
    if isinstance(tried, dict) and len(tried) > 1:
        each = "; ".join(f"interface {name}: {why}" for name, why in tried.items())
        return (
            f"config {cfg.qualified_name} ({cfg.description}) has interfaces "
            f"{', '.join(tried)}, and the installed {installed} takes none of them: {each}; "
            "install an engine build with one of them, or pick an upstream config "
            "(specdec configs list)"
        )
    if cfg.interface != "upstream":
        return (
            f"config {cfg.qualified_name} needs the interface {cfg.interface} ("
            f"{cfg.description}), which the installed {installed} does not have: {listed}; "
            "install an engine build with that interface, or pick an upstream config "
            "(specdec configs list)"
        )
    return (
        f"config {cfg.qualified_name} has flags the installed {installed} does not accept: "
        f"{listed}; fix the config or pass --specdec-no-lint"
    )


def untried_note(message: str, untried: Sequence[str]) -> str:
    """A failed boot's message, its first line naming the interfaces left untried, and the fix."""
    head, sep, tail = message.partition("\n")
    return (
        f"{head} (booted as written: --specdec-no-lint left the suite's other interfaces "
        f"{', '.join(untried)} untried; run without it to boot the first that the installed "
        f"engine takes){sep}{tail}"
    )


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


# Flags the plugin sets itself: the target it records (name and sha256) and the address it
# probes. Given again in a config's or the engine's args, the engine takes the later one: it
# loads another model than the record names, or listens where no probe looks.
OWNED = {"llamacpp": ("-m", "--model"), "sglang": ("--model-path", "--model"),
         "vllm": ("--model",)}  # fmt: skip


def owned_flags(cfg: SpecConfig, extra_args: Sequence[str]) -> None:
    """ConfigError naming the flags of ``cfg``'s args or the engine's ``extra_args`` that the
    plugin sets itself (``OWNED``, and ``--host`` and ``--port`` for every engine)."""
    owned = {*OWNED.get(cfg.engine, ()), "--host", "--port"}
    taken = sorted({a.partition("=")[0] for a in (*extra_args, *cfg.args)} & owned)
    if taken:
        raise ConfigError(
            f"config {cfg.name}: {', '.join(taken)} given in its args or the engine's, but the "
            "plugin sets the target model, host and port itself (it records the model it loads "
            f"and probes the port it picked): drop them, and name the target in "
            f"[models.{cfg.engine}] or with --specdec-model"
        )
