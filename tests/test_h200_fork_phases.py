"""The DDTree fork's DFLASH against SGLang 0.5.17's, per verify step, read again from the
committed runs (docs/gpu-run.md, "A seventeenth H200"): the same distilled drafter, the same
five prompts and 128 tokens, one request at a time, SGLang's device timer on in both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests_support import bench

from pytest_specdec.core.results import load_results

ROOT = Path(__file__).resolve().parent.parent
FORK = ROOT / "docs" / "gpu-run" / "fork-phases"
RELEASE = ROOT / "docs" / "gpu-run" / "load-dflash" / "h200-load.json.gz"  # the sixteenth run
PLAIN = ROOT / "docs" / "gpu-run" / "dflash" / "h200-dflash-b16-generator4.json"
step_phases = bench("step_phases")


def _dflash(path: Path) -> dict:  # type: ignore[type-arg]
    return dict(step_phases.config_named(load_results(path), "dflash-b16"))


def test_the_fork_accepts_the_same_tokens_and_pays_five_ms_a_step_outside_the_verify() -> None:
    """Equal verify steps a request (53.6) and tokens a step (2.39): both builds accept the same
    tokens, so the gap is the step's cost. The fork's step takes 1.84x as long (10.45 against
    5.67 ms); its target verify's GPU time is not the cause (5.03 ms, 0.94x the release's timed
    step), the 5.05 ms a step that no phase of the device timer counts is (0.20 ms on 0.5.17)."""
    fork = step_phases.step_cost(_dflash(FORK / "h200-dflash-phases-fork.json.gz"))
    release = step_phases.step_cost(_dflash(RELEASE), clients=1)
    assert (fork.source, release.source) == ("runs", "1 clients")
    assert fork.steps / fork.requests == pytest.approx(release.steps / release.requests)
    assert fork.tokens_per_step == pytest.approx(2.388, abs=0.001)
    assert fork.tokens_per_step == pytest.approx(release.tokens_per_step)
    assert fork.wall_per_step_ms == pytest.approx(10.446, abs=0.001)
    assert release.wall_per_step_ms == pytest.approx(5.671, abs=0.001)
    fork_phases, release_phases = fork.phase_per_step_ms(), release.phase_per_step_ms()
    assert set(fork_phases) == set(release_phases) == {"extend", "target_verify"}
    assert fork_phases["target_verify"] == pytest.approx(5.028, abs=0.001)
    assert release_phases["target_verify"] == pytest.approx(5.361, abs=0.001)
    assert fork.untimed_per_step_ms == pytest.approx(5.051, abs=0.001)
    assert release.untimed_per_step_ms == pytest.approx(0.195, abs=0.001)
    table = "\n".join(step_phases.rows([("fork", fork), ("0.5.17", release)]))
    assert "wall ms | 10.446 | 5.671 | 1.84x" in table
    assert "untimed ms | 5.051 | 0.195 | 25.90x" in table


def test_the_fork_booted_its_own_graph_flags_and_kept_greedy_output() -> None:
    """The suite file's fork interface was chosen by the fork's own parser (0.5.17's graph flags
    are unknown to it); the fork ran the synchronous worker with CUDA graphs at batches 1-4 and
    no piecewise graphs; its DFLASH wrote, on every prompt and run, the text 0.5.17's plain
    greedy decoding wrote with the same target and prompts (the sixth run)."""
    fork = _dflash(FORK / "h200-dflash-phases-fork.json.gz")
    assert fork["engine_version"] == "sglang 0.0.0.dev0+ddtree.g514ea1f3e"
    chosen = fork["extra"]["engine_interface"]
    assert chosen["chosen"] == "older-graph-flags"
    assert "--cuda-graph-max-bs-decode: unknown" in chosen["tried"]["default"]
    assert "--disable-piecewise-cuda-graph" in fork["command"]
    plain = step_phases.config_named(json.loads(PLAIN.read_text()), "baseline")
    expected = {r["prompt"]: r["text"] for r in plain["runs"] if r["phase"] == "measure"}
    measured = [r for r in fork["runs"] if r["phase"] == "measure"]
    assert len(measured) == 25 and all(r["ok"] for r in measured)
    assert {r["prompt"] for r in measured} == set(expected)
    assert all(r["text"] == expected[r["prompt"]] for r in measured)


def test_piecewise_graphs_fail_on_the_fork_and_an_unlinted_boot_is_refused() -> None:
    """With the fork's piecewise CUDA graphs left on, the boot fails while capturing them
    (cuBLAS CUBLAS_STATUS_EXECUTION_FAILED): the flag that turns them off cannot go. Booted
    with --specdec-no-lint, the release's graph flags went to the fork as written and its
    parser refused them (the plugin now names the interfaces left untried)."""
    piecewise = json.loads((FORK / "h200-dflash-phases-fork-piecewise.json").read_text())
    (config,) = piecewise["configs"]
    assert "--disable-piecewise-cuda-graph" not in config["command"]
    assert "Piecewise CUDA Graph failed" in config["error"]
    assert "CUBLAS_STATUS_EXECUTION_FAILED" in config["error"]
    unlinted = json.loads((FORK / "h200-dflash-phases-fork-nolint.json").read_text())
    (config,) = unlinted["configs"]
    assert config["extra"]["engine_interface"] == {"chosen": "default", "tried": {}}
    assert "--cuda-graph-max-bs-decode" in config["command"]
    assert "engine exited with code 2 before it was ready" in config["error"]


def test_a_config_without_verify_steps_is_refused_by_name() -> None:
    plain = step_phases.config_named(json.loads(PLAIN.read_text()), "baseline")
    with pytest.raises(ValueError, match="baseline: no measured one-request runs"):
        step_phases.step_cost(plain)
    with pytest.raises(ValueError, match="no config 'ddtree-b15' in the results"):
        step_phases.config_named({"configs": [{"name": "baseline"}]}, "ddtree-b15")
