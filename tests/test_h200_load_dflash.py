"""Load levels of SGLang 0.5.17 on an NVIDIA H200 judged again from the committed run
(docs/gpu-run.md, "A sixteenth H200"): a distilled DFLASH drafter trained to its last step,
`dflash-b16` A/B against `baseline` at 1, 4, 16 and 64 clients, and a fifth boot of `eagle3`
against the four stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests_support import load_judged

from pytest_specdec.core.results import load_results
from pytest_specdec.verdict.load import judge_load_reference
from pytest_specdec.verdict.stats import Outcome, VerdictPolicy

RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-run" / "load-dflash"
STORED = RUN / "baselines" / "gpu-nvidia-h200-x1" / "sglang"  # as stored after the run


def test_distilled_drafter_pays_up_to_16_clients_and_stops_near_19() -> None:
    """One boot a side (provisional): `dflash-b16` with a drafter that accepts 2.39 tokens a
    verify step under load is 1.95x `baseline` at one client and 0.44x at 64, where a verify
    step of 64 requests costs 5.4 plain decode steps; it stops paying at about 18.7 clients."""
    doc = load_results(RUN / "h200-load.json.gz")
    by_name = {c["name"]: c for c in doc["configs"]}
    load = judge_load_reference(by_name["dflash-b16"], by_name["baseline"], VerdictPolicy())
    levels = load.levels
    assert set(levels) == {1, 4, 16, 64}
    for level in levels.values():
        assert level.verdict.provisional, level.message  # one session a side
    expected = {1: 1.953, 4: 1.713, 16: 1.111, 64: 0.439}
    for clients, ratio in expected.items():
        assert levels[clients].verdict.ratio == pytest.approx(ratio, abs=0.002), clients
    assert [levels[c].verdict.outcome for c in (1, 4, 16, 64)] == [
        Outcome.IMPROVED, Outcome.IMPROVED, Outcome.IMPROVED, Outcome.REGRESSED,
    ]  # fmt: skip
    assert load.crossover is not None
    assert load.crossover.where == "at"
    assert load.crossover.estimate == pytest.approx(18.7, abs=0.1)
    assert "speculation" in levels[64].message and "5.44 plain decode steps" in levels[64].message


def test_drafter_ran_to_its_last_step_deterministically() -> None:
    """The drafter's record: torch's deterministic algorithms demanded, all 9000 steps run
    (not cut short by --max-minutes), the weights of the last step kept."""
    sidecar = json.loads((RUN / "h200-dflash-drafter.json").read_text())
    training = sidecar["training"]
    assert sidecar["deterministic"] is True
    assert training["stopped_early"] is False
    assert training["steps_done"] == training["kept_step"] == 9000
    assert sidecar["sha256"].startswith("ff46d603")
    assert training["final_workload"]["accept_length"] == pytest.approx(3.01, abs=0.01)


def test_eagle3_fifth_boot_against_four_stored_flags_no_level() -> None:
    """Nothing changed, on a fourth machine: the fifth boot of `eagle3` against its four stored,
    the spread between boots borrowed from `baseline`'s and `standalone-d16`'s. No level is
    flagged on throughput; the GPU's own work is UNCHANGED at every level, MDE 3.5% or less."""
    levels = load_judged(RUN / "h200-e3-load-store.json.gz", STORED, stored=4)["eagle3"]
    assert set(levels) == {1, 4, 16, 64}
    for level in levels.values():
        v = level.verdict
        assert v.method == "borrowed-spread" and (v.n_new, v.n_ref) == (1, 4), level.message
        assert v.outcome == Outcome.INCONCLUSIVE, level.message
        assert level.work is not None and level.work.outcome == Outcome.UNCHANGED, level.message
        assert level.work.mde <= 0.035, level.message
    assert levels[64].verdict.ratio == pytest.approx(1.024, abs=0.002)
