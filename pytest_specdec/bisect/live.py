"""The bisect's measurer on a real machine: each candidate of a step gets its own session
steps (:class:`pytest_specdec.driver.steps.Steps`) with the candidate's server, env and args,
one server session per call (boot, warm up, every prompt ``runs`` times, stop); a comparison
is :func:`pytest_specdec.verdict.judge.judge_reference` on one document holding both."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_specdec.bisect.build import Builder
from pytest_specdec.bisect.candidates import Candidate
from pytest_specdec.bisect.step import BootFailed
from pytest_specdec.core.configs import ConfigError, Registry
from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.core.workloads import Workload
from pytest_specdec.driver.settings import RunSettings
from pytest_specdec.driver.steps import Steps
from pytest_specdec.engines import EngineNotInstalled
from pytest_specdec.engines.launch import LaunchError
from pytest_specdec.gpu.monitor import GpuMonitor
from pytest_specdec.verdict.judge import Judgement, judge_reference
from pytest_specdec.verdict.sessions import suite_session_logs
from pytest_specdec.verdict.stats import VerdictPolicy

BOOT_ERRORS = (LaunchError, ConfigError, EngineNotInstalled)


@dataclass(frozen=True)
class Setup:
    """What every session of the bisect shares: one config, workload, runs, max tokens."""

    settings: RunSettings  # engine, config name, runs, max tokens, launcher
    registry: Registry
    suite: SuiteSettings
    workload: Workload
    out_dir: Path


def candidate_suite(
    suite: SuiteSettings, engine: str, cand: Candidate, server: str | None
) -> SuiteSettings:
    """The suite settings with ``cand``'s server (llama-server or vllm binary, SGLang's Python;
    None with the Docker launcher, whose image is the server), its env added and its args
    appended to the engine's."""
    settings = suite.engine_settings(engine)
    if server is not None and engine == "sglang":
        settings = replace(settings, python=server)
    elif server is not None:
        settings = replace(settings, binary=server)
    settings = replace(
        settings,
        extra_args=(*settings.extra_args, *cand.args),
        env={**settings.env, **cand.env},
    )
    return replace(suite, engines={**suite.engines, engine: settings})


class LiveMeasurer:
    """Runs the sessions of each step on this machine and judges them."""

    def __init__(
        self, setup: Setup, candidates: Mapping[str, Candidate], builder: Builder,
        gpu: GpuMonitor | None = None,
    ) -> None:  # fmt: skip
        self.setup = setup
        self.candidates = candidates
        self.builder = builder
        self.gpu = gpu
        self.index = 0
        self.steps: dict[str, Steps | None] = {}
        self._build_failures: dict[str, str] = {}

    @property
    def device(self) -> str:
        return "GPU" if self.gpu is not None and self.gpu.available else "CPU"

    def start_step(self, index: int, names: Sequence[str]) -> None:
        self.index, self.steps = index, {}
        for name in names:
            self.steps[name] = self._steps_for(self.candidates[name])

    def _steps_for(self, cand: Candidate) -> Steps | None:
        """Session steps for ``cand``; None when its server cannot be made (build failed)."""
        try:
            server = self.builder.server_for(cand)
        except BootFailed as exc:
            self._build_failures[cand.name] = str(exc)
            return None
        opts = self.setup.settings
        docker = opts.docker
        if docker is not None:
            docker = replace(docker, image=server)
        engine_server = server if docker is None else None
        suite = candidate_suite(self.setup.suite, opts.engine, cand, engine_server)
        settings = replace(
            opts, results_path=None, docker=docker,
            log_dir=self.setup.out_dir / "logs" / f"step-{self.index}" / cand.name,
        )  # fmt: skip
        return Steps(settings, self.setup.registry, suite, self.setup.workload, gpu=self.gpu)

    def session(self, name: str) -> float:
        steps = self.steps[name]
        if steps is None:
            raise BootFailed(self._build_failures.get(name, f"{name}: no server"))
        cfg = steps.configs[0]
        record = steps.records.get(cfg.name)
        number = 1 + len((record.extra.get("sessions") or []) if record else [])
        start = time.perf_counter()
        try:
            server = steps.boot(cfg, number)
        except BOOT_ERRORS as exc:
            raise BootFailed(str(exc)) from None
        try:
            for prompt in steps.workload.prompts:
                steps.measure(server, prompt)
        except BOOT_ERRORS as exc:  # booted, but not made ready (a refused freeze_gc)
            raise BootFailed(str(exc)) from None
        finally:
            steps.stop(server)
        return time.perf_counter() - start

    def document(self) -> dict[str, Any]:
        """One results document with every candidate of the step as a config of its name."""
        docs = {name: s.document() for name, s in self.steps.items() if s is not None}
        base = next(iter(docs.values()))
        base["configs"] = [
            {**doc["configs"][0], "name": name} for name, doc in docs.items() if doc["configs"]
        ]
        base["bisect_step"] = self.index
        return base

    def judge(self, name: str, good: str, policy: VerdictPolicy) -> Judgement:
        doc = self.document()
        by_name = {c["name"]: c for c in doc["configs"]}
        return judge_reference(doc, by_name[name], by_name[good], policy)

    def session_logs(self, name: str) -> list[float]:
        """From ``name``'s own record: the step's whole document is not needed for it."""
        steps = self.steps.get(name)
        record = steps.records.get(steps.configs[0].name) if steps is not None else None
        if steps is None or record is None:
            return []
        prompts = [p.id for p in steps.workload.prompts]
        return suite_session_logs(record.to_dict(), prompts, steps.settings.score)

    def end_step(self) -> None:
        if any(s is not None for s in self.steps.values()):
            atomic_write_json(self.setup.out_dir / f"step-{self.index}.json", self.document())
        for steps in self.steps.values():
            if steps is not None:
                steps.loop.close()
                steps.planner.close()
        self.steps = {}
