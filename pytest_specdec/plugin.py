"""pytest face: options, fixtures and hooks. Thin: the work is done by :class:`Runner`."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec import options as opt
from pytest_specdec.core.configs import ConfigError, SpecConfig, load_registry, split_names
from pytest_specdec.core.results import ConfigRecord, atomic_write_json, merge_worker_results
from pytest_specdec.core.suitefile import load_suite_settings
from pytest_specdec.core.workloads import Prompt, WorkloadError, load_workload
from pytest_specdec.engines import EngineNotInstalled
from pytest_specdec.engines.container import DockerSettings
from pytest_specdec.engines.launch import LaunchError, kill_all
from pytest_specdec.gpu.hygiene import HygienePolicy
from pytest_specdec.gpu.nvml import probe
from pytest_specdec.gpu.session import GpuOptions, GpuSession
from pytest_specdec.measure.lossless import LosslessResult
from pytest_specdec.measure.roofline import annotate
from pytest_specdec.report.table import terminal_summary, verdict_lines
from pytest_specdec.session.runner import Runner, RunOptions, Server, resolve_configs
from pytest_specdec.verdict.baselines import BaselineError
from pytest_specdec.verdict.history import HistoryUnavailable
from pytest_specdec.verdict.judge import (
    MISMATCH,
    NO_BASELINE,
    PARTIAL,
    UNJUDGEABLE,
    Judgement,
    failures,
    indistinguishable,
    not_gating,
)

STASH_KEY = pytest.StashKey["SpecdecState"]()
_STATES: dict[int, SpecdecState] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdec", "speculative-decoding benchmarks (pytest-specdec)")
    for flag, kwargs in opt.PYTEST_OPTIONS:
        group.addoption(flag, **kwargs)


class SpecdecState:
    """Per-pytest-process state: validated options now, the runner once a test needs it."""

    def __init__(self, config: pytest.Config) -> None:
        getopt = config.getoption
        root = Path(str(config.rootpath))
        suite_path = getopt("--specdec-suite-file") or root / "suites" / "specdec.toml"
        if getopt("--specdec-suite-file") and not suite_path.is_file():
            raise pytest.UsageError(
                f"--specdec-suite-file {suite_path} does not exist; give the path of a suite "
                "TOML file (see suites/specdec.toml)"
            )
        try:
            self.suite = load_suite_settings(suite_path)
            files = [p for p in (suite_path,) if p.exists()] + list(getopt("--specdec-config-file"))
            engine = getopt("--specdec-engine") or self.suite.engine
            self.registry = load_registry(
                files, default_engine=engine if engine != "openai" else None
            )
            names = split_names(getopt("--spec-config")) or ["baseline"]
            reference = getopt("--specdec-reference")
            if reference:  # measured first, so that the others can be compared with it
                names = [reference, *(n for n in names if n != reference)]
            url = getopt("--specdec-server-url")
            self.configs: list[SpecConfig] = resolve_configs(
                names, engine, self.registry, url is not None
            )
            self.workload = load_workload(getopt("--specdec-workload") or self.suite.workload)
        except (ConfigError, WorkloadError) as exc:
            raise pytest.UsageError(str(exc)) from None
        results: Path = getopt("--specdec-results")
        workerinput = getattr(config, "workerinput", None)
        self.worker_id: str | None = workerinput["workerid"] if workerinput else None
        self.n_workers: int = int(workerinput["workercount"]) if workerinput else 1
        if self.worker_id:  # each xdist worker writes its own file; the controller merges them
            results = results.with_name(f"{results.stem}.{self.worker_id}{results.suffix}")
        self.results_path: Path = getopt("--specdec-results")
        self.gpu_options = GpuOptions(
            gpus=getopt("--specdec-gpus"),
            require=getopt("--specdec-require-gpu"),
            hz=getopt("--specdec-telemetry-hz"),
            cooldown=not getopt("--specdec-no-cooldown"),
            lock_sm_mhz=getopt("--specdec-lock-clocks"),
            policy=HygienePolicy(cooldown_cap_s=getopt("--specdec-cooldown-cap")),
        )
        if getopt("--specdec-chart") is not None:
            _check_charts()
        if self.gpu_options.require:
            available, reason = probe()
            if not available:
                raise pytest.UsageError(
                    f"--specdec-require-gpu: no usable NVIDIA GPU here: {reason}; run on a GPU "
                    "runner (check nvidia-smi and nvidia-ml-py) or drop --specdec-require-gpu"
                )
        self.options = RunOptions(
            engine=engine,
            config_names=tuple(names),
            runs=getopt("--specdec-runs"),
            max_tokens=getopt("--specdec-max-tokens"),
            warmup=not getopt("--specdec-no-warmup"),
            results_path=results,
            log_dir=getopt("--specdec-log-dir") or results.parent / "logs",
            server_url=url,
            model=getopt("--specdec-model"),
            draft_model=getopt("--specdec-draft-model"),
            startup_timeout_s=getopt("--specdec-startup-timeout"),
            request_timeout_s=getopt("--specdec-request-timeout"),
            api_key=getopt("--specdec-api-key") or os.environ.get("SPECDEC_API_KEY"),
            baseline_dir=getopt("--specdec-baseline-dir") or root / "baselines",
            reference=self.configs[0].name if reference else None,
            allow_mismatch=getopt("--specdec-allow-mismatch"),
            update_baselines=getopt("--specdec-update-baselines"),
            fail_on=tuple(getopt("--specdec-fail-on")),
            provisional_gates=getopt("--specdec-provisional") == "gate",
            alpha=getopt("--specdec-alpha"),
            min_delta=getopt("--specdec-min-delta"),
            lint=not getopt("--specdec-no-lint"),
            sessions=getopt("--specdec-sessions"),
            docker=self._docker_settings(getopt),
            docker_binary=getopt("--specdec-docker-binary"),
            lossless_fail_before=getopt("--specdec-lossless-fail-before"),
            adaptive=getopt("--specdec-adaptive"),
        )
        self.summary_lines: list[str] = []
        self._runner: Runner | None = None
        self.merged: dict[str, Any] | None = None
        self.needs_reference = False
        self.lossless_lines: list[str] = []
        self.started = time.time()

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
            gpu = GpuSession(self.gpu_options, self.worker_id, self.n_workers)
            self._runner = Runner(self.options, self.registry, self.suite, self.workload, gpu=gpu)
            _STATES[id(self._runner)] = self
        return self._runner

    @property
    def used(self) -> bool:
        return self._runner is not None


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "specdec_lossless: the test compares outputs with the non-speculative "
        "reference, which is then made before the first config boots",
    )  # fmt: skip
    config.stash[STASH_KEY] = SpecdecState(config)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # SIGTERM unwinds like Ctrl-C: fixtures tear down, engines stop, results are written.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)


def _check_charts() -> None:
    """``--specdec-chart`` without matplotlib is refused before anything is measured."""
    from pytest_specdec.report.charts import ChartsUnavailable, check_available

    try:
        check_available()
    except ChartsUnavailable as exc:
        raise pytest.UsageError(f"--specdec-chart: {exc}") from None


@dataclass(frozen=True)
class Slot:
    """One server session of one config; sessions of different configs interleave (A B A B)."""

    config: SpecConfig
    session: int
    last: bool

    @property
    def id(self) -> str:
        return self.config.name if self.session == 1 else f"{self.config.name}@{self.session}"


def slots(configs: list[SpecConfig], sessions: int) -> list[Slot]:
    return [Slot(c, k, k == sessions) for k in range(1, sessions + 1) for c in configs]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = metafunc.config.stash[STASH_KEY]
    if "specdec_slot" in metafunc.fixturenames:
        found = slots(state.configs, state.options.sessions)
        # xdist_group: under --dist loadgroup every test of a config runs on one worker.
        params = [
            pytest.param(s, id=s.id, marks=pytest.mark.xdist_group(s.config.name)) for s in found
        ]
        metafunc.parametrize("specdec_slot", params, indirect=True, scope="session")
    if "specdec_clients" in metafunc.fixturenames:
        levels = metafunc.config.getoption("--specdec-concurrency")
        if levels is None:  # the sweep is opt-in: one skipped test says how to ask for it
            marks = pytest.mark.skip(reason="no sweep requested: pass --specdec-concurrency 1,4,16")
            metafunc.parametrize("specdec_clients", [pytest.param(0, marks=marks)], ids=["off"])
        else:
            metafunc.parametrize("specdec_clients", levels, ids=[f"c{n}" for n in levels])
    if "specdec_prompt" in metafunc.fixturenames:
        prompts = state.workload.prompts
        metafunc.parametrize("specdec_prompt", prompts, ids=[p.id for p in prompts])


@pytest.fixture(scope="session")
def specdec(request: pytest.FixtureRequest) -> Runner:
    """The session's runner: measure(server, prompt), options, records."""
    return request.config.stash[STASH_KEY].runner


@pytest.fixture(scope="session")
def specdec_slot(request: pytest.FixtureRequest) -> Slot:
    """The (config, server session) under test (parametrized over --spec-config x sessions)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def specdec_config(specdec_slot: Slot) -> SpecConfig:
    """The spec config under test."""
    return specdec_slot.config


@pytest.fixture(scope="session")
def specdec_server(
    request: pytest.FixtureRequest, specdec: Runner, specdec_slot: Slot
) -> Generator[Server, None, None]:
    """One server per (config, session), booted once for all its tests, stopped after them."""
    cfg = specdec_slot.config
    state = request.config.stash[STASH_KEY]
    if state.needs_reference:
        problem = None
        try:
            specdec.ensure_references()
        except (LaunchError, ConfigError, EngineNotInstalled) as exc:
            problem = f"lossless reference (target without speculation) failed: {exc}"
        if problem is not None:
            pytest.fail(problem, pytrace=False)
    if specdec_slot.session > 1:
        decided = specdec.decided(cfg.name)
        if decided is not None:
            done = specdec_slot.session - 1
            pytest.skip(f"{cfg.name}: decided after {done} session(s): {decided.outcome}")
    failure = None
    try:
        server = specdec.boot(cfg, specdec_slot.session)
    except (LaunchError, ConfigError, EngineNotInstalled) as exc:
        failure = f"[{specdec_slot.id}] {exc}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    try:
        yield server
    finally:
        specdec.stop(server)


@pytest.fixture
def specdec_clients(request: pytest.FixtureRequest) -> int:
    """Concurrent clients of one sweep level (parametrized over --specdec-concurrency)."""
    return int(request.param)


@pytest.fixture
def specdec_prompt(request: pytest.FixtureRequest) -> Prompt:
    """The prompt under test (parametrized over the workload)."""
    return request.param  # type: ignore[no-any-return]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Per-config tests (no prompt parameter, e.g. the verdict) run once, after the config's
    last session; their copies for earlier sessions are deselected."""
    state = config.stash[STASH_KEY]
    state.needs_reference = any(item.get_closest_marker("specdec_lossless") for item in items)
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        slot = callspec.params.get("specdec_slot") if callspec else None
        per_config = callspec is not None and "specdec_prompt" not in callspec.params
        (drop if isinstance(slot, Slot) and per_config and not slot.last else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def check_judgement(runner: Runner, name: str) -> Judgement:
    """The per-config gate as a test outcome: skip without a baseline, fail on a failing verdict."""
    error = None
    try:
        judgement = runner.judge_for_gate(name)
    except BaselineError as exc:
        error = str(exc)
    if error is not None:
        pytest.fail(error, pytrace=False)
    if judgement.status == NO_BASELINE:
        if runner.options.update_baselines:
            pytest.skip(f"{judgement.message.split(';')[0]}; this run creates it")
        pytest.skip(judgement.message)
    if judgement.status == PARTIAL:
        pytest.skip(judgement.message)
    if judgement.status in (MISMATCH, UNJUDGEABLE):
        pytest.fail(judgement.message, pytrace=False)
    found = failures([judgement], runner.options.fail_on, runner.options.provisional_gates)
    if found:
        pytest.fail("\n".join(found + judgement.notes), pytrace=False)
    return judgement


def _is_xdist_controller(config: pytest.Config) -> bool:
    return config.pluginmanager.getplugin("dsession") is not None


def check_lossless(runner: Runner, server: Server, prompt: Prompt) -> LosslessResult:
    """Compare with the reference; fail on an early divergence, list a late one (a near-tie
    flip) in the summary. Skipped for a server given by URL: no reference can be booted."""
    if runner.options.server_url:
        pytest.skip("lossless check needs the target booted without speculation as reference; "
                    "not possible with --specdec-server-url")  # fmt: skip
    result = runner.lossless(server, prompt)
    state = runner_state(runner)
    if result.outcome != "identical" and state is not None:
        state.lossless_lines.append(result.message)
    if result.failed:
        pytest.fail(result.message, pytrace=False)
    return result


def runner_state(runner: Runner) -> SpecdecState | None:
    return _STATES.get(id(runner))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STASH_KEY, None)
    if state is not None and _is_xdist_controller(session.config):
        state.merged = merge_worker_results(state.results_path, state.started)
        if state.merged is not None:  # runs of a config may come from several workers
            atomic_write_json(state.results_path, annotate(state.merged))
            state.summary_lines += write_reports(session.config, state.merged)
        return
    if state is None or not state.used:
        return
    runner = state.runner
    try:  # judged against the history as it was, before this session is added to it
        judgements = runner.judge_all()
    except BaselineError as exc:
        state.summary_lines.append(f"verdicts: ERROR {exc}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    runner.verdicts = judgements
    try:
        runner.drifts()
    except HistoryUnavailable as exc:
        state.summary_lines.append(f"drift: not checked: {exc}")
    runner.write_results()
    state.summary_lines += verdict_lines(judgements)
    state.summary_lines += [f"{d['config']}: {d['message']}" for d in runner.drift]
    state.summary_lines += [f"diagnosis: {line}" for line in indistinguishable(runner.document())]
    if runner.options.update_baselines:
        state.summary_lines += ["baseline update:", *runner.update_baselines()]
    if state.worker_id is None:  # reports come from the process that sees every config
        state.summary_lines += write_reports(session.config, runner.document())
    found = failures(judgements, runner.options.fail_on, runner.options.provisional_gates)
    if "drift" in runner.options.fail_on:  # opt-in: --specdec-fail-on regressed,drift
        found += [f"{d['config']}: {d['message']}" for d in runner.drift]
    if not runner.options.provisional_gates:
        state.summary_lines += not_gating(judgements, runner.options.fail_on)
    if found and session.exitstatus == pytest.ExitCode.OK:
        state.summary_lines += ["FAILED after Holm across configs:", *found]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def write_reports(config: pytest.Config, doc: dict[str, Any]) -> list[str]:
    """Markdown (file and GitHub step summary), pytest-benchmark JSON, chart: as asked."""
    from pytest_specdec.report import export

    lines = []
    markdown: Path | None = config.getoption("--specdec-markdown")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(export.markdown_summary(doc) + "\n", encoding="utf-8")
        lines.append(f"markdown report: {markdown}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        lines.append(f"step summary: {export.write_step_summary(doc)}")
    bench: Path | None = config.getoption("--specdec-benchmark-json")
    if bench is not None:
        atomic_write_json(bench, export.benchmark_json(doc))
        lines.append(f"pytest-benchmark JSON: {bench}")
    chart: Path | None = config.getoption("--specdec-chart")
    if chart is not None:
        from pytest_specdec.report.charts import results_chart

        lines.append(f"chart: {results_chart(doc, chart)}")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STASH_KEY, None)
    if state is None:
        return
    if state.merged is not None:  # xdist controller: the workers' merged results
        doc = state.merged
        records = {c["name"]: ConfigRecord.from_dict(c) for c in doc["configs"]}
        prompts = list(doc["workload"]["prompts"])
        extra = [f"{v['config']}: {v['message']}" for v in doc["verdicts"]]
        lines = terminal_summary(records, prompts, str(state.results_path), rooflines(doc))
        lines += extra
    elif state.used:
        runner = state.runner
        prompts = [p.id for p in runner.workload.prompts]
        path = str(runner.options.results_path) if runner.options.results_path else None
        lines = terminal_summary(runner.records, prompts, path, rooflines(runner.document()))
        lines += [f"note: {n}" for n in runner.notes] + state.summary_lines
        if state.lossless_lines:
            lines += ["lossless (greedy output vs the target without speculation):"]
            lines += state.lossless_lines
    else:
        return
    if lines:
        terminalreporter.write_sep("=", "speculative decoding: output tok/s")
        for line in lines:
            terminalreporter.write_line(line)


def rooflines(doc: dict[str, Any]) -> dict[str, Any]:
    """The roofline entry of each config, as the results document carries it (annotated)."""
    return {c["name"]: c.get("roofline") for c in doc["configs"]}


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STASH_KEY, None)
    kill_all()
    if state is not None and state.used:
        state.runner.close()
