"""What one run is asked to do: engine, configs, runs per prompt, where results and
baselines live, how verdicts gate. Built from the pytest flags or the CLI, read by the
runner and its steps; it holds values only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specdec.engines.container import DockerSettings
from pytest_specdec.verdict.planning import sequential_plan
from pytest_specdec.verdict.stats import DEFAULT_POLICY, VerdictPolicy

DEFAULT_ROUNDS = 5  # measured rounds per load level, unless the option or suite file says


PLAN_HISTORY = 40  # the history length the adaptive plan's per-look alpha is calibrated for


@dataclass(frozen=True)
class RunSettings:
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
    same_machine: str = "auto"  # which stored sessions judge the night (verdict/machines.py)
    update_baselines: bool = False
    fail_on: tuple[str, ...] = ("regressed",)
    provisional_gates: bool = True  # --specdec-provisional gate|report
    alpha: float = DEFAULT_POLICY.alpha
    min_delta: float = DEFAULT_POLICY.min_delta
    accept_delta: float = DEFAULT_POLICY.accept_delta
    temperature: float = 0.0  # 0: greedy
    top_p: float | None = None
    seed: int | None = None  # request i of a prompt is sent seed + i
    ignore_eos: bool = False  # decode max_tokens tokens per request, past the answer's end
    score: str = "e2e"  # what the verdicts judge: verdict/sessions.SCORES
    lint: bool = True
    sessions: int = 1
    adaptive: bool = False
    max_minutes: float | None = None  # a config's machine time over its sessions (stopping.py)
    target_mde: float | None = None  # adaptive: a verdict of no change needs this MDE or less
    lossless_fail_before: int = 32
    concurrency: tuple[
        int, ...
    ] = ()  # load levels: concurrent clients (suites/test_concurrency.py)
    rounds: int = DEFAULT_ROUNDS  # measured rounds per load level
    cpus: tuple[int, ...] | None = None  # the engine's cores (--specdec-cpus, or the xdist split)
    docker: DockerSettings | None = None  # --specdec-launcher docker
    docker_binary: str | None = None
    hardware_fields: tuple[tuple[str, str], ...] = ()  # plugins' extra hardware-key fields

    @property
    def stops_early(self) -> bool:
        """Adaptive sessions with something to stop: more than one session a config."""
        return self.adaptive and self.sessions > 1

    @property
    def policy(self) -> VerdictPolicy:
        """The verdict policy; with adaptive sessions, the per-look alpha of a calibrated
        group-sequential plan (looks after each session), calibrated for a history of 40
        sessions: a shorter history's looks are more alike and would allow a larger per-look
        alpha, so this one keeps the false-alarm rate at alpha or below for every history up to
        40 sessions (docs/statistics.md, "Sequential plans")."""
        base = VerdictPolicy(
            alpha=self.alpha, min_delta=self.min_delta, accept_delta=self.accept_delta
        )
        if self.stops_early:
            looks = tuple(range(1, self.sessions + 1))
            return sequential_plan(
                base, looks, kind="history", k=PLAN_HISTORY, trials=50_000
            ).policy(base)
        return base

    def request_seed(self, run: int) -> int | None:
        """The seed of request ``run`` of a prompt: --specdec-seed + run (None: unseeded)."""
        return None if self.seed is None else self.seed + run

    def public(self) -> dict[str, Any]:
        out = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}
        out["api_key"] = "***" if self.api_key else None
        out["config_names"] = list(self.config_names)
        out["fail_on"] = list(self.fail_on)
        out["hardware_fields"] = dict(self.hardware_fields)
        out["docker"] = (
            None
            if self.docker is None
            else {"image": self.docker.image, "network": self.docker.network}
        )
        return out
