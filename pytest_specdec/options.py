"""The plugin's command-line options (``pytest --help``, "specdec" group), defined once.

Values are parsed by core/values.py (and ``gpu_list`` here); each parser raises
``argparse.ArgumentTypeError`` naming the value and the fix, which pytest turns into a usage
error naming the flag.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_specdec.core.values import (
    SCORES,
    cpu_list,
    engine_args,
    engine_name,
    fail_on,
    fraction,
    int_list,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
    rounds,
    server_url,
    temperature,
    top_p,
)
from pytest_specdec.driver.settings import DEFAULT_ROUNDS
from pytest_specdec.verdict.machines import SAME_MACHINE
from pytest_specdec.verdict.stats import DEFAULT_POLICY


def gpu_list(value: str) -> tuple[int, ...]:
    from pytest_specdec.gpu.nvml import GpuSelectionError, parse_gpu_list

    try:
        return tuple(parse_gpu_list(value))
    except (GpuSelectionError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Default verdict thresholds: the calibrated VerdictPolicy's (docs/statistics.md), shown in --help.
DEFAULT_ALPHA = DEFAULT_POLICY.alpha
DEFAULT_MIN_DELTA = DEFAULT_POLICY.min_delta

# Acceptance and sampling: the accept-length verdict's δ and the sampling settings.
ACCEPTANCE_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-accept-delta",
     dict(type=fraction, default=DEFAULT_POLICY.accept_delta, metavar="D",
          help="smallest change in accept length that counts (fraction); the threshold used "
          f"is max(D, 2 x between-session CV) (default: {DEFAULT_POLICY.accept_delta})")),
    ("--specdec-temperature",
     dict(type=temperature, default=0.0, metavar="T",
          help="sampling temperature of every measured request (default: 0, greedy); above "
          "0 the lossless check does not apply and baselines are kept per sampling setting")),
    ("--specdec-top-p",
     dict(type=top_p, default=None, metavar="P",
          help="nucleus sampling mass with --specdec-temperature (default: the engine's)")),
    ("--specdec-seed",
     dict(type=non_negative_int, default=None, metavar="N",
          help="sampling seed: request i of a prompt is sent seed N+i (reproducible per "
          "night where the engine honours seeds; default: none, the engine draws)")),
]  # fmt: skip

# The workload: prompts, how many runs of each, how long.
WORKLOAD_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-workload",
     dict(default=None, metavar="NAME|PATH",
          help="prompt suite: a built-in name (seed, specbench, ...) or a JSONL file "
          "(default: [suite] workload, else seed)")),
    ("--specdec-runs",
     dict(type=positive_int, default=5, metavar="N", help="measured runs per prompt (default: 5)")),
    ("--specdec-max-tokens",
     dict(type=positive_int, default=256, metavar="N",
          help="output tokens per request at most (default: 256); a prompt whose outputs end "
          "before half of it is named and left out of the decode score")),
    ("--specdec-ignore-eos",
     dict(action="store_true",
          help="decode exactly --specdec-max-tokens tokens per request, past the end of the "
          "answer (ignore_eos; for engines that honour it: llama.cpp, SGLang, vLLM); a suite "
          "file turns it on for its runs with [suite] ignore_eos = true")),
    ("--specdec-score",
     dict(choices=SCORES, default=None,
          help="what the verdicts judge: e2e, each request's output tok/s (time to first token "
          "included; the default), or decode, its decode tok/s (1 / TPOT); a suite file sets it "
          "with [suite] score; kept in the baseline key")),
    ("--specdec-no-warmup",
     dict(action="store_true", help="skip the warmup pass over every prompt")),
]  # fmt: skip

# The machine: the engine's cores (xdist workers split a CPU host's), whose sessions judge it.
HOST_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-cpus",
     dict(type=cpu_list, default=None, metavar="LIST",
          help="pin the engine to these cores (e.g. 0 or 0-3) with one thread each; under "
          "pytest-xdist they are split between the workers, as a CPU host's cores are by "
          "default (default: no pinning)")),
    ("--specdec-same-machine",
     dict(choices=SAME_MACHINE, default="auto",
          help="stored sessions that judge: auto (default): tonight's machine's (GPU UUIDs) "
          "once 5 are stored beside others', else all; always: only those; never: all")),
]  # fmt: skip

# How long an engine may take to boot and a request to answer.
TIMEOUT_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-startup-timeout",
     dict(type=positive_float, default=None, metavar="S",
          help="seconds to wait for an engine to become ready (default: engine setting, 600)")),
    ("--specdec-request-timeout",
     dict(type=positive_float, default=300.0, metavar="S",
          help="seconds one request may take before it is recorded as failed (default: 300)")),
]  # fmt: skip

# Server sessions: how many, and when a config's further ones are skipped (driver/stopping.py).
SESSION_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-sessions",
     dict(type=positive_int, default=1, metavar="N",
          help="server sessions per config, interleaved A B A B (default: 1); sessions are "
          "the unit of replication, so several resolve smaller changes")),
    ("--specdec-adaptive",
     dict(action="store_true",
          help="with --specdec-sessions N: skip a config's further sessions once its verdicts "
          "are decided: the one-request verdict and every load level's (the plain config of "
          "speedup curves runs on while a config whose curve it is does), or have no baseline "
          "in a run that stores none")),
    ("--specdec-max-minutes",
     dict(type=positive_float, default=None, metavar="M",
          help="with --specdec-sessions N: skip a config's session that would take its "
          "sessions' machine time (boots included, as recorded) past M minutes; not with "
          "--specdec-server-url")),
    ("--specdec-target-mde",
     dict(type=fraction, default=None, metavar="F",
          help="with --specdec-adaptive: a verdict of no change is decided only once its MDE "
          "is F or less (e.g. 0.05), a change found at any MDE")),
]  # fmt: skip

# Load levels: concurrent closed-loop clients, measured in rounds (suites/test_concurrency.py).
LOAD_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-concurrency",
     dict(type=int_list, default=None, metavar="N,N,...",
          help="load levels: concurrent closed-loop clients, each covering the workload once "
          "per round (suites/test_concurrency.py; skipped unless given here or as [suite] "
          "concurrency); each level gets a verdict; the engine needs as many parallel slots "
          "(llama.cpp -np, SGLang --max-running-requests), e.g. 1,8,32")),
    ("--specdec-rounds",
     dict(type=rounds, default=None, metavar="N",
          help=f"measured rounds per load level (default: [suite] rounds, else {DEFAULT_ROUNDS})")),
]  # fmt: skip

# Reports beside the results file.
REPORT_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--specdec-markdown",
     dict(type=Path, default=None, metavar="PATH",
          help="write the Markdown report here (it is also appended to $GITHUB_STEP_SUMMARY "
          "when that is set)")),
    ("--specdec-benchmark-json",
     dict(type=Path, default=None, metavar="PATH",
          help="write a pytest-benchmark-compatible JSON (one benchmark per config x prompt)")),
    ("--specdec-chart",
     dict(type=Path, default=None, metavar="PATH.png",
          help="write a PNG chart: configs x prompts with 95%% CI bars (needs matplotlib)")),
]  # fmt: skip

# (flag, argparse keyword arguments): the plugin's options, defined once.
PYTEST_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    (
        "--spec-config",
        dict(
            action="append",
            default=[],
            metavar="NAME[,NAME]",
            help="spec config(s) to measure: names within --specdec-engine or engine:name; "
            "comma list or repeat (default: baseline)",
        ),
    ),
    (
        "--specdec-engine",
        dict(
            type=engine_name,
            default=None,
            help="engine the names resolve in (default: [suite] engine, else llamacpp); with "
            "--specdec-server-url, the API family (openai = any OpenAI-compatible server)",
        ),
    ),
    (
        "--specdec-config-file",
        dict(
            action="append",
            default=[],
            type=Path,
            metavar="PATH",
            help="extra TOML file(s) of [configs.NAME] tables (after suites/specdec.toml)",
        ),
    ),
    (
        "--specdec-suite-file",
        dict(
            type=Path,
            default=None,
            metavar="PATH",
            help="suite file with models and engine settings (default: suites/specdec.toml)",
        ),
    ),
    (
        "--specdec-model",
        dict(default=None, metavar="PATH", help="target model (overrides the suite file)"),
    ),
    (
        "--specdec-draft-model",
        dict(
            default=None,
            metavar="PATH",
            help="draft model for every config that needs one (overrides the suite file)",
        ),
    ),
    *SESSION_OPTIONS,
    (
        "--specdec-results",
        dict(
            type=Path,
            default=Path("results/latest.json"),
            metavar="PATH",
            help="results JSON (default: results/latest.json)",
        ),
    ),
    (
        "--specdec-log-dir",
        dict(
            type=Path, default=None, metavar="DIR", help="engine logs (default: <results dir>/logs)"
        ),
    ),
    (
        "--specdec-server-url",
        dict(
            type=server_url,
            default=None,
            metavar="URL",
            help="measure this running server instead of booting one; --spec-config is a label",
        ),
    ),
    (
        "--specdec-engine-args",
        dict(
            type=engine_args,
            default=(),
            metavar="'ARGS'",
            help="more engine flags for every config, after the suite's extra_args and before "
            "a config's own args (a flag given twice: the config's wins), shell-quoted, with '=' "
            "(--specdec-engine-args='--attention-backend triton'); part of the baseline key",
        ),
    ),
    (
        "--specdec-no-lint",
        dict(
            action="store_true",
            help="do not check config flags against the installed engine before booting, "
            "nor choose between a suite's interfaces (the first is booted as written)",
        ),
    ),
    *TIMEOUT_OPTIONS,
    (
        "--specdec-api-key",
        dict(
            default=None,
            metavar="KEY",
            help="API key for the server (default: $SPECDEC_API_KEY); never written anywhere",
        ),
    ),
    (
        "--specdec-baseline-dir",
        dict(
            type=Path,
            default=None,
            metavar="DIR",
            help="baseline store (default: [suite] baseline_dir, else baselines/ in the rootdir)",
        ),
    ),
    (
        "--specdec-update-baselines",
        dict(
            action="store_true",
            help="append this session to each config's baseline history (changes are printed)",
        ),
    ),
    (
        "--specdec-allow-mismatch",
        dict(
            action="store_true",
            help="compare/append even when the baseline key differs (marked in the report)",
        ),
    ),
    (
        "--specdec-fail-on",
        dict(
            type=fail_on,
            default=("regressed",),
            metavar="OUTCOMES",
            help="verdicts that fail the run: comma list of regressed, inconclusive, improved, "
            "unchanged (each covers every verdict: output tok/s, accept length and the load "
            "levels; prefix tok-, accept- or load- for one, e.g. accept-regressed), drift (a "
            "drop that tonight reveals in the nightly history: a change point, see "
            "docs/history.md), crossover (speculation no longer pays at a level where it paid "
            "in the baseline; over a speculative reference: no longer faster) (default: regressed)",
        ),
    ),
    (
        "--specdec-provisional",
        dict(
            choices=("gate", "report"),
            default="gate",
            help="provisional verdicts (a baseline of fewer than 5 sessions, a one-session "
            "A/B) gate like final ones (gate, default) or are only reported (report)",
        ),
    ),
    (
        "--specdec-reference",
        dict(
            default=None,
            metavar="CONFIG",
            help="A/B in one run: compare every other selected config against this one",
        ),
    ),
    (
        "--specdec-alpha",
        dict(
            type=probability,
            default=DEFAULT_ALPHA,
            metavar="A",
            help=f"one-sided significance level before Holm (default: {DEFAULT_ALPHA})",
        ),
    ),
    (
        "--specdec-min-delta",
        dict(
            type=fraction,
            default=DEFAULT_MIN_DELTA,
            metavar="D",
            help="smallest change that counts (fraction); the threshold used is "
            f"max(D, 2 x between-session CV) (default: {DEFAULT_MIN_DELTA})",
        ),
    ),
    *WORKLOAD_OPTIONS,
    *ACCEPTANCE_OPTIONS,
    *HOST_OPTIONS,
    (
        "--specdec-gpus",
        dict(
            type=gpu_list,
            default=None,
            metavar="0,1,...",
            help="NVML GPU indices to use; under pytest-xdist each worker owns one (default: "
            "CUDA_VISIBLE_DEVICES, else all)",
        ),
    ),
    (
        "--specdec-require-gpu",
        dict(
            action="store_true",
            help="fail at once when no NVIDIA GPU/NVML is usable (default: record gpu: null)",
        ),
    ),
    (
        "--specdec-telemetry-hz",
        dict(
            type=positive_float,
            default=10.0,
            metavar="HZ",
            help="GPU telemetry sampling rate during each run (default: 10)",
        ),
    ),
    (
        "--specdec-no-cooldown",
        dict(
            action="store_true",
            help="skip the cooldown gate (idle temperature + 5 C, no thermal bits) before boots",
        ),
    ),
    (
        "--specdec-cooldown-cap",
        dict(
            type=positive_float,
            default=120.0,
            metavar="S",
            help="longest wait of the cooldown gate in seconds (default: 120)",
        ),
    ),
    (
        "--specdec-lock-clocks",
        dict(
            type=positive_int,
            default=None,
            metavar="MHZ",
            help="lock the SM clock at MHZ for the whole run (root only); recorded in the "
            "baseline key and always reset on exit",
        ),
    ),
    (
        "--specdec-launcher",
        dict(
            choices=("subprocess", "docker"),
            default="subprocess",
            help="how engines start: a local subprocess, or a container of "
            "--specdec-docker-image through the docker SDK (default: subprocess)",
        ),
    ),
    (
        "--specdec-docker-image",
        dict(
            default=None,
            metavar="IMAGE",
            help="engine image for --specdec-launcher docker, e.g. lmsysorg/sglang:TAG or the "
            "local pytest-specdec/llamacpp-cpu image from scripts/build-engine-image",
        ),
    ),
    (
        "--specdec-docker-network",
        dict(
            choices=("bridge", "host"),
            default="bridge",
            help="container networking: bridge publishes the port on 127.0.0.1 only (default)",
        ),
    ),
    (
        "--specdec-docker-shm",
        dict(default="16g", metavar="SIZE", help="container /dev/shm size (default: 16g)"),
    ),
    (
        "--specdec-docker-binary",
        dict(
            default=None,
            metavar="PATH",
            help="engine executable inside the image (default: llama-server, python3, vllm)",
        ),
    ),
    (
        "--specdec-lossless-fail-before",
        dict(
            type=non_negative_int,
            default=32,
            metavar="K",
            help="lossless check: fail when greedy output diverges from the non-speculative "
            "reference before token K; a later divergence is a warning (default: 32)",
        ),
    ),
    *LOAD_OPTIONS,
    *REPORT_OPTIONS,
]
