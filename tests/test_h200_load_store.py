"""Load levels of SGLang 0.5.17 on an NVIDIA H200 judged again from the committed run
(docs/gpu-run.md, "A fourteenth H200"): three more boots each of `baseline` and
`standalone-d16` against the five stored before them, and one of `eagle3` against one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests_support import load_judged

from pytest_specdec.verdict.stats import Outcome

RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-run" / "load-store"
STORED = RUN / "baselines" / "gpu-nvidia-h200-x1" / "sglang"  # as stored after the run


def test_h200_rerun_of_three_boots_against_five_stored_flags_no_level() -> None:
    """Nothing changed, judged not provisionally (five stored boots): no level of either config
    is flagged on throughput or on the GPU's own work. `baseline` at 64 clients read 0.908x
    on a host that paced every level slower, INCONCLUSIVE at an MDE of 9.3%: the throughput
    MDE stays over 5% at 16 and 64 clients, while the GPU-work verdict's is under 2% there."""
    judged = load_judged(RUN / "h200-load-store.json.gz", STORED, stored=5)
    assert set(judged) == {"baseline", "standalone-d16"}
    for name, levels in judged.items():
        assert set(levels) == {1, 4, 16, 64}, name
        for clients, level in levels.items():
            where = (name, clients, level.message)
            assert not level.verdict.provisional, where
            assert level.verdict.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE), where
            assert level.work is not None and not level.work.provisional, where
            assert level.work.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE), where
            assert level.work.mde < 0.02, where
    slow = judged["baseline"][64]
    assert slow.verdict.ratio == pytest.approx(0.908, abs=0.002)
    assert slow.verdict.mde == pytest.approx(0.093, abs=0.002)
    assert judged["baseline"][1].verdict.outcome == Outcome.UNCHANGED
    assert judged["standalone-d16"][4].verdict.outcome == Outcome.UNCHANGED


def test_h200_one_boot_against_one_stored_is_the_provisional_false_alarm_named_host() -> None:
    """`eagle3`'s one boot against the one stored, on another machine. Welch on rounds (rounds,
    not boots, as the unit) reads REGRESSED at 4 and 64 clients, 0.954x both; the cause says
    the time went to the host's pace, with the GPU's work per round unchanged."""
    levels = load_judged(RUN / "h200-e3-load-store.json.gz", STORED, stored=1, borrow=False)
    flagged = {c: lv for c, lv in levels["eagle3"].items()
               if lv.verdict.outcome == Outcome.REGRESSED}  # fmt: skip
    assert set(flagged) == {4, 64}
    for level in flagged.values():
        assert level.verdict.method == "welch-provisional", level.message
        assert level.verdict.provisional and level.cause == "host", level.message
        assert level.verdict.ratio == pytest.approx(0.954, abs=0.002)
        assert "the host's pace, not the kernels" in level.cause_text


def test_h200_one_boot_against_one_stored_borrows_the_spread_of_the_configs_beside_it() -> None:
    """The same boot judged as the plugin judges it: the history of one boot borrows the spread
    between boots at each level from `baseline`'s and `standalone-d16`'s eight (three machines),
    0.9%, 0.9%, 2.3% and 3.9% at 1, 4, 16 and 64 clients, and adds `eagle3`'s own round-to-round
    noise. No level is flagged: 4 clients comes closest (0.954x, p 0.004, Holm 0.015), and one
    boot against one cannot resolve 16 and 64 clients (MDE 12% and 18%)."""
    levels = load_judged(RUN / "h200-e3-load-store.json.gz", STORED, stored=1)["eagle3"]
    spreads = {1: 0.0087, 4: 0.0094, 16: 0.0234, 64: 0.0394}
    for clients, level in levels.items():
        v = level.verdict
        assert v.method == "borrowed-spread" and v.provisional, level.message
        assert v.spread_source == "baseline (8 sessions), standalone-d16 (8 sessions)"
        assert "borrowed from baseline (8 sessions), standalone-d16" in v.explanation
        assert (v.n_new, v.n_ref) == (1, 1) and v.df > 8, level.message
        assert v.between_cv == pytest.approx(spreads[clients], abs=0.0005), level.message
        assert v.outcome == Outcome.INCONCLUSIVE, level.message
    assert levels[4].verdict.p_regress < 0.01 < levels[4].verdict.p_adjusted  # type: ignore[operator]
    assert levels[16].verdict.mde > 0.10 and levels[64].verdict.mde > 0.15


def test_h200_boots_record_their_machine_and_the_night_names_it(tmp_path: Path) -> None:
    """The stored boots record which H200 ran them (a digest of its UUID, filled from the
    results each came from): four on one machine, one on a second, and this run's three on a
    third, whose `baseline` boots were the slowest of the eight at 64 clients. Judged as the
    plugin judges it, the run's load levels say so."""
    from pytest_specdec.core.results import load_results
    from pytest_specdec.report.load import markdown_section
    from pytest_specdec.verdict.baselines import load_baseline
    from pytest_specdec.verdict.judge import judge_baseline
    from pytest_specdec.verdict.machines import machine_of
    from pytest_specdec.verdict.stats import VerdictPolicy

    name = Path("gpu-nvidia-h200-x1", "sglang", "baseline--mb-smollm2-7-4b-s0-1-seed1-hf.json")
    history = json.loads((RUN.parent.parent.parent / "baselines" / "load" / name).read_text())
    history["sessions"] = history["sessions"][:8]  # as stored after that run (it has grown)
    store = tmp_path / "load"
    (store / name).parent.mkdir(parents=True)
    (store / name).write_text(json.dumps(history))
    doc = load_results(RUN / "h200-load-store.json.gz")
    tonight = machine_of(doc)
    assert tonight == "82183aac7c9e"
    stored = load_baseline(store / name)
    assert stored is not None
    machines = [s["machine"] for s in stored.sessions]
    assert machines == ["6f370d15cf5e"] * 4 + ["54028bdcac27"] + [tonight] * 3
    judged = judge_baseline(doc, doc["configs"][0], store, VerdictPolicy())
    assert judged.load is not None
    note = (f"tonight's machine ({tonight}) ran 3 of the 8 stored sessions; the other 5 ran on 2 "
            "other machines")  # fmt: skip
    assert note in judged.load.notes
    # the Markdown report's load section lists it under the config
    report = markdown_section({**doc, "verdicts": [judged.to_dict()]})
    assert f"- `baseline`: {note}" in report


def test_the_reports_speedup_chart_is_titled_over_the_curves_reference() -> None:
    """Each config judged against its stored boots, `standalone-d16`'s curve over `baseline`:
    the Markdown report's speedup chart is over `baseline`. `baseline`'s own verdict draws no
    curve, and once made the title read "each reference"."""
    from pytest_specdec.core.results import load_results
    from pytest_specdec.report.load import markdown_section

    text = "\n".join(markdown_section(load_results(RUN / "h200-load-store.json.gz")))
    assert 'title "Speedup over baseline"' in text and "each reference" not in text
