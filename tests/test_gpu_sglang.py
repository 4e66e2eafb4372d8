"""Real SGLang on a real NVIDIA GPU, booted by the plugin: readiness, the native endpoint's
per-request accept length against the /metrics counters, NVML telemetry, SGLang's own error
text for a bad flag, and a stop that leaves no SGLang process behind.

Skipped (with the reason) without a GPU, without an interpreter that imports SGLang
($SPECDEC_SGLANG_PYTHON; ./scripts/sglang-wheelhouse install prints one) or without the
memory-bound target in Hugging Face layout (./scripts/run-sglang-gpu models).
docs/gpu-run.md has the full run these tests sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.engines.launch import engines_started_here

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "suites" / "specdec-gpu.toml"
TARGET = cache_root() / "models" / "mb-smollm2-7.4b-s0.1-seed1.hf"


@pytest.fixture(scope="module")
def sglang_python(nvml: Any) -> str:
    python = os.environ.get("SPECDEC_SGLANG_PYTHON")
    if not python:
        pytest.skip("no SGLang: set SPECDEC_SGLANG_PYTHON to an interpreter that imports sglang "
                    "(./scripts/sglang-wheelhouse install prints one)")  # fmt: skip
    if not (TARGET / "config.json").is_file():
        pytest.skip(f"no memory-bound target at {TARGET}: run ./scripts/run-sglang-gpu models")
    return python


SGLANG_MARKS = ("sglang.launch_server", "sglang::")


def sglang_processes() -> list[str]:
    """Every live SGLang server process: the launcher (``-m sglang.launch_server``) and its
    workers, which retitle themselves ``sglang::scheduler`` and ``sglang::detokenizer``. A
    process that only mentions SGLang in an argument (a log path, ``tee sglang.txt``) is not
    one."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and any(mark in argv for mark in SGLANG_MARKS):
            found.append(f"{entry.name}: {argv[:160]}")
    return found


def run_plugin(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "pytest", "suites/test_throughput.py", "-q", "-p", "no:cacheprovider",
        "--specdec-suite-file", str(SUITE), "--specdec-engine", "sglang", "--specdec-runs", "2",
        "--specdec-max-tokens", "64", "--specdec-require-gpu", "--specdec-cooldown-cap", "5",
        "--specdec-results", str(out), "--specdec-baseline-dir", str(tmp_path / "b"),
        "--specdec-log-dir", str(tmp_path / "logs"), *args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    return proc, out


def test_ngram_on_sglang_measured_and_stopped_clean(sglang_python: str, tmp_path: Path) -> None:
    assert not sglang_processes(), "an SGLang process was running before the test"
    proc, out = run_plugin(tmp_path, "--spec-config", "ngram", "-k", "fibonacci or json_parse")
    assert proc.returncode == 0, proc.stdout[-3000:]
    (config,) = json.loads(out.read_text())["configs"]
    assert config["engine_version"].startswith("sglang ")
    runs = [r for r in config["runs"] if r["phase"] == "measure" and r["ok"]]
    assert len(runs) == 4
    for run in runs:
        assert run["accept_source"] == "meta_info" and run["accept_length"] >= 1.0
        # completion_tokens / spec_verify_ct per request = the counters' delta around it
        assert run["extra"]["accept_length_metrics"] == pytest.approx(run["accept_length"])
        # the preset resets SGLang's n-gram store before every request: no recall of the
        # warm-up's output (which reads 7.5-8 of 8); from the prompt alone 1.2-3.2
        assert run["extra"]["flushed"] is True and run["accept_length"] < 6
        device = run["gpu"]["devices"][0]
        assert device["power_w"]["mean"] > 0 and device["energy_j"] > 0
    assert config["roofline"]["bytes_per_token"] == pytest.approx(14.81e9, rel=0.01)
    # the native endpoint is sent the prompts rendered with the model's chat template
    assert config["extra"]["prompt_rendering"]["kind"] == "chat-template"
    (cost,) = config["extra"]["cost"]
    assert cost["total_s"] >= cost["start_s"] + cost["generation_s"] > 0
    deadline = time.monotonic() + 5  # the plugin has returned: nothing may be left
    while sglang_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sglang_processes() == [] and engines_started_here() == []


def test_a_bad_flag_fails_fast_with_sglangs_own_error(sglang_python: str, tmp_path: Path) -> None:
    start = time.monotonic()
    proc, _ = run_plugin(tmp_path, "--spec-config", "baseline", "--specdec-no-lint",
                         "--specdec-engine-args=--speculative-eagle-topkk 4")  # fmt: skip
    took = time.monotonic() - start
    assert proc.returncode == 1
    assert "unrecognized arguments: --speculative-eagle-topkk" in proc.stdout
    assert "engine exited with code" in proc.stdout
    assert took < 120, f"a bad flag took {took:.0f} s to fail"
    assert sglang_processes() == []
