"""pytest face: options, fixtures and hooks. Thin: the work is done by :class:`Runner`."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec import options as opt
from pytest_specdec.core.configs import ConfigError, SpecConfig
from pytest_specdec.core.workers import GROUPS_KEY, read_groups, write_groups
from pytest_specdec.core.workloads import Prompt
from pytest_specdec.driver.runner import Runner, Server
from pytest_specdec.engines import EngineNotInstalled
from pytest_specdec.engines.launch import LaunchError, kill_all, lineage
from pytest_specdec.finish import finish_run, summary_lines
from pytest_specdec.measure.lossless import LosslessResult
from pytest_specdec.report.export import load_properties, verdict_properties
from pytest_specdec.scheduling import make_scheduler
from pytest_specdec.state import STASH_KEY, SpecdecState
from pytest_specdec.verdict.baselines import BaselineError
from pytest_specdec.verdict.gate import crossover_failures, gating
from pytest_specdec.verdict.judge import (
    LOAD_ONLY,
    MISMATCH,
    NO_BASELINE,
    PARTIAL,
    UNJUDGEABLE,
    Judgement,
)
from pytest_specdec.verdict.load import NO_DATA
from pytest_specdec.verdict.load import UNJUDGEABLE as LOAD_UNJUDGEABLE


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_specdec import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdec", "speculative-decoding benchmarks (pytest-specdec)")
    for flag, kwargs in opt.PYTEST_OPTIONS:
        group.addoption(flag, **kwargs)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "specdec_lossless: the test compares outputs with the non-speculative "
        "reference, which is then made before the first config boots",
    )  # fmt: skip
    config.addinivalue_line(
        "markers", "specdec_load: the test measures or judges load levels; it runs after the "
        "one-request tests of the same server session",
    )  # fmt: skip
    lineage()  # exported before xdist workers or nested runs start: their engines count as ours
    state = SpecdecState(config)
    config.stash[STASH_KEY] = state
    config.pluginmanager.register(SpecdecPlugin(state), "specdec-run")
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # SIGTERM unwinds like Ctrl-C: fixtures tear down, engines stop, results are written.
        # (Only the main thread may set a handler: pytest-xdist before 3.6 runs its workers'
        # pytest in another thread, where the controller's own handling stands for them.)
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)


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
        found = slots(state.configs, state.settings.sessions)
        # The plugin's scheduler keeps a config's tests on one worker (scheduling.py); the mark
        # is for xdist's own loadgroup where another scheduler wins.
        params = [
            pytest.param(s, id=s.id, marks=pytest.mark.xdist_group(state.group(s.config.name)))
            for s in found
        ]
        metafunc.parametrize("specdec_slot", params, indirect=True, scope="session")
    if "specdec_clients" in metafunc.fixturenames:
        levels = state.settings.concurrency
        if not levels:  # load levels are opt-in: one skipped test says how to ask for them
            marks = pytest.mark.skip(
                reason="no load levels asked for: pass --specdec-concurrency 1,8,32 or set "
                "[suite] concurrency in the suite file"
            )
            metafunc.parametrize("specdec_clients", [pytest.param(0, marks=marks)], ids=["off"])
        else:
            metafunc.parametrize("specdec_clients", levels, ids=[f"c{n}" for n in levels])
    if "specdec_prompt" in metafunc.fixturenames:
        prompts = state.workload.prompts
        metafunc.parametrize("specdec_prompt", prompts, ids=[p.id for p in prompts])


@pytest.fixture(scope="session")
def specdec(request: pytest.FixtureRequest) -> Runner:
    """The run's runner: measure(server, prompt), settings, records."""
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
        reason = specdec.skip_reason(cfg.name)
        if reason is not None:
            pytest.skip(reason)
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


def _judged(runner: Runner, name: str) -> Judgement:
    """The config's verdicts for its gate test; a baseline that cannot be read fails it, and
    so does a config none of whose sessions booted (the boot's error)."""
    rec = runner.records.get(name)
    if rec is not None and rec.error and not rec.measured() and not rec.extra.get("load"):
        pytest.fail(f"{name}: nothing measured to judge: {rec.error}", pytrace=False)
    error = None
    try:
        return runner.judge_for_gate(name)
    except BaselineError as exc:
        error = str(exc)
    pytest.fail(error, pytrace=False)


def check_judgement(
    runner: Runner, name: str, record: Callable[[str, object], None] | None = None
) -> Judgement:
    """The per-config gate as a test outcome: skip without a baseline, fail on a failing verdict
    (tok/s or accept length, as --specdec-fail-on says). ``record`` (pytest's
    ``record_property``) gets both verdicts first, so that JUnit has them on a failure too."""
    judgement = _judged(runner, name)
    if judgement.status == NO_BASELINE:
        if runner.settings.update_baselines:
            pytest.skip(f"{judgement.message.split(';')[0]}; this run creates it")
        pytest.skip(judgement.message)
    if judgement.status in (PARTIAL, LOAD_ONLY):
        pytest.skip(judgement.message)
    if judgement.status in (MISMATCH, UNJUDGEABLE):
        pytest.fail(judgement.message, pytrace=False)
    if record is not None:
        for prop, value in verdict_properties(judgement):
            record(prop, value)
    # the one-request verdicts only: the load levels' gate is test_load_verdict's, after them
    found = gating(judgement, runner.settings.fail_on, runner.settings.provisional_gates,
                   load=False)  # fmt: skip
    if found:
        pytest.fail("\n".join(found + judgement.notes), pytrace=False)
    return judgement


def check_load(
    runner: Runner, name: str, record: Callable[[str, object], None] | None = None
) -> Judgement:
    """The per-config gate of the load levels as a test outcome: fail on a failed round, a
    baseline of another key or a failing level verdict (``--specdec-fail-on``, load family) or
    lost crossover (``crossover``); skip where nothing could be judged (the speedup curve and
    its crossover are reported whatever the test's outcome)."""
    judgement = _judged(runner, name)
    load = judgement.load
    if judgement.status == MISMATCH:
        pytest.fail(judgement.message, pytrace=False)
    if load is None or load.status == NO_DATA:
        pytest.skip(f"{name}: {load.message if load else 'no load levels measured'}")
    if load.status == LOAD_UNJUDGEABLE:
        pytest.fail(f"{name}: {load.message}", pytrace=False)
    if record is not None:
        for prop, value in load_properties(judgement):
            record(prop, value)
    fail_on = runner.settings.fail_on
    found = gating(judgement, fail_on, runner.settings.provisional_gates, load=True)
    found += crossover_failures([judgement], fail_on, runner.settings.provisional_gates)
    if found:
        pytest.fail("\n".join(found + load.notes), pytrace=False)
    if load.status == NO_BASELINE and load.crossover is None:
        first = load.message.split(";")[0]
        pytest.skip(f"{name}: {first}; this run creates it" if runner.settings.update_baselines
                    else f"{name}: {load.message}")  # fmt: skip
    return judgement


def check_lossless(runner: Runner, server: Server, prompt: Prompt) -> LosslessResult:
    """Compare with the reference; fail on an early divergence, list a late one (a near-tie
    flip) in the summary. Skipped for a server given by URL: no reference can be booted."""
    if runner.settings.server_url:
        pytest.skip("lossless check needs the target booted without speculation as reference; "
                    "not possible with --specdec-server-url")  # fmt: skip
    if runner.settings.temperature > 0:
        t = runner.settings.temperature
        pytest.skip(f"lossless check: exact equality with the target's greedy output does not "
                    f"apply when sampling (--specdec-temperature {t:g})")  # fmt: skip
    result = runner.lossless(server, prompt)
    if result.outcome != "identical":
        runner.lossless_lines.append(result.message)
    if result.failed:
        pytest.fail(result.message, pytrace=False)
    return result


class SpecdecPlugin:
    """The run's owner, registered as a pytest plugin (as xdist's ``DSession`` or
    pytest-benchmark's ``BenchmarkSession`` are): it holds the :class:`SpecdecState` (flags
    parsed and configs resolved once, the runner) and implements the hooks of the run's
    collection and end. The fixtures reach the same state through ``config.stash``."""

    def __init__(self, state: SpecdecState) -> None:
        self.state = state
        self.groups_dir: Path | None = None  # the xdist controller's folder of group maps

    def pytest_report_header(self) -> list[str]:
        """How the run resolved what it was asked for (e.g. a config only another engine
        has), and the engine adapters that failed to import, which it does not use (the
        terminal summary repeats those: the header is not shown with -q)."""
        return [f"specdec: {note}" for note in self.state.notes + self.state.broken_adapters]

    @pytest.hookimpl(trylast=True)  # after pytest has grouped the tests by server session
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Per-config tests (no prompt or load-level parameter, e.g. the verdicts) run once,
        after the config's last server session; their copies for earlier ones are deselected.
        In each server session the load levels come last, so that the one-request
        measurements never follow a server that thousands of requests have just filled."""
        self.state.needs_reference = any(i.get_closest_marker("specdec_lossless") for i in items)
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            callspec = getattr(item, "callspec", None)
            slot = _slot_of(item)
            per_session = ("specdec_prompt", "specdec_clients")
            per_config = callspec is not None and not any(p in callspec.params for p in per_session)
            last = not isinstance(slot, Slot) or slot.last
            (drop if per_config and not last else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = load_last(keep)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """An xdist worker writes each test's config group, from the test's parameters, before
        xdist reports the collection to the controller (scheduling.py)."""
        folder = (getattr(session.config, "workerinput", None) or {}).get(GROUPS_KEY)
        if folder is not None and self.state.worker_id is not None:
            groups = {
                item.nodeid: self.state.group(slot.config.name)
                for item in session.items
                if isinstance(slot := _slot_of(item), Slot)
            }
            write_groups(Path(folder), self.state.worker_id, groups)

    # The xdist controller: the scheduler, and its account of its workers (xdist's hooks).
    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return make_scheduler(config, log, self.state.workers)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.groups_dir is None:
            self.groups_dir = Path(tempfile.mkdtemp(prefix="specdec-groups-"))
        node.workerinput[GROUPS_KEY] = str(self.groups_dir)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        worker = _worker_id(node)
        found = read_groups(self.groups_dir, worker) if self.groups_dir and worker else {}
        self.state.workers.collected(ids, found)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # set on the controller's copy of a worker report
        if node is not None and report.when == "teardown":
            self.state.workers.finished(report.nodeid, _worker_id(node))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.state.workers.worker_down(_worker_id(node) or "?", error)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        self.state.workers.crashed_while(_worker_id(report.node) or "?", crashitem)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        finish_run(session)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        lines = summary_lines(config)
        if lines:
            terminalreporter.write_sep("=", "speculative decoding: output tok/s")
            for line in lines:
                terminalreporter.write_line(line)

    def pytest_unconfigure(self) -> None:
        kill_all()
        if self.state.used:
            self.state.runner.close()
        if self.groups_dir is not None:
            shutil.rmtree(self.groups_dir, ignore_errors=True)


def load_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """Within each run of tests of one server session, those marked ``specdec_load`` after the
    others (each group keeps its order)."""
    out: list[pytest.Item] = []
    run: list[pytest.Item] = []
    for item in [*items, None]:
        if run and (item is None or _slot_of(item) != _slot_of(run[0])):
            out += [i for i in run if not i.get_closest_marker("specdec_load")]
            out += [i for i in run if i.get_closest_marker("specdec_load")]
            run = []
        if item is not None:
            run.append(item)
    return out


def _slot_of(item: pytest.Item) -> object:
    """The ``specdec_slot`` parameter of a test (None for a test that has none)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("specdec_slot") if callspec else None


def _worker_id(node: Any) -> str | None:
    """An xdist worker's id (``gw0``) from its controller-side node."""
    workerinput = getattr(node, "workerinput", None) or {}
    gateway = getattr(node, "gateway", None)
    return workerinput.get("workerid") or getattr(gateway, "id", None)
