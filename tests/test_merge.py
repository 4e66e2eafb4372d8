"""`specdec report merge`: results of several runners and workers, one report grouped by
hardware key; a config's runs from two workers of one key joined with their sessions kept
apart; different keys in one comparison refused with the field named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.cli import main
from pytest_specdec.core.joins import merge_worker_results
from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.report.export import markdown_summary
from pytest_specdec.report.merge import MergeError, load_many, merge

H200 = {"name": "NVIDIA H200", "driver_version": "580.1", "power_limit_w": 700.0,
        "max_memory_clock_mhz": 3201, "memory_bus_width_bits": 6016}  # fmt: skip
H100 = {"name": "NVIDIA H100 80GB HBM3", "driver_version": "580.1", "power_limit_w": 700.0}


def config(name: str, values: list[float], session: int = 1) -> dict[str, Any]:
    runs = [
        {"config": name, "prompt": p, "run": i, "phase": "measure", "error": None,
         "tok_per_s": v * f, "tpot_s": 1 / (v * f), "accept_length": 3.0, "session": session}
        for p, f in (("code", 1.0), ("prose", 0.8))
        for i, v in enumerate(values)
    ]  # fmt: skip
    return {
        "name": name, "engine": "llamacpp", "config": {"name": name, "sha256": name * 4},
        "models": {"target": {"id": "t.gguf", "sha256": "ef" * 32,
                              "weights": {"bytes_per_token": 14_814_160_128}}},
        "engine_version": "b1", "extra": {"engine_args": ["-ngl", "99"]}, "runs": runs,
    }  # fmt: skip


def doc(gpu: dict[str, Any], host: str, configs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": 1, "started_at": f"2026-11-30T02:0{len(host)}:00+00:00",
        "finished_at": "2026-11-30T03:00:00+00:00",
        "host": {"hostname": host, "cpu_model": "Xeon", "cpu_count": 16},
        "gpu": {"devices": [gpu]}, "options": {"max_tokens": 256, "runs": 3},
        "workload": {"name": "seed", "sha256": "ab" * 32, "prompts": ["code", "prose"]},
        "configs": configs,
        "verdicts": [{"config": c["name"], "outcome": "UNCHANGED", "message": "ok",
                      "suite": None, "notes": []} for c in configs],
    }  # fmt: skip


@pytest.fixture
def nightly(tmp_path: Path) -> Path:
    """Two workers of one H200 runner (draft-d4 split over both) and one H100 runner."""
    folder = tmp_path / "artifacts"
    files = {
        "h200-a/results.gw0.json": doc(H200, "h200-a", [config("baseline", [120, 121, 119]),
                                                        config("draft-d4", [140, 141, 139])]),
        "h200-a/results.gw1.json": doc(H200, "h200-b", [config("draft-d4", [138, 142, 140])]),
        "h100/results.json": doc(H100, "h100", [config("baseline", [90, 91, 89])]),
    }  # fmt: skip
    for name, content in files.items():
        atomic_write_json(folder / name, content)
    (folder / "h100" / "benchmark.json").write_text(json.dumps({"benchmarks": []}))
    return folder


def test_two_hardware_keys_two_groups_workers_runs_combined(nightly: Path) -> None:
    files, notes = load_many([nightly])
    assert len(files) == 3 and any("benchmark.json" in n for n in notes)
    groups = merge(files)
    assert [g["gpu"]["devices"][0]["name"] for g in groups] == ["NVIDIA H100 80GB HBM3",
                                                               "NVIDIA H200"]  # fmt: skip
    h200 = groups[1]
    by_name = {c["name"]: c for c in h200["configs"]}
    draft = by_name["draft-d4"]
    assert len(draft["runs"]) == 12  # 6 + 6 runs from the two workers
    assert sorted({r["session"] for r in draft["runs"]}) == [1, 2]  # sessions kept apart
    assert len(draft["extra"]["sources"]) == 2 and len(h200["sources"]) == 2
    assert draft["roofline"]["share"] is not None  # recomputed over the joined runs
    assert len(h200["verdicts"]) == 3 and h200["verdicts"][0]["notes"][0].startswith("judged in")
    assert h200["options"]["sessions"] == 2  # the header counts the sessions joined
    assert "in each of 2 server sessions" in markdown_summary(h200)


def test_a_config_with_another_key_is_refused_with_the_field(nightly: Path) -> None:
    files, _ = load_many([nightly])
    gw0, gw1 = files[1], copy.deepcopy(files[2])  # the two workers of the H200 runner
    gw1[1]["configs"][0]["extra"]["engine_args"] = ["-ngl", "99", "-ub", "4"]
    with pytest.raises(MergeError, match=r"config draft-d4: .*gw1.* differ in engine_args"):
        merge([gw0, gw1])
    other = copy.deepcopy(files[2])
    other[1]["workload"]["sha256"] = "cd" * 32
    with pytest.raises(MergeError, match=r"different workloads \(workload_sha256"):
        merge([gw0, other])
    assert len(merge([files[0], gw1])) == 2  # other hardware: no comparison, no conflict


def test_specdec_report_merge_markdown_and_json(
    nightly: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged.json"
    assert main(["report", "merge", str(nightly), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Merged results: 3 file(s), 2 hardware key(s)")
    assert text.count("## Speculative decoding: seed on 1x NVIDIA H") == 2
    assert "decode tok/s (roofline)" in text  # the H200 group knows its bandwidth
    merged = json.loads(out.read_text())
    assert [len(g["configs"]) for g in merged["groups"]] == [1, 2]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["report", "merge", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err


def test_a_config_in_two_files_keeps_the_second_files_load_rounds_drift_and_references() -> None:
    first, second = config("draft-d4", [140, 141]), config("draft-d4", [138, 139])
    first["extra"]["load"] = [{"clients": 4, "round": r, "session": s, "output_tok_per_s": 300.0}
                              for s in (1, 2) for r in range(2)]  # fmt: skip
    second["extra"]["load"] = [{"clients": c, "round": 0, "session": 1, "output_tok_per_s": 400.0}
                               for c in (4, 8)]  # fmt: skip
    second["engine_version"] = "b2"
    a = {**doc(H200, "a", [first]), "drift": [{"config": "draft-d4", "message": "in a"}],
         "references": [{"name": "ref-a"}]}  # fmt: skip
    b = {**doc(H200, "b", [second]), "drift": [{"config": "draft-d4", "message": "in b"}],
         "references": [{"name": "ref-b"}]}  # fmt: skip
    (group,) = merge([("a.json", a), ("b.json", b)])
    (cfg,) = group["configs"]
    # b's sessions come after a's highest, of its runs (1) and its load rounds (2)
    assert sorted({r["session"] for r in cfg["runs"]}) == [1, 3]
    assert [(e["clients"], e["session"]) for e in cfg["extra"]["load"]] == [
        (4, 1), (4, 1), (4, 2), (4, 2), (4, 3), (8, 3)
    ]  # fmt: skip
    assert [d["message"] for d in group["drift"]] == ["in a", "in b"]
    assert [r["name"] for r in group["references"]] == ["ref-a", "ref-b"]
    assert "config draft-d4: engine version b1 in a.json, b2 in b.json (its sessions from 3" in (
        " ".join(group["notes"])
    )


def test_a_folder_with_an_xdist_run_counts_its_workers_once(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    for name, started in (("latest.gw0.json", "2026-12-01T02:00:00+00:00"),
                          ("latest.gw1.json", "2026-12-01T02:01:00+00:00")):  # fmt: skip
        worker = {**doc(H200, "h200-a", [config(name.split(".")[1], [120, 121])]),
                  "started_at": started, "finished_at": "2026-12-01T03:00:00+00:00"}  # fmt: skip
        atomic_write_json(folder / name, worker)
    merged = merge_worker_results(folder / "latest.json", since=0.0)
    assert merged is not None
    atomic_write_json(folder / "latest.json", merged)
    atomic_write_json(folder / "latest.prev.json", merged)  # an earlier run's, kept by a later one
    files, notes = load_many([folder])
    assert [Path(name).name for name, _ in files] == ["latest.json"]
    assert sum("an xdist worker's file; its runs are in" in n for n in notes) == 2
    assert any("latest.prev.json holds an earlier run's results" in n for n in notes)
    (group,) = merge(files)
    assert [len(c["runs"]) for c in group["configs"]] == [4, 4]
    later = {**doc(H200, "h200-a", [config("gw0", [90, 91])]),
             "started_at": "2026-12-02T02:00:00+00:00"}  # fmt: skip
    atomic_write_json(folder / "latest.gw0.json", later)  # a later run's worker: not in the merge
    files, _ = load_many([folder])
    assert sorted(Path(name).name for name, _ in files) == ["latest.gw0.json", "latest.json"]
