"""The xdist controller's account of its workers: a lost worker's configs are marked in the
merged results with the worker, the test it was running and what did not run; what it wrote
is kept; nothing is marked when no worker was lost. (The real crash, an xdist worker killed
under a real engine, is tests/test_faults.py::test_killed_xdist_worker_takes_its_engine_with_it.)"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.core.workers import (
    WorkerLedger,
    group_of,
    lost_worker_lines,
    mark_lost_workers,
    short_test,
)
from pytest_specdec.report.markdown import throughput_table
from pytest_specdec.report.table import table_rows, terminal_summary

T = "suites/test_throughput.py::test_throughput"


def ids(config: str, prompts: tuple[str, ...] = ("code", "prose")) -> list[str]:
    return [f"{T}[{config}-{p}]@{config}" for p in prompts]


def record(name: str, measured: int) -> dict[str, Any]:
    runs = [
        {"config": name, "prompt": "code", "run": i, "phase": "measure", "tok_per_s": 40.0}
        for i in range(measured)
    ]
    return {"name": name, "engine": "llamacpp", "config": {"name": name}, "runs": runs}


def starts() -> dict[str, dict[str, Any]]:
    return {n: ConfigRecord(n, "llamacpp", {"name": n}).to_dict() for n in ("a", "b", "c")}


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        (f"{T}[baseline-haiku]@baseline", "baseline"),
        (f"{T}[draft-d4@2-haiku]@draft-d4", "draft-d4"),  # a second server session's slot id
        (f"{T}[baseline-haiku]", None),  # not run under --dist loadgroup
        (f"{T}[draft-d4@2-haiku]", None),
        ("suites/x@y/test_a.py::test", None),  # an @ in the path is not a group
    ],
)
def test_group_of_a_test_id(nodeid: str, group: str | None) -> None:
    assert group_of(nodeid) == group


def test_a_lost_worker_marks_its_configs_and_keeps_what_it_wrote() -> None:
    ledger = WorkerLedger()
    ledger.collected(ids("a") + ids("b") + ids("c"))
    for nodeid in ids("c"):  # c ran to the end on gw0
        ledger.finished(nodeid, "gw0")
    ledger.finished(ids("a")[0], "gw1")
    ledger.worker_down("gw1", "Not properly terminated")
    ledger.crashed_while("gw1", ids("a")[1])  # b was queued behind a on gw1: never started
    merged = {"configs": [record("c", 4), record("a", 2)]}

    mark_lost_workers(merged, ledger, starts())

    by_name = {c["name"]: c for c in merged["configs"]}
    assert by_name["c"].get("error") is None and len(by_name["c"]["runs"]) == 4
    assert by_name["a"]["error"] == (
        "incomplete: xdist worker gw1 went down (Not properly terminated) while running "
        "test_throughput[a-prose]; 2 measured runs kept"
    )
    assert len(by_name["a"]["runs"]) == 2  # kept, not dropped
    assert by_name["b"]["error"] == (
        "incomplete: xdist worker gw1 went down (Not properly terminated) while running "
        "test_throughput[a-prose]; 2 of 2 tests did not run; 0 measured runs kept"
    )
    assert by_name["b"]["engine"] == "llamacpp" and by_name["b"]["runs"] == []
    assert merged["lost_workers"] == [
        {"worker": "gw1", "error": "Not properly terminated", "running": ids("a")[1]}
    ]
    [line] = lost_worker_lines(ledger)
    assert line.startswith("xdist worker gw1 went down (Not properly terminated)")
    summary = terminal_summary(
        {c["name"]: ConfigRecord.from_dict(c) for c in merged["configs"]}, ["code", "prose"], None
    )
    errors = [line for line in summary if ": ERROR " in line]
    assert {line.split(":")[0] for line in errors} == {"a", "b"}
    # b reads as lost, not as a boot failure, in both tables
    recs = [ConfigRecord.from_dict(c) for c in merged["configs"]]
    assert table_rows(recs, ["code", "prose"])[3][:2] == ["b", "WORKER LOST"]
    assert "| `b` | **WORKER LOST** |" in throughput_table(recs, ["code", "prose"])


def test_a_config_finished_elsewhere_after_the_loss_names_the_other_worker() -> None:
    """With worker restarts on, xdist gives the lost worker's config to another worker."""
    ledger = WorkerLedger()
    ledger.collected(ids("a", ("p1", "p2", "p3")))
    ledger.finished(ids("a", ("p1",))[0], "gw1")
    ledger.worker_down("gw1", "Not properly terminated")
    ledger.crashed_while("gw1", ids("a", ("p2",))[0])
    ledger.finished(ids("a", ("p3",))[0], "gw2")
    merged = {"configs": [record("a", 3)]}
    mark_lost_workers(merged, ledger, starts())
    assert merged["configs"][0]["error"] == (
        "incomplete: xdist worker gw1 went down (Not properly terminated) while running "
        "test_throughput[a-p2]; others ran on gw2; 3 measured runs kept"
    )


def test_without_a_lost_worker_nothing_is_marked() -> None:
    """Tests left out by -x or --maxfail are not a worker's fault."""
    ledger = WorkerLedger()
    ledger.collected(ids("a") + ids("b"))
    ledger.finished(ids("a")[0], "gw0")
    ledger.worker_down("gw0", None)  # a normal shutdown
    merged = {"configs": [record("a", 1)]}
    mark_lost_workers(merged, ledger, starts())
    assert lost_worker_lines(ledger) == []
    assert merged == {"configs": [record("a", 1)]}


def test_short_test_drops_the_file_and_the_group() -> None:
    assert short_test(f"{T}[a-code]@a") == "test_throughput[a-code]"
    assert short_test("odd") == "odd"
