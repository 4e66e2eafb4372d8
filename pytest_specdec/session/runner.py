"""The runner: resolve configs, boot one server per config, warm up, measure, record.

Both faces (the pytest plugin and the ``specdec`` CLI) drive this object; it knows nothing of
pytest. Every run ends as a :class:`RunRecord`, with an ``error`` instead of numbers when the
request failed.
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
from typing import Any

import httpx

from pytest_specdec import __version__
from pytest_specdec.core.configs import ConfigError, Registry, SpecConfig
from pytest_specdec.core.modelfile import model_identity
from pytest_specdec.core.results import (
    ConfigRecord,
    RunRecord,
    atomic_write_json,
    finalize_timings,
    results_document,
    utc_now,
)
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.core.workloads import Prompt, Workload
from pytest_specdec.engines import Engine, EngineNotInstalled, make_engine
from pytest_specdec.engines.base import BootContext, LaunchSpec, RequestSpec, redact
from pytest_specdec.engines.container import DockerSettings
from pytest_specdec.engines.launch import (
    LaunchError,
    ServerProcess,
    free_port,
    start_process,
    wait_ready,
)
from pytest_specdec.engines.lint import LintUnavailable
from pytest_specdec.gpu.session import GpuSession, RunWindow, telemetry_dict
from pytest_specdec.gpu.telemetry import RunTelemetry
from pytest_specdec.measure.client import ClientSettings, LoopThread, RequestFailed
from pytest_specdec.measure.lossless import GreedyOutput, LosslessResult
from pytest_specdec.measure.roofline import annotate
from pytest_specdec.session.reference import ensure_references, lossless
from pytest_specdec.session.sweep import LevelResult, sweep
from pytest_specdec.verdict.history import drift_for
from pytest_specdec.verdict.judge import (
    Judgement,
    adjust,
    judge_baseline,
    judge_reference,
    update_baseline,
)
from pytest_specdec.verdict.stats import DEFAULT_POLICY, VerdictPolicy, sequential_plan

PORT_RETRIES = 3
PROBE_S = 5.0  # one readiness probe at most
SETTLE_S = 0.5  # an engine that failed to bind exits within this; then its port is not ours
# The engine's executable inside its image (the first argv element is replaced by it).
DOCKER_BINARIES = {"llamacpp": "llama-server", "sglang": "python3", "vllm": "vllm"}


@dataclass(frozen=True)
class RunOptions:
    engine: str = "llamacpp"
    config_names: tuple[str, ...] = ("baseline",)
    runs: int = 5
    max_tokens: int = 256
    warmup: bool = True
    results_path: Path | None = Path("results/latest.json")
    log_dir: Path = Path("results/logs")
    server_url: str | None = None
    model: str | None = None
    draft_model: str | None = None
    host: str = "127.0.0.1"
    startup_timeout_s: float | None = None
    request_timeout_s: float = 300.0
    api_key: str | None = None
    baseline_dir: Path = Path("baselines")
    reference: str | None = None
    allow_mismatch: bool = False
    update_baselines: bool = False
    fail_on: tuple[str, ...] = ("regressed",)
    provisional_gates: bool = True  # --specdec-provisional gate|report
    alpha: float = DEFAULT_POLICY.alpha
    min_delta: float = DEFAULT_POLICY.min_delta
    lint: bool = True
    sessions: int = 1
    adaptive: bool = False
    lossless_fail_before: int = 32
    docker: DockerSettings | None = None  # --specdec-launcher docker
    docker_binary: str | None = None

    @property
    def policy(self) -> VerdictPolicy:
        """The verdict policy; with adaptive sessions, the per-look alpha of a calibrated
        group-sequential plan (looks after each session; history of about 10 sessions)."""
        base = VerdictPolicy(alpha=self.alpha, min_delta=self.min_delta)
        if self.adaptive and self.sessions > 1:
            looks = tuple(range(1, self.sessions + 1))
            return sequential_plan(base, looks, kind="history", k=10, trials=50_000).policy(base)
        return base

    def public(self) -> dict[str, Any]:
        out = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}
        out["api_key"] = "***" if self.api_key else None
        out["config_names"] = list(self.config_names)
        out["fail_on"] = list(self.fail_on)
        out["docker"] = (
            None
            if self.docker is None
            else {"image": self.docker.image, "network": self.docker.network}
        )
        return out


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


def resolve_configs(
    names: Iterable[str], engine: str, registry: Registry, external: bool
) -> list[SpecConfig]:
    """Registry lookup; with an external server any name is accepted as a label."""
    out: list[SpecConfig] = []
    for name in names:
        try:
            out.append(registry.resolve(name, engine if engine != "openai" else "llamacpp"))
        except ConfigError:
            if not external:
                raise
            out.append(SpecConfig(name=name, engine=engine, source="label (external server)"))
    return out


class Runner:
    def __init__(
        self,
        options: RunOptions,
        registry: Registry,
        suite: SuiteSettings,
        workload: Workload,
        transport: httpx.AsyncBaseTransport | None = None,
        gpu: GpuSession | None = None,
    ) -> None:
        self.options = options
        self.gpu_session = gpu
        self.registry = registry
        self.suite = suite
        self.workload = workload
        self.configs = resolve_configs(
            options.config_names, options.engine, registry, options.server_url is not None
        )
        self.records: dict[str, ConfigRecord] = {}
        self.started_at = utc_now()
        self.loop = LoopThread()
        self._secrets: Path | None = None
        self._transport = transport
        self.gpu: Any = gpu.describe() if gpu is not None else None
        self.notes: list[str] = []
        if gpu is not None and not gpu.available:
            self.notes.append(f"no GPU telemetry: {gpu.reason}")
        self.verdicts: list[Judgement] = []
        self.drift: list[dict[str, Any]] = []
        self.references: dict[tuple[str, str], dict[str, GreedyOutput]] = {}
        self.reference_records: list[ConfigRecord] = []

    # --- boot -------------------------------------------------------------------------------

    def _engine_for(self, cfg: SpecConfig) -> Engine:
        name = self.options.engine if self.options.server_url else cfg.engine
        return make_engine(name, self.suite.engine_settings(cfg.engine))

    def _models_for(self, cfg: SpecConfig) -> tuple[str, str | None]:
        models = self.suite.models_for(cfg.engine)
        target = self.options.model or cfg.model or models.target
        if not target:
            raise ConfigError(
                f"no target model for engine {cfg.engine}: set [models.{cfg.engine}] target in "
                f"{self.suite.path or 'suites/specdec.toml'} or pass --specdec-model PATH"
            )
        draft = None
        if cfg.draft:
            draft = (
                self.options.draft_model
                or cfg.draft_model
                or models.draft_for(cfg.draft, cfg.engine)
            )
        for role, path in (("target", target), ("draft", draft)):
            if (
                path
                and (path.endswith(".gguf") or path.startswith(("/", ".")))
                and not Path(path).is_file()
            ):
                raise ConfigError(
                    f"{role} model file {path} does not exist; run ./scripts/setup or fix the path"
                )
        return target, draft

    def _record(self, cfg: SpecConfig) -> ConfigRecord:
        """The config's record: one per config, holding the runs of all its sessions."""
        if cfg.name not in self.records:
            self.records[cfg.name] = ConfigRecord(cfg.name, cfg.engine, cfg.to_dict())
        return self.records[cfg.name]

    def boot(self, cfg: SpecConfig, session: int = 1) -> Server:
        """Start (or attach to) server session ``session`` of ``cfg``; wait until it is ready."""
        record = self._record(cfg)
        engine = self._engine_for(cfg)
        try:
            if self.options.server_url:
                server = self._attach(cfg, engine, record)
            else:
                server = self._launch(cfg, engine, record)
        except (LaunchError, ConfigError, EngineNotInstalled) as exc:
            record.error = str(exc) if session == 1 else f"session {session}: {exc}"
            self.write_results()
            raise
        server.session = session
        record.extra.setdefault("sessions", []).append(
            {"session": session, "server_url": server.base_url, "log_path": record.log_path,
             "boot_s": record.boot_s, "started_at": utc_now()}
        )  # fmt: skip
        return server

    def decided(self, name: str) -> Judgement | None:
        """With --specdec-adaptive: the verdict once it no longer needs more sessions."""
        if not self.options.adaptive or name not in self.records:
            return None
        judgement = self.judge(name)
        if judgement.suite is not None and judgement.suite.outcome.value != "INCONCLUSIVE":
            return judgement
        return None

    def _client(self, base_url: str) -> httpx.AsyncClient:
        settings = ClientSettings(
            read_timeout_s=self.options.request_timeout_s, api_key=self.options.api_key
        )
        return settings.build(base_url, self._transport)

    def _attach(self, cfg: SpecConfig, engine: Engine, record: ConfigRecord) -> Server:
        url = str(self.options.server_url).rstrip("/")
        server = Server(cfg, engine, url, self._client(url), record)
        record.server_url = url
        timeout = self.options.startup_timeout_s or 30.0
        deadline = time.monotonic() + timeout
        while not self.loop.run(engine.is_ready(server.client)):
            if time.monotonic() > deadline:
                path = engine.readiness_path
                raise LaunchError(f"external server {url} not ready after {timeout:.0f} s ({path})")
            time.sleep(0.5)
        record.models = {"target": {"id": self.options.model or "external"}}
        return server

    def _launch(self, cfg: SpecConfig, engine: Engine, record: ConfigRecord) -> Server:
        docker = self.options.docker
        if docker is None:
            engine.check_installed()
        target, draft = self._models_for(cfg)
        record.models = {"target": model_identity(target)}
        if draft:
            record.models["draft"] = model_identity(draft)
        record.engine_version = engine.version() if docker is None else f"image {docker.image}"
        if self.gpu_session is not None:
            waited = self.gpu_session.before_config()
            if waited is not None:
                record.extra.setdefault("cooldown", []).append(waited)
        record.extra["engine_args"] = list(engine.settings.extra_args)
        timeout = self.options.startup_timeout_s or engine.settings.startup_timeout_s
        for attempt in range(PORT_RETRIES):
            port = free_port(self.options.host)
            ctx = BootContext(
                cfg, target, draft, self.options.host, port, self.options.api_key,
                secret_dir=self._secret_dir() if docker is None else None,
            )  # fmt: skip
            spec = engine.build_command(ctx)
            if self.gpu_session is not None:  # this worker's GPUs, unless the config pins its own
                spec.env.update({**self.gpu_session.engine_env(), **spec.env})
            record.command, record.env = spec.redacted_argv(), spec.redacted_env()
            if docker is None:  # what the engine inherits and reads, beside its own variables
                inherited = engine.inherited_env(os.environ)
                record.extra["engine_env"] = {
                    k: v for k, v in inherited.items() if k not in spec.env
                }
            if attempt == 0 and self.options.lint and engine.name != "llamacpp":
                self._lint_or_raise(cfg, engine, spec, record)
            log_path = self.options.log_dir / f"{cfg.engine}-{cfg.name}-{port}.log"
            record.log_path = str(log_path)
            base_url = f"http://{self.options.host}:{port}"
            server = Server(cfg, engine, base_url, self._client(base_url), record, target)
            try:
                server.process = self._start(cfg, spec, port, log_path, (target, draft))
                record.boot_s = wait_ready(server.process, self._probe(server), timeout)
                time.sleep(SETTLE_S)
                code = server.process.exited()
                if code is not None:  # something else answered on the port: never measure it
                    raise server.process.failure(
                        f"engine exited with code {code} although port {port} answered: another "
                        "server holds that port"
                    )
            except LaunchError as exc:
                self._close_client(server)
                if attempt + 1 < PORT_RETRIES and _port_clash(str(exc)):
                    continue
                hint = self._lint_hint(engine, spec)
                raise LaunchError(redact(str(exc) + hint, spec.secrets)) from None
            record.server_url = base_url
            return server
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(
        self, cfg: SpecConfig, spec: LaunchSpec, port: int, log_path: Path,
        models: tuple[str, str | None],
    ) -> ServerProcess:  # fmt: skip
        """A subprocess, or with --specdec-launcher docker a container of the engine image."""
        docker = self.options.docker
        if docker is None:
            return start_process(spec.argv, spec.env, log_path)
        from pytest_specdec.engines.container import start_container

        binary = self.options.docker_binary or DOCKER_BINARIES.get(cfg.engine, spec.argv[0])
        folders = {str(Path(m).parent) for m in models if m and Path(m).is_file()}
        settings = replace(docker, volumes={**{f: f for f in folders}, **docker.volumes})
        in_image = LaunchSpec([binary, *spec.argv[1:]], spec.env, spec.secrets)
        name = f"specdec-{os.getpid()}-{cfg.name}-{port}"
        return start_container(in_image, settings, self.options.host, port, log_path, name)

    def _lint_or_raise(
        self, cfg: SpecConfig, engine: Engine, spec: LaunchSpec, record: ConfigRecord
    ) -> None:
        """Check the flags against the installed engine before a boot that takes minutes."""
        try:
            findings = engine.lint(spec)
        except LintUnavailable as exc:
            record.extra["lint"] = f"not checked: {exc}"
            return
        record.extra["lint"] = [str(f) for f in findings]
        if findings:
            listed = "; ".join(str(f) for f in findings)
            raise ConfigError(
                f"config {cfg.qualified_name} (interface {cfg.interface}) has flags the installed "
                f"{engine.name} does not accept: {listed}; fix the config or pass --specdec-no-lint"
            )

    @staticmethod
    def _lint_hint(engine: Engine, spec: LaunchSpec) -> str:
        try:
            findings = engine.lint(spec)
        except LintUnavailable:
            return ""
        return "".join(f"\nlint: {f}" for f in findings)

    def _probe(self, server: Server) -> Callable[[], bool]:
        """One readiness probe, bounded: a hung listener on the port must not stall the boot."""

        async def probe() -> bool:
            try:
                return await asyncio.wait_for(server.engine.is_ready(server.client), PROBE_S)
            except asyncio.TimeoutError:
                return False

        return lambda: self.loop.run(probe())

    def _close_client(self, server: Server) -> None:
        with contextlib.suppress(Exception):  # closing must never mask the real error
            self.loop.run(server.client.aclose(), timeout=10)

    def stop(self, server: Server) -> None:
        self._close_client(server)
        if server.process is not None:
            code = server.process.stop()
            server.record.extra["exit_code"] = code
        self.write_results()

    # --- measure ----------------------------------------------------------------------------

    def request_spec(self, prompt: Prompt, model: str | None = None) -> RequestSpec:
        messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
        max_tokens = prompt.max_tokens or self.options.max_tokens
        return RequestSpec(prompt.id, messages, prompt.text(), max_tokens, model=model)

    async def _request(self, server: Server, req: RequestSpec, rec: RunRecord) -> RunRecord:
        """One request, bounded in time; any failure is recorded on ``rec``, never raised."""
        try:
            await asyncio.wait_for(
                server.engine.request(server.client, req, rec), self.options.request_timeout_s
            )
        except RequestFailed as exc:
            rec.error = str(exc)
        except asyncio.TimeoutError:
            rec.error = f"request timed out after {self.options.request_timeout_s:.0f} s"
        return rec

    async def _one(self, server: Server, req: RequestSpec, rec: RunRecord) -> RunRecord:
        engine, client = server.engine, server.client
        before = await engine.spec_counters(client)
        await self._request(server, req, rec)
        if rec.error is None and before is not None:
            after = await engine.spec_counters(client)
            if after is not None:
                stats = engine.accept_from_counters(before, after)
                if rec.accept_length is None and stats.get("accept_length") is not None:
                    rec.accept_length = stats["accept_length"]
                    rec.accept_source = "metrics-delta"
                if stats.get("verify_steps") is not None and rec.verify_steps is None:
                    rec.verify_steps = int(stats["verify_steps"] or 0)
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
        req = self.request_spec(prompt, server.model_name)
        with self._telemetry_window() as window:
            try:
                self.loop.run(self._one(server, req, rec))
            except Exception as exc:
                rec.error = rec.error or f"{type(exc).__name__}: {exc}"
        if rec.error is not None and server.process is not None:
            code = server.process.exited()
            if code is not None:  # the engine died: say so, with its log tail, not just the socket
                rec.error = str(
                    server.process.failure(f"engine exited with code {code}: {rec.error}")
                )
        if window.telemetry is not None:
            rec.gpu = telemetry_dict(window.telemetry, rec.output_tokens)
            if phase == "measure":
                server.telemetry.append(window.telemetry)
                rec.invalid = self.gpu_session.invalid(window.telemetry, server.telemetry) or None  # type: ignore[union-attr]
        server.record.runs.append(rec)
        return rec

    def _telemetry_window(self) -> contextlib.AbstractContextManager[RunWindow]:
        if self.gpu_session is None:
            return contextlib.nullcontext(RunWindow())
        return self.gpu_session.window()

    def warmup(self, server: Server) -> list[RunRecord]:
        """One full-length request per prompt before anything is measured."""
        start = time.perf_counter()
        out = [self.run_once(server, p, 0, "warmup") for p in self.workload.prompts]
        server.record.warmup_s = time.perf_counter() - start
        server.warmed = True
        return out

    def sweep(self, server: Server, clients: int) -> LevelResult:
        """``clients`` concurrent clients over the workload (see concurrency.sweep)."""
        return sweep(self, server, clients)

    def measure(self, server: Server, prompt: Prompt) -> list[RunRecord]:
        if self.options.warmup and not server.warmed:
            self.warmup(server)
        runs = [self.run_once(server, prompt, i, "measure") for i in range(self.options.runs)]
        # Runs that GPU hygiene rules out (thermal or power-brake throttling, clock sag) are
        # kept in the record, marked invalid, never averaged in; each is rerun, boundedly.
        budget = self.gpu_session.options.policy.max_reruns if self.gpu_session else 0
        index = len(runs)
        while budget > 0 and any(r.invalid for r in runs) and self._valid(runs) < self.options.runs:
            runs.append(self.run_once(server, prompt, index, "measure"))
            index += 1
            budget -= 1
        self.write_results()
        return runs

    def _valid(self, runs: list[RunRecord]) -> int:
        return sum(1 for r in runs if r.ok and not r.invalid)

    # --- lossless ---------------------------------------------------------------------------

    def ensure_references(self) -> None:
        """Greedy reference outputs of each target without speculation (see reference.py)."""
        ensure_references(self)

    def lossless(self, server: Server, prompt: Prompt) -> LosslessResult:
        return lossless(self, server, prompt)

    # --- judge ------------------------------------------------------------------------------

    def judged_configs(self) -> list[str]:
        return [c.name for c in self.configs if c.name != self.options.reference]

    def judge(self, name: str, policy: VerdictPolicy | None = None) -> Judgement:
        """Verdict for one config: against --specdec-reference, else its stored baseline."""
        doc = self.document()
        by_name = {c["name"]: c for c in doc["configs"]}
        policy = policy or self.options.policy
        ref = self.options.reference
        if ref and name != ref:
            if ref not in by_name:
                raise ValueError(f"reference config {ref} has not been measured")
            return judge_reference(doc, by_name[name], by_name[ref], policy)
        return judge_baseline(
            doc, by_name[name], self.options.baseline_dir, policy, self.options.allow_mismatch
        )

    def judge_for_gate(self, name: str) -> Judgement:
        """Per-config gate during the run: Bonferroni over the judged configs (Holm's first
        step); the session-end summary applies full Holm across them."""
        m = max(1, len(self.judged_configs()))
        base = self.options.policy
        return self.judge(name, replace(base, alpha=base.alpha / m))

    def judge_all(self) -> list[Judgement]:
        measured = {n for n, r in self.records.items() if r.measured()}
        names = [n for n in self.judged_configs() if n in measured]
        return adjust([self.judge(n) for n in names], self.options.policy)

    def drifts(self) -> list[dict[str, Any]]:
        """Drops that tonight reveals in each measured config's nightly history (a change
        point, see history.py); judged against the baselines as they were."""
        doc = self.document()
        found = []
        for cfg in doc["configs"]:
            if any(r.get("phase") == "measure" for r in cfg.get("runs", [])):
                point = drift_for(doc, cfg, self.options.baseline_dir)
                if point is not None:
                    found.append({"config": cfg["name"], "message": point.describe(),
                                  **point.to_dict()})  # fmt: skip
        self.drift = found
        return found

    def update_baselines(self) -> list[str]:
        """Append every measured config's session to its baseline; one line per config."""
        doc = self.document()
        lines = []
        for cfg in doc["configs"]:
            try:
                lines.append(
                    update_baseline(
                        doc, cfg, self.options.baseline_dir, self.options.allow_mismatch
                    )
                )
            except (ValueError, OSError) as exc:
                lines.append(f"{cfg['name']}: NOT UPDATED: {exc}")
        return lines

    # --- record -----------------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        """The results document, with each config's roofline share (see roofline.py)."""
        doc = results_document(
            self.records.values(),
            started_at=self.started_at,
            options=self.options.public(),
            workload={
                "name": self.workload.name,
                "source": self.workload.source,
                "sha256": self.workload.sha256,
                "prompts": [p.id for p in self.workload.prompts],
            },
            gpu=self.gpu,
            tool_version=__version__,
            extra={
                "verdicts": [j.to_dict() for j in self.verdicts],
                "drift": self.drift,
                "notes": self.notes,
                "references": [r.to_dict() for r in self.reference_records],
            },
        )
        return annotate(doc)

    def write_results(self) -> None:
        if self.options.results_path is not None:
            atomic_write_json(self.options.results_path, self.document())

    def _secret_dir(self) -> Path | None:
        """A 0700 folder for files that carry the API key to an engine; removed at close."""
        if not self.options.api_key:
            return None
        if self._secrets is None:
            self._secrets = Path(tempfile.mkdtemp(prefix="specdec-secrets-"))
        return self._secrets

    def close(self) -> None:
        self.write_results()
        self.loop.close()
        if self._secrets is not None:
            shutil.rmtree(self._secrets, ignore_errors=True)
            self._secrets = None
        if self.gpu_session is not None:
            self.gpu_session.close()


def _port_clash(message: str) -> bool:
    text = message.lower()
    return (
        "address already in use" in text
        or "couldn't bind" in text
        or ("bind" in text and "port" in text)
    )


def run_errors(runs: Iterable[RunRecord]) -> list[str]:
    """One line per failed run: what the test reports (an error is never averaged away)."""
    return [f"{r.config}/{r.prompt} run {r.run}: {r.error}" for r in runs if r.error is not None]
