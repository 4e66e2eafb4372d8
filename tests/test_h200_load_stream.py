"""Load levels of SGLang 0.5.17 on an NVIDIA H200 judged again from the committed run
(docs/gpu-run.md, "A fifteenth H200"): `baseline` against `baseline-s8` (`--stream-interval
8`), three interleaved boots a side, and two more boots of `eagle3` against the two stored."""

from __future__ import annotations

from pathlib import Path

from tests_support import load_judged

from pytest_specdec.core.results import load_results
from pytest_specdec.verdict.judge import judge_reference
from pytest_specdec.verdict.stats import Outcome, VerdictPolicy

RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-run" / "load-stream"
STORED = RUN / "baselines" / "gpu-nvidia-h200-x1" / "sglang"  # as stored after the run


def test_streaming_every_eighth_token_changes_no_level() -> None:
    """Three boots a side, sessions as the unit: no level of `baseline-s8` differs from
    `baseline`; 64 clients comes closest (0.984x), undecided at an MDE of 4.7%."""
    doc = load_results(RUN / "h200-load-stream.json.gz")
    by_name = {c["name"]: c for c in doc["configs"]}
    judged = judge_reference(doc, by_name["baseline-s8"], by_name["baseline"], VerdictPolicy())
    assert judged.load is not None
    levels = judged.load.levels
    assert set(levels) == {1, 4, 16, 64}
    for clients, level in levels.items():
        v = level.verdict
        assert v is not None and not v.provisional and v.method == "welch", level.message
        assert (v.n_new, v.n_ref) == (3, 3), level.message
        assert v.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE), (clients, level.message)
    assert levels[1].verdict is not None and levels[1].verdict.outcome == Outcome.UNCHANGED
    slowest = levels[64].verdict
    assert slowest is not None and 0.98 < slowest.ratio < 0.99 and slowest.mde < 0.05


def test_eagle3_two_boots_against_two_stored_flag_no_level() -> None:
    """Nothing changed, on a third machine: two boots of `eagle3` against its two stored, the
    spread between boots borrowed from `baseline`'s and `standalone-d16`'s eight. No level is
    flagged, on throughput or on the GPU's own work."""
    levels = load_judged(RUN / "h200-e3-load-store.json.gz", STORED, stored=2)["eagle3"]
    assert set(levels) == {1, 4, 16, 64}
    for level in levels.values():
        v = level.verdict
        assert v.method == "borrowed-spread" and (v.n_new, v.n_ref) == (2, 2), level.message
        assert v.outcome == Outcome.INCONCLUSIVE, level.message
        assert level.work is not None, level.message
        assert level.work.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE), level.message
