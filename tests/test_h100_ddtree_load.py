"""DDTree against DFlash on the DDTree fork under load (1, 4 and 16 clients, one boot a side,
the chain on the tree's engine settings), read again from the committed run (docs/gpu-run.md,
"An H100: DDTree under load on the fork"): that the fork serves the tree to several requests,
the level verdicts and where the tree stops beating the chain, and where a step's time goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests_support import bench

from pytest_specdec.core.results import load_results
from pytest_specdec.measure.levels import decode_passes, no_forward_s, phase_means, rounds_of
from pytest_specdec.verdict.load import judge_load_reference
from pytest_specdec.verdict.stats import Outcome, VerdictPolicy

RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-run" / "ddtree-load"
TREE, CHAIN = "ddtree-b15", "dflash-b16-triton"


@pytest.fixture(scope="module")
def configs() -> dict[str, Any]:
    doc = load_results(RUN / "h100-ddtree-load.json.gz")
    return {c["name"]: c for c in doc["configs"]}


def _per_step(config: Any, clients: int) -> dict[str, float]:
    """Per decode step of a level's measured rounds: the target's verify on the GPU and the
    untimed rest of the round (ms), and the whole step."""
    rounds = rounds_of(config, clients)
    steps = sum(decode_passes(r) or 0.0 for r in rounds) / len(rounds)
    phases, idle = phase_means(rounds), no_forward_s(rounds)
    assert idle is not None
    verify, untimed = phases["target_verify"] * 1000 / steps, idle[0] * 1000 / steps
    return {"verify": verify, "untimed": untimed, "step": verify + untimed
            + phases["extend"] * 1000 / steps}  # fmt: skip


def test_the_fork_serves_the_tree_to_sixteen_requests_at_once(configs: Any) -> None:
    """Every round of every level finished with no failed request; at 16 clients 16 requests
    ran together, and no decode batch ran outside a CUDA graph."""
    tree = configs[TREE]
    assert tree["engine_version"] == "sglang 0.0.0.dev0+ddtree.g514ea1f3e"
    assert "--speculative-dflash-enable-ddtree" in tree["command"]
    for clients in (1, 4, 16):
        rounds = rounds_of(tree, clients)
        assert len(rounds) == 4 and all(r.ok for r in rounds)
        assert max(float(r.engine["max_running"]) for r in rounds) == clients
        assert all(r.engine["outside_graphs"] == 0 for r in rounds)


def test_the_tree_beats_the_chain_at_one_client_and_stops_at_about_six(configs: Any) -> None:
    """1.188x at 1 client (IMPROVED, provisional), 1.041x at 4, 0.892x at 16 (both
    INCONCLUSIVE); accept length +29.7% at every level; the speedup curve crosses 1 at about
    5.7 clients (band 3.3 to beyond 16)."""
    judged = judge_load_reference(configs[TREE], configs[CHAIN], VerdictPolicy())
    levels = judged.levels
    expected = {1: (Outcome.IMPROVED, 1.188), 4: (Outcome.INCONCLUSIVE, 1.041),
                16: (Outcome.INCONCLUSIVE, 0.892)}  # fmt: skip
    for clients, (outcome, ratio) in expected.items():
        v = levels[clients].verdict
        assert v is not None and v.provisional
        assert v.outcome is outcome and v.ratio == pytest.approx(ratio, abs=0.001)
        assert levels[clients].accept["change"] == pytest.approx(0.297, abs=0.001)
    crossing = judged.crossover
    assert crossing is not None and crossing.kind == "comparison" and crossing.where == "at"
    assert crossing.estimate == pytest.approx(5.7, abs=0.05)
    assert crossing.low == ("at", pytest.approx(3.3, abs=0.05)) and crossing.high[0] == "above"
    assert crossing.text == (
        "stops being faster at about 5.7 clients (band 3.3 to > 16 from the levels' CIs) "
        f"against {CHAIN}: faster at 1; even at 4, 16"
    )


def test_the_tree_verifies_at_the_chains_gpu_cost_and_pays_on_the_host(configs: Any) -> None:
    """The target's verify per step is the chain's to 0.2% at every level; the untimed part
    of a tree step exceeds the chain's by 1.0, 2.9 and 7.9 ms at 1, 4 and 16 clients, about
    0.46 ms for each request more."""
    extra = {}
    for clients in (1, 4, 16):
        tree, chain = _per_step(configs[TREE], clients), _per_step(configs[CHAIN], clients)
        assert tree["verify"] == pytest.approx(chain["verify"], rel=0.002)
        extra[clients] = tree["untimed"] - chain["untimed"]
    assert [round(extra[c], 1) for c in (1, 4, 16)] == [1.0, 2.9, 7.9]
    assert (extra[16] - extra[1]) / 15 == pytest.approx(0.46, abs=0.005)


def test_built_at_the_chains_host_cost_the_tree_would_pay_at_sixteen(configs: Any) -> None:
    """At 16 clients a tree step carries 1.30x the tokens of a chain step for 1.45x its time
    (28.2 against 19.4 ms); at the chain's untimed cost it would take 20.3 ms, 1.24x."""
    tree, chain = _per_step(configs[TREE], 16), _per_step(configs[CHAIN], 16)
    tokens = 3.062 / 2.362
    assert (round(tree["step"], 1), round(chain["step"], 1)) == (28.2, 19.4)
    built = tree["step"] - tree["untimed"] + chain["untimed"]
    assert round(built, 1) == 20.3
    assert tokens * chain["step"] / built == pytest.approx(1.24, abs=0.005)


def test_the_forks_prefill_graphs_were_captured_and_never_replayed_for_the_tree() -> None:
    """A second boot with the fork's prefill graphs on (breakable, 1 to 256 tokens): captured,
    yet every prefill batch of every round ran eagerly, since the fork captures them without
    the hidden states a DFLASH prefill keeps. Its verify per step matched the first boot's
    to 0.5%; its untimed part was shorter at every level."""
    doc = load_results(RUN / "h100-ddtree-load-pcg.json.gz")
    (tree,) = doc["configs"]
    assert "--enable-breakable-cuda-graph" in tree["command"]
    assert "--disable-piecewise-cuda-graph" not in tree["command"]
    for clients in (1, 4, 16):
        rounds = rounds_of(tree, clients, warmups=True)
        batches = [int(r.engine["prefill_batches"]) for r in rounds]
        assert sum(batches) > 0
        assert [int(r.engine["prefill_outside_graphs"]) for r in rounds] == batches
    first = load_results(RUN / "h100-ddtree-load.json.gz")
    earlier = next(c for c in first["configs"] if c["name"] == TREE)
    for clients in (1, 4, 16):
        now, before = _per_step(tree, clients), _per_step(earlier, clients)
        assert now["verify"] == pytest.approx(before["verify"], rel=0.005)
        assert now["untimed"] < before["untimed"]


def test_bench_load_phases_prints_the_step_costs_the_doc_quotes(configs: Any) -> None:
    """``python bench/load_phases.py <the run>``: its per-pass lines are the doc's table."""
    load_phases = bench("load_phases")
    tree = rounds_of(configs[TREE], 16)
    (line,) = load_phases.per_pass_lines(tree, ["extend", "target_verify"], "untimed")
    assert line == (
        "  per decode pass, boot 1 (ms): extend 2.099, target_verify 11.869, untimed 14.247; "
        "whole 28.215"
    )
