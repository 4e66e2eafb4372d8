"""The xdist controller's account of its workers: a lost worker's configs are marked in the
merged results with the worker, the test it was running and what did not run; what it wrote
is kept; nothing is marked when no worker was lost. (The real crash, an xdist worker killed
under a real engine, is tests/test_faults.py::test_killed_xdist_worker_takes_its_engine_with_it.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.joins import merge_worker_results
from pytest_specdec.core.results import RESULTS_SCHEMA, ConfigRecord
from pytest_specdec.core.workers import (
    WorkerLedger,
    group_of,
    lost_worker_lines,
    mark_lost_workers,
    mark_split_configs,
    read_groups,
    short_test,
    write_groups,
)
from pytest_specdec.report.markdown import throughput_table
from pytest_specdec.report.table import table_rows, terminal_summary
from pytest_specdec.scheduling import ConfigScheduling, make_scheduler

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
        {"worker": "gw1", "error": "Not properly terminated", "running": ids("a")[1], "config": "a"}
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


# --- the grouping, read from the tests' parameters -------------------------------------------


def test_the_group_map_a_worker_writes_is_what_the_controller_reads(tmp_path: Path) -> None:
    groups = {f"{T}[draft-d4-code]": "draft-d4", f"{T}[draft-d4@2-code]": "draft-d4"}
    write_groups(tmp_path, "gw1", groups)
    assert read_groups(tmp_path, "gw1") == groups
    assert read_groups(tmp_path, "gw0") == {}  # a worker that wrote none (another host)
    assert not list(tmp_path.glob("*.tmp*"))  # written whole


def test_the_ledger_takes_groups_from_the_map_and_the_xdist_suffix_only_as_a_fallback() -> None:
    ledger = WorkerLedger()
    bare = [f"{T}[a-code]", f"{T}[a-prose]"]  # pytest 9.2: xdist could not add its suffix
    ledger.collected([*bare, *ids("b"), "tests/test_x.py::test_plain"], {b: "a" for b in bare})
    assert ledger.tests == {"a": set(bare), "b": set(ids("b"))}
    assert ledger.group(f"{T}[a-code]") == "a" and ledger.group("tests/test_x.py::t") is None


def test_a_config_that_ran_on_two_workers_is_named_and_marked() -> None:
    ledger = WorkerLedger()
    bare = [f"{T}[a-code]", f"{T}[a-prose]", f"{T}[b-code]"]
    ledger.collected(bare, {bare[0]: "a", bare[1]: "a", bare[2]: "b"})
    ledger.finished(bare[0], "gw0")
    ledger.finished(bare[1], "gw1")  # a's tests on two workers: two engines, half the runs each
    ledger.finished(bare[2], "gw1")
    assert ledger.split() == {"a": ["gw0", "gw1"]}
    c = record("c", 2)
    c["extra"] = {"workers": ["gw0", "gw1"]}  # c's record came from both workers' files
    merged = {"configs": [record("a", 2), record("b", 2), c]}
    assert mark_split_configs(merged, ledger) == ["a", "c"]
    by_name = {r["name"]: r for r in merged["configs"]}
    assert by_name["a"]["error"].startswith("split: its tests ran on xdist workers gw0, gw1")
    assert by_name["c"]["error"].startswith("split: its tests ran on xdist workers gw0, gw1")
    assert "error" not in by_name["b"]
    assert mark_split_configs({"configs": [record("b", 1)]}, WorkerLedger()) == []


def test_merged_worker_files_list_the_workers_of_a_config_found_in_several(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.json"
    for worker, names in (("gw0", ["a", "b"]), ("gw1", ["b"])):
        doc = {"schema": RESULTS_SCHEMA, "configs": [record(n, 1) for n in names], "workload": {},
               "started_at": "t0", "finished_at": "t1"}  # fmt: skip
        (tmp_path / f"r.{worker}.json").write_text(json.dumps(doc))
    merged = merge_worker_results(out, since=0.0)
    assert merged is not None
    by_name = {c["name"]: c for c in merged["configs"]}
    assert by_name["b"]["extra"]["workers"] == ["gw0", "gw1"] and len(by_name["b"]["runs"]) == 2
    assert "workers" not in by_name["a"].get("extra", {})


class _Log:
    def __getattr__(self, name: str) -> _Log:
        return self

    def __call__(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("dist", ["load", "loadgroup", "worksteal"])
def test_the_scheduler_keeps_a_config_in_one_scope(pytestconfig: pytest.Config, dist: str) -> None:
    ledger = WorkerLedger()
    bare = [f"{T}[a-code]", f"{T}[a-prose]"]
    ledger.collected(bare, {b: "a" for b in bare})
    config = _DistConfig(pytestconfig, dist)
    sched = make_scheduler(config, _Log(), ledger)  # type: ignore[arg-type]
    assert isinstance(sched, ConfigScheduling)
    scopes = {sched._split_scope(n) for n in bare}
    assert scopes == {"specdec config a"}
    assert sched._split_scope("tests/t.py::test_x") == "tests/t.py::test_x"
    grouped = "tests/t.py::test_y@mine"  # a user's own xdist_group, as xdist appends it
    assert sched._split_scope(grouped) == ("mine" if dist == "loadgroup" else grouped)


def test_other_dist_modes_stay_xdists(pytestconfig: pytest.Config) -> None:
    for dist in ("each", "loadscope", "loadfile", "no"):
        config = _DistConfig(pytestconfig, dist)
        assert make_scheduler(config, _Log(), WorkerLedger()) is None  # type: ignore[arg-type]


class _DistConfig:
    """A pytest config whose --dist reads ``dist`` (the scheduler reads nothing else)."""

    def __init__(self, config: pytest.Config, dist: str) -> None:
        self._config, self._dist = config, dist
        self.option = config.option

    def getvalue(self, name: str) -> Any:
        return {"dist": self._dist, "tx": ["popen", "popen"]}.get(name) or self._config.getvalue(
            name
        )
