"""pytest face: options, fixtures and hooks. Thin: the work is done by :class:`Runner`."""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec import options as opt
from pytest_specdec.configs import ConfigError, SpecConfig, load_registry, split_names
from pytest_specdec.engines import EngineNotInstalled
from pytest_specdec.launch import LaunchError, kill_all
from pytest_specdec.report import terminal_summary
from pytest_specdec.runner import Runner, RunOptions, Server, resolve_configs
from pytest_specdec.suitefile import load_suite_settings
from pytest_specdec.workloads import Prompt, WorkloadError, load_workload

STASH_KEY = pytest.StashKey["SpecdecState"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdec", "speculative-decoding benchmarks (pytest-specdec)")
    add = group.addoption
    add(
        "--spec-config",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="spec config(s) to measure: names within --specdec-engine or engine:name; "
        "comma list or repeat (default: baseline)",
    )
    add(
        "--specdec-engine",
        type=opt.engine_name,
        default=None,
        help="engine whose configs the names resolve in (default: [suite] engine, else llamacpp); "
        "with --specdec-server-url, the API family (openai = any OpenAI-compatible server)",
    )
    add(
        "--specdec-config-file",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="extra TOML file(s) of [configs.NAME] tables (after suites/specdec.toml)",
    )
    add(
        "--specdec-suite-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="suite file with models and engine settings (default: suites/specdec.toml)",
    )
    add(
        "--specdec-model",
        default=None,
        metavar="PATH",
        help="target model (overrides the suite file)",
    )
    add(
        "--specdec-draft-model",
        default=None,
        metavar="PATH",
        help="draft model for every config that needs one (overrides the suite file)",
    )
    add(
        "--specdec-workload",
        default=None,
        metavar="NAME|PATH",
        help="prompt suite: a built-in name (seed, specbench, ...) or a JSONL file (default: seed)",
    )
    add(
        "--specdec-runs",
        type=opt.positive_int,
        default=5,
        metavar="N",
        help="measured runs per prompt (default: 5)",
    )
    add(
        "--specdec-max-tokens",
        type=opt.positive_int,
        default=256,
        metavar="N",
        help="output tokens per request (default: 256)",
    )
    add("--specdec-no-warmup", action="store_true", help="skip the warmup pass over every prompt")
    add(
        "--specdec-results",
        type=Path,
        default=Path("results/latest.json"),
        metavar="PATH",
        help="results JSON (default: results/latest.json)",
    )
    add(
        "--specdec-log-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="engine logs (default: <results dir>/logs)",
    )
    add(
        "--specdec-server-url",
        type=opt.server_url,
        default=None,
        metavar="URL",
        help="measure this running server instead of booting one; --spec-config is then a label",
    )
    add(
        "--specdec-startup-timeout",
        type=opt.positive_float,
        default=None,
        metavar="S",
        help="seconds to wait for an engine to become ready (default: engine setting, 600)",
    )
    add(
        "--specdec-request-timeout",
        type=opt.positive_float,
        default=300.0,
        metavar="S",
        help="seconds one request may take before it is recorded as failed (default: 300)",
    )
    add(
        "--specdec-api-key",
        default=None,
        metavar="KEY",
        help="API key for the server (default: $SPECDEC_API_KEY); never written to results or logs",
    )


class SpecdecState:
    """Per-pytest-process state: validated options now, the runner once a test needs it."""

    def __init__(self, config: pytest.Config) -> None:
        getopt = config.getoption
        root = Path(str(config.rootpath))
        suite_path = getopt("--specdec-suite-file") or root / "suites" / "specdec.toml"
        try:
            self.suite = load_suite_settings(suite_path)
            files = [p for p in (suite_path,) if p.exists()] + list(getopt("--specdec-config-file"))
            engine = getopt("--specdec-engine") or self.suite.engine
            self.registry = load_registry(
                files, default_engine=engine if engine != "openai" else None
            )
            names = split_names(getopt("--spec-config")) or ["baseline"]
            url = getopt("--specdec-server-url")
            self.configs: list[SpecConfig] = resolve_configs(
                names, engine, self.registry, url is not None
            )
            self.workload = load_workload(getopt("--specdec-workload") or self.suite.workload)
        except (ConfigError, WorkloadError) as exc:
            raise pytest.UsageError(str(exc)) from None
        results: Path = getopt("--specdec-results")
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
        )
        self._runner: Runner | None = None

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(self.options, self.registry, self.suite, self.workload)
        return self._runner

    @property
    def used(self) -> bool:
        return self._runner is not None


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[STASH_KEY] = SpecdecState(config)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # SIGTERM unwinds like Ctrl-C: fixtures tear down, engines stop, results are written.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = metafunc.config.stash[STASH_KEY]
    if "specdec_config" in metafunc.fixturenames:
        metafunc.parametrize(
            "specdec_config",
            state.configs,
            indirect=True,
            scope="session",
            ids=[c.name for c in state.configs],
        )
    if "specdec_prompt" in metafunc.fixturenames:
        prompts = state.workload.prompts
        metafunc.parametrize("specdec_prompt", prompts, ids=[p.id for p in prompts])


@pytest.fixture(scope="session")
def specdec(request: pytest.FixtureRequest) -> Runner:
    """The session's runner: measure(server, prompt), options, records."""
    return request.config.stash[STASH_KEY].runner


@pytest.fixture(scope="session")
def specdec_config(request: pytest.FixtureRequest) -> SpecConfig:
    """The spec config under test (parametrized over --spec-config)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def specdec_server(specdec: Runner, specdec_config: SpecConfig) -> Generator[Server, None, None]:
    """One server per config, booted once for all of that config's tests, stopped after them."""
    failure = None
    try:
        server = specdec.boot(specdec_config)
    except (LaunchError, ConfigError, EngineNotInstalled) as exc:
        failure = f"[{specdec_config.name}] {exc}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    try:
        yield server
    finally:
        specdec.stop(server)


@pytest.fixture
def specdec_prompt(request: pytest.FixtureRequest) -> Prompt:
    """The prompt under test (parametrized over the workload)."""
    return request.param  # type: ignore[no-any-return]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STASH_KEY, None)
    if state is None or not state.used:
        return
    runner = state.runner
    prompts = [p.id for p in runner.workload.prompts]
    path = str(runner.options.results_path) if runner.options.results_path else None
    lines = terminal_summary(runner.records, prompts, path)
    if lines:
        terminalreporter.write_sep("=", "speculative decoding: output tok/s")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STASH_KEY, None)
    kill_all()
    if state is not None and state.used:
        state.runner.close()
