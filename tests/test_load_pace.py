"""The host's pace at a load level: the load client's CPU seconds for the same requests, stored
with each level's cells and set beside tonight's in the level's verdict. On an H200 the same
requests cost the client 2.1 to 3.6 s a round at 64 clients over one session's boots, and the
level's throughput followed it (docs/gpu-run.md, "An eighteenth H200")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_load import POLICY, _baseline_of, _config, _noisy, _results

from pytest_specdec.measure.levels import client_cpu_s, rounds_of
from pytest_specdec.verdict.baselines import BaselineError, _check_document
from pytest_specdec.verdict.load import judge_load_history
from pytest_specdec.verdict.sessions import session_entries
from pytest_specdec.verdict.work import pace_change, pace_text


def _paced(config: dict[str, Any], cpus: float, wall_s: float = 2.0) -> dict[str, Any]:
    """``config`` whose rounds each ran ``wall_s`` with the load client at ``cpus`` CPUs."""
    for r in config["extra"]["load"]:
        r.update(wall_s=wall_s, engine={"host": {"client": {"cpus": cpus, "thread": cpus}}})
    return config


def test_the_load_clients_cpu_seconds_per_round_leave_out_warmup_and_failed_rounds() -> None:
    config = _paced(_config("plain", {64: [9000.0, 8800.0, 8600.0]}, args=()), 0.5)
    load = config["extra"]["load"]
    load[0].update(warmup=True, engine={"host": {"client": {"cpus": 3.0}}})
    load[2]["wall_s"] = 4.0  # 2.0 CPU-seconds
    assert client_cpu_s(rounds_of(config, 64)) == pytest.approx((1.0 + 2.0) / 2)
    load[2]["engine"] = {}  # a round whose client was not read
    assert client_cpu_s(rounds_of(config, 64)) == pytest.approx(1.0)
    assert client_cpu_s(rounds_of(_config("plain", {4: [1.0]}), 4)) is None


def test_a_level_says_when_the_host_ran_at_another_pace(tmp_path: Path) -> None:
    """Stored cells keep the client's CPU seconds a round; a level judged against them says
    how tonight's compare, and names a faster or a slower host beyond 10%."""
    stored = _paced(_config("spec", {64: _noisy(64, 100.0)}), 1.6)
    baseline = _baseline_of(stored, tmp_path, sessions=0)
    for s in range(6):
        entry = session_entries(_results(stored), _paced(_config(
            "spec", {64: _noisy(400 + s, 100.0)}), 1.6 + 0.02 * s))[0]  # fmt: skip
        assert entry["levels"]["64"]["client_cpu_s"] == pytest.approx(2 * (1.6 + 0.02 * s))
        baseline.sessions.append({**entry, "id": f"s{s}"})
    reference = 2 * (1.6 + 0.05)

    def tonight(cpus: float) -> Any:
        judged = judge_load_history(_paced(_config("spec", {64: _noisy(9, 100.0)}), cpus),
                                    baseline, POLICY)  # fmt: skip
        return judged.levels[64]

    fast = tonight(1.1)
    assert fast.pace == pytest.approx({"new": 2.2, "reference": reference,
                                       "ratio": 2.2 / reference})  # fmt: skip
    assert (
        f"the host's pace: the load client spent 0.67x the stored rounds' CPU time on the "
        f"same requests (2.20 against {reference:.2f} s a round): a faster host" in fast.message
    )
    slow = tonight(2.0)
    assert "spent 1.21x" in slow.message and ": a slower host," in slow.message
    even = tonight(1.7)
    assert "spent 1.03x" in even.message and "host," not in even.message
    assert even.to_dict()["pace"]["ratio"] == pytest.approx(3.4 / reference)
    unread = judge_load_history(_config("spec", {64: _noisy(9, 100.0)}), baseline, POLICY)
    assert unread.levels[64].pace is None and "host's pace" not in unread.levels[64].message


def test_pace_needs_both_sides_and_a_bad_stored_value_is_named() -> None:
    assert pace_change(None, [1.0]) is None and pace_change(1.0, []) is None
    assert pace_text({"new": 1.0, "reference": 1.0, "ratio": 1.0}).endswith(
        "(1.00 against 1.00 s a round)"
    )
    config = _paced(_config("plain", {8: [10.0, 11.0]}, args=()), 0.5)
    (entry,) = session_entries(_results(config), config)
    cell = {**entry["levels"]["8"], "client_cpu_s": -1.0}
    doc = {"schema": 1, "key": {}, "sessions": [{"prompts": {}, "levels": {"8": cell}}]}
    with pytest.raises(BaselineError, match=r"levels.8.client_cpu_s must be the load client's"):
        _check_document(doc, Path("b.json"))
    cell["client_cpu_s"] = 1.0
    _check_document(doc, Path("b.json"))
