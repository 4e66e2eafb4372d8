"""Per-pytest-process state of the plugin: the options validated into :class:`RunSettings`
at configure time (bad values are usage errors naming the flag), and the runner, made when
the first test needs it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_specdec.core.configs import ConfigError, SpecConfig, load_registry, split_names
from pytest_specdec.core.engine_table import ENGINE_TABLE, EngineLoadError, EngineTableError
from pytest_specdec.core.outputs import output_problems
from pytest_specdec.core.suitefile import (
    builtin_suite_file,
    default_suite_file,
    load_suite_settings,
    with_engine_args,
)
from pytest_specdec.core.workers import WorkerLedger
from pytest_specdec.core.workloads import WorkloadError, load_workload
from pytest_specdec.driver.runner import Runner, RunSettings, resolve_configs
from pytest_specdec.driver.settings import DEFAULT_ROUNDS
from pytest_specdec.engines.container import DockerSettings
from pytest_specdec.engines.cpus import CpuShareError, engine_cpus
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.gpu.hygiene import HygienePolicy
from pytest_specdec.gpu.monitor import GpuMonitor, GpuSettings
from pytest_specdec.gpu.nvml import probe, xdist_worker_index

STASH_KEY = pytest.StashKey["SpecdecState"]()


def register_engines(config: pytest.Config) -> None:
    """The engines that pytest plugins add (``pytest_specdec_engines``), each named by the
    plugin that gave it; a name registered twice is a usage error naming both."""
    for impl in config.hook.pytest_specdec_engines.get_hookimpls():
        found = cast("Mapping[str, Any]", impl.function() or {})
        for name, factory in found.items():
            try:
                ENGINE_TABLE.add(name, factory, f"pytest plugin {impl.plugin_name}")
            except EngineTableError as exc:
                raise pytest.UsageError(str(exc)) from None


def hardware_fields(config: pytest.Config) -> tuple[tuple[str, str], ...]:
    """The plugins' extra hardware fields (``pytest_specdec_hardware``), sorted; one field
    given two values is a usage error."""
    fields: dict[str, tuple[str, str]] = {}
    for impl in config.hook.pytest_specdec_hardware.get_hookimpls():
        given = cast("Mapping[str, Any]", impl.function(config=config) or {})
        for key, value in given.items():
            known = fields.get(str(key))
            if known is not None and known[0] != str(value):
                raise pytest.UsageError(
                    f"hardware field {key!r} is {known[0]!r} by plugin {known[1]} and "
                    f"{value!r} by plugin {impl.plugin_name}; make them agree or rename one"
                )
            fields[str(key)] = (str(value), impl.plugin_name)
    return tuple(sorted((k, v) for k, (v, _) in fields.items()))


def _gpu_settings(getopt: Any) -> GpuSettings:
    """The GPU flags; --specdec-require-gpu without a usable GPU is a usage error now."""
    settings = GpuSettings(
        gpus=getopt("--specdec-gpus"),
        require=getopt("--specdec-require-gpu"),
        hz=getopt("--specdec-telemetry-hz"),
        cooldown=not getopt("--specdec-no-cooldown"),
        lock_sm_mhz=getopt("--specdec-lock-clocks"),
        policy=HygienePolicy(cooldown_cap_s=getopt("--specdec-cooldown-cap")),
    )
    if settings.require:
        available, reason = probe()
        if not available:
            raise pytest.UsageError(
                f"--specdec-require-gpu: no usable NVIDIA GPU here: {reason}; run on a GPU "
                "runner (check nvidia-smi and nvidia-ml-py) or drop --specdec-require-gpu"
            )
    return settings


class SpecdecState:
    """Per-pytest-process state: validated options now, the runner once a test needs it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        register_engines(config)
        getopt = config.getoption
        root = Path(str(config.rootpath))
        try:
            engine, names = self._resolve(getopt, root)
        except (ConfigError, WorkloadError) as exc:
            raise pytest.UsageError(str(exc)) from None
        workerinput = getattr(config, "workerinput", None)
        self.worker_id: str | None = workerinput["workerid"] if workerinput else None
        self.n_workers: int = int(workerinput["workercount"]) if workerinput else 1
        broken = self._check_adapters(engine)
        # shown once, by the process that prints (not per xdist worker)
        self.broken_adapters: list[str] = broken if self.worker_id is None else []
        self.results_path: Path = getopt("--specdec-results")
        self.gpu_settings = _gpu_settings(getopt)
        if getopt("--specdec-chart") is not None:
            _check_charts()
        self.settings = self._run_settings(getopt, root, engine, names)
        self.notes += _idle_options(self.settings)
        if self.worker_id is None:
            _check_outputs(getopt, self.settings)
        self.summary_lines: list[str] = [f"note: {line}" for line in self.broken_adapters]
        self._runner: Runner | None = None
        self.merged: dict[str, Any] | None = None  # the xdist controller's merged results
        self.workers = WorkerLedger()  # the xdist controller's account of its workers
        self.final: dict[str, Any] | None = None  # the last results document of this process
        self.needs_reference = False
        self.started = time.time()

    def _resolve(self, getopt: Any, root: Path) -> tuple[str, list[str]]:
        """Suite file, config registry, the configs asked for (resolved here, once), notes
        and the workload; the engine and the config names as given."""
        suite_path, built_in = getopt("--specdec-suite-file"), None
        if suite_path and not suite_path.is_file():
            raise ConfigError(
                f"--specdec-suite-file {suite_path} does not exist; give the path of a suite "
                "TOML file (see suites/specdec.toml)"
            )
        if suite_path is None:
            suite_path = default_suite_file(root)
            if suite_path == builtin_suite_file():
                built_in = (
                    f"suite file: the built-in {suite_path} (no suites/specdec.toml under the "
                    f"rootdir {root}; `specdec init` writes one)"
                )
        self.suite = with_engine_args(
            load_suite_settings(suite_path), getopt("--specdec-engine-args")
        )
        files = [*self.suite.files, *getopt("--specdec-config-file")]
        engine = getopt("--specdec-engine") or self.suite.engine
        if engine not in ENGINE_TABLE.names():
            raise ConfigError(
                f"--specdec-engine {engine}: no such engine is installed; installed: "
                f"{', '.join(ENGINE_TABLE.names())} (an adapter registers itself under the "
                "entry-point group pytest_specdec.engines, or through the "
                "pytest_specdec_engines hook)"
            )
        try:
            ENGINE_TABLE.factory(engine)
        except EngineLoadError as exc:  # named, with its distribution and the fix
            raise ConfigError(str(exc)) from None
        self.registry = load_registry(files, default_engine=engine if engine != "openai" else None)
        given = getopt("--spec-config")
        names = split_names(given) or ["baseline"]
        if given and not split_names(given):
            raise ConfigError(f"--spec-config {','.join(given)!r} names no config: give one or "
                              "more names, e.g. --spec-config baseline,ngram")  # fmt: skip
        reference = getopt("--specdec-reference")
        if reference:  # measured first, so that the others can be compared with it
            names = [reference, *(n for n in names if n != reference)]
            if len(names) == 1:
                raise ConfigError(
                    f"--specdec-reference {reference} is the only config, so nothing is judged "
                    f"against it: name the configs to compare, e.g. --spec-config ngram "
                    f"--specdec-reference {reference}"
                )
        self.configs: list[SpecConfig] = resolve_configs(
            names, engine, self.registry, getopt("--specdec-server-url") is not None,
            any_engine=getopt("--specdec-engine") is None,
        )  # fmt: skip
        self.notes = [built_in] if built_in else []
        self.notes += [
            f"spec config {c.name!r} exists only for engine {c.engine}: running it on "
            f"{c.engine} (the suite's default engine is {engine})"
            for c in self.configs if c.engine != engine and engine != "openai"
        ]  # fmt: skip
        self.workload = load_workload(getopt("--specdec-workload") or self.suite.workload)
        return engine, names

    def _check_adapters(self, engine: str) -> list[str]:
        """Engine adapters that failed to import: a usage error where this run uses one; the
        others, named with their distribution, error and fix, are returned for the report
        header and the terminal summary. Not a warning: a project whose ini escalates warnings
        (``filterwarnings = error``) would otherwise die on a distribution it does not use."""
        errors = ENGINE_TABLE.load_errors()
        used = sorted({engine, *(c.engine for c in self.configs)} & errors.keys())
        if used:
            raise pytest.UsageError("\n".join(errors[name] for name in used))
        return [
            f"{error} (this run does not use engine {name!r} and goes on)"
            for name, error in sorted(errors.items())
        ]

    def _run_settings(self, getopt: Any, root: Path, engine: str, names: list[str]) -> RunSettings:
        """The flags as :class:`RunSettings`; each xdist worker writes its own results file
        (the controller merges them)."""
        results: Path = getopt("--specdec-results")
        if self.worker_id:
            results = results.with_name(f"{results.stem}.{self.worker_id}{results.suffix}")
        given = getopt("--specdec-cpus")  # checked now; the automatic split when first used
        _check_session_options(getopt)
        _check_unused(getopt)
        return RunSettings(
            engine=engine,
            config_names=tuple(  # a name resolved on another engine travels qualified
                c.qualified_name if c.engine != engine else n
                for c, n in zip(self.configs, names, strict=True)
            ),
            runs=getopt("--specdec-runs"),
            max_tokens=getopt("--specdec-max-tokens"),
            warmup=not getopt("--specdec-no-warmup"),
            results_path=results,
            log_dir=getopt("--specdec-log-dir") or results.parent / "logs",
            server_url=getopt("--specdec-server-url"),
            model=getopt("--specdec-model"),
            draft_model=getopt("--specdec-draft-model"),
            startup_timeout_s=getopt("--specdec-startup-timeout"),
            request_timeout_s=getopt("--specdec-request-timeout"),
            api_key=getopt("--specdec-api-key") or os.environ.get("SPECDEC_API_KEY"),
            baseline_dir=getopt("--specdec-baseline-dir")
            or root / (self.suite.baseline_dir or "baselines"),
            reference=self.configs[0].name if getopt("--specdec-reference") else None,
            allow_mismatch=getopt("--specdec-allow-mismatch"),
            same_machine=getopt("--specdec-same-machine"),
            update_baselines=getopt("--specdec-update-baselines"),
            fail_on=tuple(getopt("--specdec-fail-on")),
            provisional_gates=getopt("--specdec-provisional") == "gate",
            alpha=getopt("--specdec-alpha"),
            min_delta=getopt("--specdec-min-delta"),
            accept_delta=getopt("--specdec-accept-delta"),
            temperature=getopt("--specdec-temperature"),
            ignore_eos=getopt("--specdec-ignore-eos") or self.suite.ignore_eos,
            score=getopt("--specdec-score") or self.suite.score,
            top_p=getopt("--specdec-top-p"),
            seed=getopt("--specdec-seed"),
            lint=not getopt("--specdec-no-lint"),
            sessions=getopt("--specdec-sessions"),
            docker=self._docker_settings(getopt),
            docker_binary=getopt("--specdec-docker-binary"),
            lossless_fail_before=getopt("--specdec-lossless-fail-before"),
            concurrency=getopt("--specdec-concurrency") or self.suite.concurrency,
            rounds=getopt("--specdec-rounds") or self.suite.rounds or DEFAULT_ROUNDS,
            adaptive=getopt("--specdec-adaptive"),
            max_minutes=getopt("--specdec-max-minutes"),
            target_mde=getopt("--specdec-target-mde"),
            cpus=self._engine_cpus(given) if given is not None else None,
            hardware_fields=hardware_fields(self.config),
        )

    def _engine_cpus(self, given: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """This worker's engine cores: --specdec-cpus, or a CPU host's cores split between
        the xdist workers (engines/cpus.py); a split that leaves less than a core is refused."""
        workers = self.n_workers
        if given is None and workers < 2:
            return None
        gpu_host = given is None and probe()[0]
        try:
            return engine_cpus(given, xdist_worker_index(self.worker_id), workers, gpu_host)
        except CpuShareError as exc:
            raise pytest.UsageError(str(exc)) from None

    @staticmethod
    def _docker_settings(getopt: Any) -> DockerSettings | None:
        if getopt("--specdec-launcher") != "docker":
            return None
        image = getopt("--specdec-docker-image")
        if not image:
            raise pytest.UsageError(
                "--specdec-launcher docker needs --specdec-docker-image IMAGE (e.g. "
                "pytest-specdec/llamacpp-cpu:11434.0.0 from ./scripts/build-engine-image)"
            )
        try:
            return DockerSettings(
                image=image,
                network=getopt("--specdec-docker-network"),
                shm_size=getopt("--specdec-docker-shm"),
            )
        except LaunchError as exc:
            raise pytest.UsageError(str(exc)) from None

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            if self.settings.cpus is None and self.n_workers > 1:  # a CPU host's xdist split
                self.settings = replace(self.settings, cpus=self._engine_cpus(None))
            gpu = GpuMonitor(self.gpu_settings, self.worker_id, self.n_workers)
            self._runner = Runner(
                self.settings, self.registry, self.suite, self.workload, gpu=gpu,
                on_write=self._amend, configs=self.configs,
            )  # fmt: skip
            self._runner.notes[:0] = self.notes
        return self._runner

    def _amend(self, document: dict[str, Any]) -> None:
        self.config.hook.pytest_specdec_results(config=self.config, document=document)

    @property
    def used(self) -> bool:
        return self._runner is not None

    def group(self, config_name: str) -> str:
        """The config group that one xdist worker runs whole: the config, or, under
        --specdec-reference, every config with the reference (judged in one process)."""
        return self.settings.reference or config_name


def _check_session_options(getopt: Any) -> None:
    """The session options that need another: a target MDE needs adaptive sessions, and a
    budget of machine time needs sessions the plugin boots."""
    if getopt("--specdec-target-mde") is not None and not getopt("--specdec-adaptive"):
        raise pytest.UsageError(
            f"--specdec-target-mde {getopt('--specdec-target-mde'):g} decides when adaptive "
            "sessions stop; add --specdec-adaptive (and --specdec-sessions N)"
        )
    if getopt("--specdec-max-minutes") is not None and getopt("--specdec-server-url"):
        raise pytest.UsageError(
            f"--specdec-max-minutes {getopt('--specdec-max-minutes'):g} budgets the machine "
            "time of the server sessions the plugin boots; with --specdec-server-url it boots "
            "none (the server's time is yours to budget): drop one of the two"
        )


def _idle_options(settings: RunSettings) -> list[str]:
    """Session options that are accepted but have nothing to do in this run, said in the
    header (a nightly matrix passes one set of flags to every config, some with one session)."""
    if settings.adaptive and not settings.stops_early:
        return [
            f"--specdec-adaptive stops sessions early, and --specdec-sessions {settings.sessions} "
            "boots one: it has nothing to stop (give --specdec-sessions N for up to N)"
        ]
    return []


def _check_unused(getopt: Any) -> None:
    """Options that would do nothing, refused rather than dropped without a word: sampling
    settings at temperature 0 (greedy: the requests carry neither), and the container's image
    or binary without the Docker launcher (the engine boots on the host)."""
    if not getopt("--specdec-temperature"):
        for flag in ("--specdec-top-p", "--specdec-seed"):
            if getopt(flag) is not None:
                raise pytest.UsageError(
                    f"{flag} {getopt(flag):g} applies to sampled requests, and at "
                    "--specdec-temperature 0 (the default) every request is greedy and carries "
                    f"none: add --specdec-temperature T (e.g. 0.8), or drop {flag}"
                )
    if getopt("--specdec-launcher") != "docker":
        for flag in ("--specdec-docker-image", "--specdec-docker-binary"):
            if getopt(flag):
                raise pytest.UsageError(
                    f"{flag} {getopt(flag)} is for the container the Docker launcher starts, "
                    "and this run boots the engine on the host: add --specdec-launcher docker, "
                    f"or drop {flag}"
                )


REPORT_FLAGS = ("--specdec-markdown", "--specdec-benchmark-json", "--specdec-chart")


def _check_outputs(getopt: Any, settings: RunSettings) -> None:
    """The files and folders the run writes, refused now if they cannot be written or would
    replace what they must not (core/outputs.py), not after every measurement."""
    reports = {flag: getopt(flag) for flag in REPORT_FLAGS}
    folders = {"--specdec-log-dir": settings.log_dir,
               "--specdec-baseline-dir": settings.baseline_dir}  # fmt: skip
    problems = output_problems(("--specdec-results", getopt("--specdec-results")), reports, folders)
    if problems:
        raise pytest.UsageError("\n".join(problems))


def _check_charts() -> None:
    """``--specdec-chart`` without matplotlib is refused before anything is measured."""
    from pytest_specdec.report.charts import ChartsUnavailable, check_available

    try:
        check_available()
    except ChartsUnavailable as exc:
        raise pytest.UsageError(f"--specdec-chart: {exc}") from None
