"""Helpers shared by the test modules (imported by name: tests/ is on sys.path)."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.engines.launch import engines_started_here
from pytest_specdec.verdict.stats import (
    DEFAULT_POLICY,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    against_history_sessions,
)

CACHE = cache_root()  # read before pytester points HOME at its temporary folder
SMOLLM2_GGUF = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"  # the PyPI package's
SGLANG_VERSION = "0.5.17"  # the default of ./scripts/install-sglang-parser
BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench(name: str) -> ModuleType:
    """The script bench/NAME.py as a module, loaded once from its path (bench/ stays off
    sys.path, where its scripts' plain names could shadow another module's)."""
    key = f"specdec_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None, f"no bench/{name}.py"
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before it runs: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[key]


def missing(what: str, fix: str = "./scripts/setup") -> None:
    """Skip with the reason; under CI a missing engine is a failure, never a silent skip."""
    message = f"{what}; run {fix}"
    if os.environ.get("CI"):
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message)


def against_history(
    new: Sequence[float], history: Sequence[SessionSummary], policy: VerdictPolicy = DEFAULT_POLICY
) -> Verdict:
    """One new session's runs (tok/s) against K past session summaries: the verdict engine's
    history test with one new session (``against_history_sessions``)."""
    return against_history_sessions([SessionSummary.from_values(new)], history, policy)


class Throttle:
    """A slowdown of known size on any machine: while the block runs, every engine that this
    process's runs start (found by ``engines_started_here``, whose command line holds
    ``needle``) is stopped (SIGSTOP) for ``1 - share`` of each ``period_s`` and let run
    (SIGCONT) for the rest. An engine then gets at most ``share`` of the wall clock, however
    fast the CPU is and whatever else runs beside it: the same kernels, the same drafts, the
    same accept lengths, fewer verify steps per second. Every engine is let run on exit."""

    def __init__(self, needle: str, share: float = 0.25, period_s: float = 0.04) -> None:
        self.needle, self.run_s = needle, share * period_s
        self.stop_s = period_s - self.run_s
        self.stopped: set[int] = set()  # every engine this throttle has stopped at least once
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Throttle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)
        self._signal(self.stopped, signal.SIGCONT)

    def _signal(self, pids: Iterable[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _loop(self) -> None:
        pids: list[int] = []
        while not self._done.is_set():
            self._signal(pids, signal.SIGSTOP)  # the look-up below runs while they are stopped
            started = time.monotonic()
            pids = engines_started_here(self.needle)
            self._signal(pids, signal.SIGSTOP)
            self.stopped.update(pids)
            time.sleep(max(0.0, self.stop_s - (time.monotonic() - started)))
            self._signal(pids, signal.SIGCONT)
            time.sleep(self.run_s)


PHASES = "sglang:forward_execution_seconds_total"


class FakeSGLang:
    """An SGLang chat endpoint whose /metrics counts verify calls, generated tokens, GPU time by
    phase (the device timer's counter), forward passes and running requests, as 0.5.17 names
    them. It keeps
    the paths asked for in order, whether the asking process's garbage collector was on at
    each chat request, and answers /freeze_gc with ``freeze_status``."""

    def __init__(self, freeze_status: int = 200) -> None:
        self.requests = 0
        self.freeze_status = freeze_status
        self.paths: list[str] = []
        self.collector_on: list[bool] = []  # gc.isenabled() at each chat request

    def page(self) -> str:
        n, labels = self.requests, 'engine_type="unified",model_name="m"'
        return "\n".join([
            "# TYPE sglang:spec_verify_calls_total counter",
            f"sglang:spec_verify_calls_total{{{labels}}} {2 * n}",
            f'sglang:generation_tokens_total{{{labels},is_streaming="true"}} {8 * n}',
            f'{PHASES}{{{labels},category="target_verify"}} {0.25 * n}',
            f'{PHASES}{{{labels},category="eagle_draft"}} {0.125 * n}',
            f'{PHASES}{{{labels},category="decode"}} 0.0',
            f'sglang:cuda_graph_passes_total{{{labels},mode="decode_cuda_graph"}} {2 * n}',
            f'sglang:cuda_graph_passes_total{{{labels},mode="prefill_cuda_graph"}} {n}',
            f'sglang:cuda_graph_passes_total{{{labels},mode="decode_none"}} 0.0',
            f"sglang:num_running_reqs{{{labels}}} 2",
            f"sglang:num_queue_reqs{{{labels}}} 0",
        ]) + "\n"  # fmt: skip

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path == "/health_generate":
            return httpx.Response(200, text="ok")
        if request.url.path == "/metrics":
            return httpx.Response(200, text=self.page())
        if request.url.path == "/freeze_gc" and request.method == "POST":
            text = "Garbage collection frozen.\n" if self.freeze_status == 200 else "Not Found"
            return httpx.Response(self.freeze_status, text=text)
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        self.requests += 1
        self.collector_on.append(gc.isenabled())
        body = "".join(
            f"data: {json.dumps(e)}\n\n"
            for e in ({"choices": [{"delta": {"content": "Hi there"}}]},
                      {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 8}})
        ) + "data: [DONE]\n\n"  # fmt: skip
        return httpx.Response(200, content=body.encode(),
                              headers={"content-type": "text/event-stream"})  # fmt: skip


def load_judged(
    run: Path, baselines: Path, stored: int | None = None, borrow: bool = True
) -> dict[str, Any]:
    """Each config's load levels of an H200 run judged again against the boots stored in
    ``baselines`` (the first ``stored`` of them, where given: what was stored before the run),
    a short history borrowing the spread of the other configs' files there (all their boots)
    unless ``borrow`` is False, Holm across them all: config -> clients -> level judgement."""
    from pytest_specdec.core.results import load_results
    from pytest_specdec.verdict.baselines import key_for, load_baseline, neighbours
    from pytest_specdec.verdict.load import adjust_load, judge_load_history

    doc, policy = load_results(run), VerdictPolicy()
    out = {}
    for config in doc["configs"]:
        baseline = load_baseline(
            baselines / f"{config['name']}--mb-smollm2-7-4b-s0-1-seed1-hf.json"
        )
        assert baseline is not None
        if stored is not None:
            baseline = replace(baseline, sessions=baseline.sessions[:stored])
        root = baselines.parent.parent  # <root>/<hardware>/<engine>/<config>--<model>.json
        nearby = neighbours(root, key_for(doc, config)) if borrow else []
        out[config["name"]] = judge_load_history(config, baseline, policy, lambda n=nearby: n)
    adjust_load(list(out.values()), policy)
    return {name: judged.levels for name, judged in out.items()}
