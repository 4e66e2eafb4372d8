"""``specdec bisect`` without its argument parser: read the candidates, resolve the config,
workload and engine as pytest does, resume the state, run the search, say what it found."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specdec.bisect.build import Builder, check_buildable
from pytest_specdec.bisect.candidates import BisectError, Candidate, endpoints, load_candidates
from pytest_specdec.bisect.live import LiveMeasurer, Setup
from pytest_specdec.bisect.run import FOUND, NONE, Conclusion, Search, bisect, conclude
from pytest_specdec.bisect.statefile import load_steps, save_steps
from pytest_specdec.bisect.step import StepRecord, step_plan
from pytest_specdec.bisect.summary import render, to_json
from pytest_specdec.core.configs import ConfigError, load_registry
from pytest_specdec.core.suitefile import default_suite_file, load_suite_settings
from pytest_specdec.core.workloads import WorkloadError, load_workload
from pytest_specdec.driver.boot import resolve_configs
from pytest_specdec.driver.plan import Planner
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.engines.container import DockerSettings
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.gpu.monitor import GpuMonitor, GpuSettings
from pytest_specdec.verdict.stats import VerdictPolicy

EXIT_FOUND_OR_NONE, EXIT_ERROR, EXIT_UNDECIDED = 0, 2, 3


@dataclass(frozen=True)
class Request:
    """Everything ``specdec bisect`` is asked (its flags)."""

    candidates: Path
    spec_config: str
    engine: str | None = None
    good: str | None = None
    bad: str | None = None
    out_dir: Path = Path("results/bisect")
    build_cmd: str | None = None
    suite_file: Path | None = None  # None: suites/specdec.toml here, else the built-in suite
    config_files: tuple[Path, ...] = ()
    workload: str | None = None
    runs: int = 5
    max_tokens: int = 256
    max_sessions: int = 8
    alpha: float = 0.01
    min_delta: float = 0.03
    launcher: str = "process"
    json: bool = False

    def fingerprint(self, candidates: list[Candidate], workload_sha: str) -> dict[str, Any]:
        """What a resumed bisect must share with the one that wrote the state file."""
        return {
            "candidates": [c.to_dict() for c in candidates], "spec_config": self.spec_config,
            "engine": self.engine, "good": self.good, "bad": self.bad, "workload": workload_sha,
            "runs": self.runs, "max_tokens": self.max_tokens, "max_sessions": self.max_sessions,
            "alpha": self.alpha, "min_delta": self.min_delta, "launcher": self.launcher,
        }  # fmt: skip


def _setup(req: Request, candidates: list[Candidate]) -> Setup:
    if req.suite_file is not None and not req.suite_file.is_file():
        raise BisectError(
            f"--suite-file {req.suite_file} is not a file: fix the path, or leave the option "
            "out to use suites/specdec.toml here (else the built-in suite)"
        )
    try:
        suite = load_suite_settings(req.suite_file or default_suite_file(Path.cwd()))
        engine = req.engine or suite.engine
        if engine == "openai":
            raise BisectError(
                "--engine openai measures a server someone else started; a bisect boots each "
                "candidate: use --engine llamacpp, sglang or vllm"
            )
        files = [*suite.files, *req.config_files]
        registry = load_registry(files, default_engine=engine)
        cfg = resolve_configs([req.spec_config], engine, registry, False, req.engine is None)[0]
        workload = load_workload(req.workload or suite.workload)
        first = candidates[0].server or str(candidates[0].ref)  # each step sets its own image
        docker = DockerSettings(image=first) if req.launcher == "docker" else None
    except (ConfigError, WorkloadError, LaunchError) as exc:
        raise BisectError(str(exc)) from None
    settings = RunSettings(
        engine=cfg.engine, config_names=(cfg.name,), runs=req.runs, max_tokens=req.max_tokens,
        results_path=None, docker=docker, alpha=req.alpha, min_delta=req.min_delta,
    )  # fmt: skip
    try:  # before any boot, so that a missing model is not blamed on the good endpoint
        Planner(settings, suite).models_for(cfg)
    except ConfigError as exc:
        raise BisectError(
            f"{exc}\n(a bisect takes its models from the suite file's [models.{cfg.engine}]: "
            f"{suite.path or 'the built-in suite'})"
        ) from None
    return Setup(settings, registry, suite, workload, req.out_dir)


def _result(req: Request, search: Search, done: Conclusion, steps: list[StepRecord],
            device: str) -> tuple[int, str]:  # fmt: skip
    code = EXIT_FOUND_OR_NONE if done.status in (FOUND, NONE) else EXIT_UNDECIDED
    if req.json:
        return code, json.dumps(to_json(search, done, steps, device), indent=2, sort_keys=True)
    return code, render(search, done, steps, device)


def run(req: Request) -> tuple[int, str]:
    """The exit status and what to print; BisectError for bad input or a failing endpoint."""
    candidates = load_candidates(req.candidates)
    good, bad = endpoints(candidates, req.good, req.bad)
    check_buildable(candidates[good : bad + 1], req.build_cmd)
    setup = _setup(req, candidates)
    search = Search(candidates, good, bad)
    fingerprint = req.fingerprint(candidates, setup.workload.sha256)
    state = req.out_dir / "state.json"
    steps = load_steps(state, fingerprint)
    plan = step_plan(VerdictPolicy(alpha=req.alpha, min_delta=req.min_delta), req.max_sessions)
    done = conclude(search, steps)
    gpu = GpuMonitor(GpuSettings(), None, 1)
    measurer = LiveMeasurer(setup, {c.name: c for c in candidates},
                            Builder(req.build_cmd, req.out_dir), gpu)  # fmt: skip
    try:
        done = done or bisect(
            search,
            measurer,
            plan,
            steps,
            lambda s: save_steps(state, fingerprint, s, measurer.device),
        )
    finally:
        gpu.close()
    return _result(req, search, done, steps, measurer.device)
