"""The results file on disk: written whole (gzipped for a ``.gz`` name, through a symbolic
link to the file it points to), the previous run's measurements kept when a new run replaces
them, read back only in the shape this tool writes, and the pytest-xdist workers' files merged
with every part of each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.joins import merge_worker_results
from pytest_specdec.core.results import (
    RESULTS_SCHEMA,
    ResultsError,
    atomic_write_json,
    load_results,
    previous_path,
    write_results_file,
)


def load_round(clients: int, session: int = 1, warmup: bool = False) -> dict[str, Any]:
    return {"clients": clients, "round": 0, "session": session, "warmup": warmup,
            "output_tok_per_s": 100.0 * clients}  # fmt: skip


def config(
    name: str, ok: bool = True, engine_version: str = "b1", load: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    runs = [{"config": name, "prompt": "p", "run": i, "phase": "measure", "session": 1, "ok": ok,
             "error": None if ok else "refused", "tok_per_s": 100.0 if ok else None}
            for i in range(2)]  # fmt: skip
    return {"name": name, "engine": "llamacpp", "engine_version": engine_version,
            "config": {"sha256": name}, "runs": runs, "extra": {"load": load or []}}  # fmt: skip


def doc(
    configs: list[dict[str, Any]], started: str = "2026-12-01T02:00:00+00:00"
) -> dict[str, Any]:
    return {"schema": RESULTS_SCHEMA, "started_at": started, "finished_at": started,
            "workload": {"name": "w", "sha256": "w1", "prompts": ["p"]},
            "options": {}, "configs": configs, "verdicts": [], "notes": []}  # fmt: skip


def test_a_gz_results_file_is_written_gzipped_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "nightly.json.gz"
    atomic_write_json(path, doc([config("ngram")]))
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # gzip's magic
    assert load_results(path)["configs"][0]["name"] == "ngram"


def test_a_linked_results_file_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    shared = tmp_path / "store" / "c--m.json"
    atomic_write_json(shared, {"schema": 1, "sessions": []})
    link = tmp_path / "baselines" / "c--m.json"
    link.parent.mkdir()
    link.symlink_to(shared)
    atomic_write_json(link, {"schema": 1, "sessions": [{"id": "s1"}]})
    assert link.is_symlink() and link.resolve() == shared.resolve()
    assert json.loads(shared.read_text())["sessions"] == [{"id": "s1"}]
    assert sorted(p.name for p in link.parent.iterdir()) == ["c--m.json"]  # no temp file left


def test_a_new_run_keeps_the_measurements_of_the_run_it_replaces(tmp_path: Path) -> None:
    path = tmp_path / "results" / "latest.json"
    measured = doc([config("ngram")], started="2026-12-01T02:00:00+00:00")
    write_results_file(path, measured)
    write_results_file(path, measured)  # the same run again: nothing to keep
    assert not previous_path(path).exists()
    failed = doc([{**config("ngram", ok=False), "error": "server not ready"}], "2026-12-02")
    write_results_file(path, failed)
    assert previous_path(path) == tmp_path / "results" / "latest.prev.json"
    assert load_results(previous_path(path)) == measured
    write_results_file(path, {**failed, "notes": ["later write of the same run"]})
    write_results_file(path, doc([config("ngram")], started="2026-12-03"))
    assert load_results(previous_path(path)) == measured  # the failed run measured nothing
    loads = doc([{**config("ngram", ok=False), "extra": {"load": [load_round(4)]}}], "2026-12-04")
    write_results_file(path, loads)
    assert load_results(previous_path(path))["started_at"] == "2026-12-03"  # an older copy replaced
    write_results_file(path, doc([], started="2026-12-05"))
    assert load_results(previous_path(path)) == loads  # a load round is a measurement too
    assert sorted(p.name for p in path.parent.iterdir()) == ["latest.json", "latest.prev.json"]
    assert previous_path(tmp_path / "r.json.gz").name == "r.prev.json.gz"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"workload": "w"}, "'workload' must be an object, found 'w'"),
        ({"configs": ["ngram"]}, "configs[0] must be an object, found 'ngram'"),
        ({"configs": [{"runs": []}]}, "configs[0] has no string 'name' (found None)"),
        ({"configs": [{"name": "ngram", "runs": 5}]}, "configs[0] (ngram): 'runs' must be a list"),
        ({"configs": [{"name": "ngram", "runs": [1]}]}, "configs[0] (ngram): 'runs' must be a"),
        ({"configs": {}}, "'configs' must be a list"),
    ],
)
def test_a_results_file_of_another_shape_is_named_with_the_field(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**doc([]), **change}))
    with pytest.raises(ResultsError) as info:
        load_results(path)
    assert str(info.value).startswith(f"results file {path}: {problem}")
    assert "is it a results file pytest-specdec wrote (--specdec-results)?" in str(info.value)


def test_worker_files_of_a_name_with_glob_characters_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "nightly[h100].json"
    (tmp_path / "nightly[h100].gw0.json").write_text(json.dumps(doc([config("ngram")])))
    merged = merge_worker_results(path, since=0.0)
    assert merged is not None and [c["name"] for c in merged["configs"]] == ["ngram"]


def test_a_config_in_two_workers_files_keeps_both_workers_parts(tmp_path: Path) -> None:
    gw0 = {
        **doc([config("ngram", load=[load_round(4), load_round(4, session=2)])]),
        "drift": [{"config": "ngram", "message": "gw0"}],
        "references": [{"name": "r0"}],
    }
    gw1 = {
        **doc([config("ngram", engine_version="b2", load=[load_round(8)])]),
        "drift": [{"config": "ngram", "message": "gw1"}],
        "references": [{"name": "r1"}],
    }
    (tmp_path / "r.gw0.json").write_text(json.dumps(gw0))
    (tmp_path / "r.gw1.json").write_text(json.dumps(gw1))
    (tmp_path / "r.gw0.prev.json").write_text(json.dumps(gw1))  # an earlier run's, not merged
    merged = merge_worker_results(tmp_path / "r.json", since=0.0)
    assert merged is not None
    (cfg,) = merged["configs"]
    assert cfg["extra"]["workers"] == ["gw0", "gw1"]
    # gw1's sessions come after gw0's highest, of its runs (1) and its load rounds (2)
    assert sorted({r["session"] for r in cfg["runs"]}) == [1, 3]
    assert [(e["clients"], e["session"]) for e in cfg["extra"]["load"]] == [(4, 1), (4, 2), (8, 3)]
    assert [d["message"] for d in merged["drift"]] == ["gw0", "gw1"]
    assert [r["name"] for r in merged["references"]] == ["r0", "r1"]
    assert "config ngram: engine version b1 in gw0, b2 in gw1" in " ".join(merged["notes"])
    assert sorted(merged["workers"]) == ["r.gw0.json", "r.gw1.json"]
