"""The memory-bound regime on a real NVIDIA GPU: the bandwidth bound from NVML, and the
roofline share of plain decoding of the 7.4B target, measured by the plugin.

Skipped (with the reason) without a GPU, without the memory-bound target
(./scripts/make-memory-bound-models) or without a CUDA llama-server ($SPECDEC_LLAMA_SERVER,
./scripts/build-llama-cuda). docs/gpu-run.md has the full run these tests sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.gpu.nvml import fingerprints
from pytest_specdec.measure.roofline import DATASHEET_GBS, nvml_bandwidth

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "suites" / "specdec-memory-bound.toml"
TARGET = cache_root() / "models" / "mb-smollm2-7.4b-s0.1-seed1.F16.gguf"


def test_nvml_gives_the_bandwidth_bound(nvml: Any) -> None:
    (fp,) = fingerprints([0], nvml=nvml)
    print(fp.to_dict())
    assert fp.max_memory_clock_mhz and fp.memory_bus_width_bits
    measured = nvml_bandwidth(fp.to_dict())
    assert measured is not None
    if fp.name in DATASHEET_GBS:  # NVML's clock and bus width agree with the datasheet
        assert measured == pytest.approx(DATASHEET_GBS[fp.name], rel=0.1)


def test_plain_decoding_of_the_memory_bound_target_stays_under_its_bound(
    nvml: Any, tmp_path: Path
) -> None:
    if not TARGET.is_file():
        pytest.skip(f"no memory-bound target at {TARGET}: run ./scripts/make-memory-bound-models")
    if not os.environ.get("SPECDEC_LLAMA_SERVER"):
        pytest.skip("no CUDA llama-server: build one with ./scripts/build-llama-cuda and set "
                    "SPECDEC_LLAMA_SERVER")  # fmt: skip
    out = tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "pytest", "suites/test_throughput.py", "-q", "-p", "no:cacheprovider",
        "--specdec-suite-file", str(SUITE), "--spec-config", "baseline", "--specdec-runs", "2",
        "--specdec-max-tokens", "64", "--specdec-require-gpu", "--specdec-cooldown-cap", "5",
        "--specdec-results", str(out), "--specdec-baseline-dir", str(tmp_path / "b"),
        "-k", "fibonacci or verdict",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (config,) = json.loads(out.read_text())["configs"]
    roof = config["roofline"]
    print(roof)
    assert roof["bytes_per_token"] == pytest.approx(14.81e9, rel=0.01)
    # Plain decoding reads every weight once per token: it cannot pass the bound (the 60 MB
    # L2 cache holds a negligible part of 14.8 GB).
    assert 0.05 < roof["share"] <= 1.02
    runs = [r for r in config["runs"] if r["phase"] == "measure"]
    assert all(r["gpu"] and r["gpu"]["devices"][0]["power_w"] for r in runs)
