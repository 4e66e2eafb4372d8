"""scripts/make-memory-bound-models (specdec_lab/models/memory_bound.py): deterministic weights,
the base model kept inside, and the acceptance knob, measured by the plugin on a real
llama-server (CPU).

The 7.4B target of the GPU run is not made here (14.8 GB); the same code makes small drafts
(161M parameters) that the CPU runs. Generation inside the pytest process uses one worker
(no fork of a process that may hold threads); two workers run in a subprocess. The engine
tests use SmolLM2-135M (Q4_1) as the target and two drafts of the same size and cost:
perturbation 0 (SmolLM2 itself) and 0.4 (the knob turned). A worse drafter must come out
REGRESSED with the drafter as the cause; the same engine held to a quarter of the wall clock
(same kernels, same drafts) REGRESSED with the kernel side as cause.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import CACHE, SMOLLM2_GGUF, Throttle

from specdec_lab.cli.memory_bound_models import main as make_models
from specdec_lab.models import memory_bound as mbm

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def base(smollm2_gguf: Path) -> Path:
    assert smollm2_gguf.name == mbm.BASE_NAME  # the lab makes its models from this file
    return smollm2_gguf


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_recipe_same_bytes_whatever_the_worker_count(base: Path, tmp_path: Path) -> None:
    recipe = mbm.draft_recipe(base, 64, 0.3, seed=7)
    one, record, made = mbm.make(base, tmp_path / "a", recipe, jobs=1)
    cli = [str(REPO / "scripts" / "make-memory-bound-models"), "--base", str(base),
           "--out", str(tmp_path / "b"), "--no-target", "--draft-scale", "0.3",
           "--draft-extra", "64", "--seed", "7", "--jobs", "2"]  # fmt: skip
    made_by_cli = subprocess.run(cli, capture_output=True, text=True, check=False,
                                 env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    assert made_by_cli.returncode == 0, made_by_cli.stderr
    two = tmp_path / "b" / one.name
    assert made and one.name == "mb-smollm2-draft-138m-s0.3-seed7.F16.gguf"
    assert sha256(one) == sha256(two) == record["sha256"]
    assert f"sha256 {record['sha256'][:16]}" in made_by_cli.stdout
    sidecar = json.loads(one.with_name(one.name + ".json").read_text())
    assert sidecar["recipe"]["base_sha256"] == sha256(base)
    assert sidecar["size"] == one.stat().st_size
    _, _, again = mbm.make(base, tmp_path / "a", recipe, jobs=1)
    assert not again  # found with the same recipe and size: kept
    other, _, _ = mbm.make(base, tmp_path / "c", mbm.draft_recipe(base, 64, 0.3, seed=8), jobs=1)
    assert sha256(other) != record["sha256"]


def read(path: Path) -> tuple[Any, dict[str, np.ndarray]]:
    from gguf import GGUFReader, dequantize

    reader = GGUFReader(path)
    return reader, {t.name: dequantize(t.data, t.tensor_type) for t in reader.tensors}


def test_widened_layers_hold_the_base_and_a_perturbation_of_the_chosen_scale(
    base: Path, tmp_path: Path
) -> None:
    _, original = read(base)
    zero, _, _ = mbm.make(base, tmp_path, mbm.draft_recipe(base, 256, 0.0, seed=1), jobs=1)
    knob, _, _ = mbm.make(base, tmp_path, mbm.draft_recipe(base, 256, 0.5, seed=1), jobs=1)
    reader, widened = read(zero)
    assert int(reader.fields["llama.feed_forward_length"].contents()) == 1536 + 256
    recipe = json.loads(str(reader.fields["specdec.recipe"].contents()))
    assert recipe["scale"] == 0.0 and recipe["extra"] == 256
    for name in ("blk.3.ffn_gate.weight", "blk.3.ffn_down.weight", "blk.3.attn_q.weight"):
        kept = widened[name][:1536] if "gate" in name else widened[name][:, :1536]
        if "attn" in name:
            kept = widened[name]
        assert np.allclose(kept, original[name].astype(np.float16), rtol=0, atol=0)
    assert not np.any(widened["blk.3.ffn_down.weight"][:, 1536:])  # scale 0: no perturbation
    gate_rows = widened["blk.3.ffn_gate.weight"][1536:]
    assert gate_rows.shape == (256, 576) and gate_rows.std() > 0
    _, perturbed = read(knob)
    down = original["blk.3.ffn_down.weight"]
    expected = 0.5 * float(np.sqrt(np.mean(down.astype(np.float64) ** 2))) * np.sqrt(1536 / 256)
    extra = perturbed["blk.3.ffn_down.weight"][:, 1536:].astype(np.float64)
    assert extra.std() == pytest.approx(expected, rel=0.02)


def test_bad_arguments_name_the_value_and_the_fix(base: Path, tmp_path: Path) -> None:
    with pytest.raises(mbm.RecipeError, match=r"--params 1e\+06 is below the base model's"):
        mbm.target_recipe(base, 1e6, 0.1, 1)
    assert make_models(["--base", str(tmp_path / "none.gguf")]) == 2
    for bad in (["--scale", "-1"], ["--jobs", "0"], ["--draft-extra", "-5"], ["--seed", "x"]):
        with pytest.raises(SystemExit):
            make_models(bad)


# --------------------------------------------------------------------------- real engine

PROMPTS = [
    {"id": "code", "prompt": "Write a Python function that says if a string is a palindrome."},
    {"id": "story", "prompt": "Write a short story about a lighthouse keeper and a storm."},
]  # fmt: skip


@pytest.fixture
def knob_project(suite_project: pytest.Pytester, base: Path, llama_server: Path) -> pytest.Pytester:
    """SmolLM2 as target; drafts of equal cost at perturbation 0 and 0.4; one engine thread."""
    out = CACHE / "models"
    for scale in (0.0, 0.4):
        mbm.make(base, out, mbm.draft_recipe(base, 512, scale, seed=1), jobs=1)
    suite_project.makefile(".jsonl", two="\n".join(json.dumps(p) for p in PROMPTS))
    suite_project.makefile(
        ".toml",
        knob=f"""
[suite]
engine = "llamacpp"
[models.llamacpp]
target = "{base}"
drafts = {{ draft = "{out / "mb-smollm2-draft-161m-s0-seed1.F16.gguf"}" }}
[engines.llamacpp]
extra_args = ["-np", "1", "-c", "4096", "-t", "1"]
""",
    )
    return suite_project


def run_d4(
    project: pytest.Pytester, env: pytest.MonkeyPatch, *args: str, ubatch: int = 0
) -> tuple[pytest.RunResult, dict[str, Any]]:
    if ubatch:  # the engine inherits it: verify in micro-batches of this many tokens
        env.setenv("LLAMA_ARG_UBATCH", str(ubatch))
    out = project.path / f"r{len(list(project.path.glob('r*.json')))}.json"
    result = project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-suite-file", "knob.toml",
        "--specdec-workload", "two.jsonl", "--spec-config", "draft-d4", "--specdec-runs", "3",
        "--specdec-max-tokens", "24", "--specdec-min-delta", "0.15", "--specdec-baseline-dir",
        "bl", "--specdec-results", str(out), "-p", "no:cacheprovider", *args,
    )  # fmt: skip
    return result, json.loads(out.read_text())


def accepted_share(doc: dict[str, Any]) -> float:
    runs = [r for c in doc["configs"] for r in c["runs"] if r["phase"] == "measure"]
    return sum(r["accepted_tokens"] for r in runs) / sum(r["draft_tokens"] for r in runs)


@pytest.mark.engine
def test_knob_lowers_acceptance_and_regressions_are_told_apart(
    knob_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, doc = run_d4(knob_project, monkeypatch, "--specdec-update-baselines")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    assert "LLAMA_ARG_UBATCH" not in doc["configs"][0]["extra"]["engine_env"]
    far = str(CACHE / "models" / "mb-smollm2-draft-161m-s0.4-seed1.F16.gguf")
    worse, worse_doc = run_d4(
        knob_project, monkeypatch, "--specdec-draft-model", far, "--specdec-allow-mismatch"
    )
    assert accepted_share(worse_doc) < accepted_share(doc) - 0.3  # the knob, measured
    assert worse.ret == pytest.ExitCode.TESTS_FAILED, worse.stdout.str()
    (verdict,) = worse_doc["verdicts"]
    assert verdict["outcome"] == "REGRESSED" and verdict["cause"] == "drafter", verdict
    worse.stdout.fnmatch_lines(["*REGRESSED*cause: drafter: *accept*"])
    # The same drafts on an engine that gets at most a quarter of the wall clock (Throttle):
    # slower verify steps, the same acceptance, on any machine. (Verifying one token per pass,
    # LLAMA_ARG_UBATCH=1, costs about nothing on one CPU thread, where a batch of five costs
    # five passes anyway; it stays, so that the verdict also names the engine's changed
    # environment.)
    with Throttle(str(SMOLLM2_GGUF), share=0.25) as throttle:
        slower, slower_doc = run_d4(knob_project, monkeypatch, ubatch=1)
    assert throttle.stopped, "the throttle found no engine of the run"
    (verdict,) = slower_doc["verdicts"]
    assert verdict["outcome"] == "REGRESSED" and verdict["cause"] == "kernel", verdict
    assert "LLAMA_ARG_UBATCH: unset → 1" in " ".join(verdict["notes"])
    slower.stdout.fnmatch_lines(["*REGRESSED*cause: kernel side: accept length unchanged*"])
