"""One report from many runners: results files joined and grouped by hardware key.

A nightly matrix writes one results file per runner job (and pytest-xdist one per worker).
``specdec report merge`` joins them: files are grouped by their hardware key (GPU name, count,
driver, power limit, clock lock; or the CPU), and inside a group a config measured in several
files (several workers, or several runners of one key) has its runs joined, each file's server
sessions kept apart, when the rest of its baseline key agrees: model and draft hashes, config
hash, workload, output length, engine flags. A difference is refused with the field named
(engine versions that differ are joined and said in a note, as a baseline's history joins
them); different hardware keys never share a table.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_specdec.core.joins import join_config
from pytest_specdec.core.results import RESULTS_SCHEMA, ResultsError, load_results
from pytest_specdec.measure.roofline import annotate
from pytest_specdec.verdict.baselines import hardware_identity, key_for, key_mismatch
from pytest_specdec.verdict.sessions import sessions_of

MERGED_SCHEMA = 1


class MergeError(ValueError):
    """Results that cannot be one comparison; the message names the files and the field."""


def hardware_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    gpu = doc.get("gpu")
    devices = gpu.get("devices") if isinstance(gpu, Mapping) else None
    return hardware_identity(doc.get("host") or {}, devices)


def load_many(paths: Sequence[Path]) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Results files by path; a folder stands for its results files (``folder_results``), where
    other JSON files (e.g. pytest-benchmark exports) and an earlier run's results kept beside a
    results file (``<stem>.prev.json``) are skipped with a note. A named file must be results. A
    pytest-xdist worker's file that a merged results file lists (``workers``) is skipped with
    a note: its runs are in the merged file."""
    found: list[tuple[Path, dict[str, Any]]] = []
    notes: list[str] = []
    for path in paths:
        if not path.is_dir():
            found.append((path, load_results(path)))
            continue
        for child in folder_results(path):
            if child.name.endswith((".prev.json", ".prev.json.gz")):
                notes.append(
                    f"skipped: {child} holds an earlier run's results; name it to merge it"
                )
                continue
            try:
                found.append((child, load_results(child)))
            except ResultsError as exc:
                notes.append(f"skipped: {exc}")
    found = _without_copies(_without_merged_workers(found, notes), notes)
    if not found:
        raise MergeError(f"no results files in {', '.join(map(str, paths))}")
    return [(str(p), d) for p, d in found], notes


def _without_copies(
    found: list[tuple[Path, dict[str, Any]]], notes: list[str]
) -> list[tuple[Path, dict[str, Any]]]:
    """``found`` with each run once: a file given twice, or a copy of one (the same results,
    gzipped or not), is skipped with a note; counted again its sessions would be more server
    sessions, and every CI would narrow as if they had been measured twice."""
    seen: dict[str, Path] = {}
    kept = []
    for path, doc in found:
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        if digest in seen:
            same = "named twice" if path.resolve() == seen[digest].resolve() else (
                f"the same results as {seen[digest]}")  # fmt: skip
            notes.append(f"skipped: {path}: {same}; a run is counted once")
            continue
        seen[digest] = path
        kept.append((path, doc))
    return kept


def folder_results(folder: Path) -> list[Path]:
    """The results files below ``folder``: ``*.json`` and ``*.json.gz`` (as results are kept
    gzipped), hidden ones left out, in path order."""
    found = {p for pattern in ("*.json", "*.json.gz") for p in folder.rglob(pattern)}
    return sorted(p for p in found if not p.name.startswith("."))


def _without_merged_workers(
    found: list[tuple[Path, dict[str, Any]]], notes: list[str]
) -> list[tuple[Path, dict[str, Any]]]:
    """``found`` less the pytest-xdist worker files that a merged results file among them
    lists (``workers``: names beside it) and that come from its run (started while it ran),
    each named in ``notes``: counted again they would be more server sessions."""
    merged_into: dict[Path, tuple[Path, Mapping[str, Any]]] = {}
    for path, doc in found:
        workers = doc.get("workers")
        for name in workers if isinstance(workers, dict) else {}:
            merged_into[(path.parent / str(name)).resolve()] = (path, doc)
    kept = []
    for path, doc in found:
        merged, into = merged_into.get(path.resolve(), (path, doc))
        span = (str(into.get("started_at")), str(into.get("finished_at")))
        if merged != path and span[0] <= str(doc.get("started_at")) <= span[1]:
            notes.append(f"skipped: {path}: an xdist worker's file; its runs are in {merged}")
            continue
        kept.append((path, doc))
    return kept


def merge(files: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One results document per hardware key, in the order the keys first appear."""
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for name, doc in files:
        groups.setdefault(json.dumps(hardware_of(doc), sort_keys=True), []).append((name, doc))
    return [merge_group(items) for items in groups.values()]


def _check_workload(items: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    first_name, first = items[0]
    want = (first.get("workload") or {}).get("sha256")
    for name, doc in items[1:]:
        got = (doc.get("workload") or {}).get("sha256")
        if got != want:
            raise MergeError(
                f"{name} and {first_name} ran on the same hardware but measured different "
                f"workloads (workload_sha256 {got} vs {want}): one table cannot hold both; "
                "merge them separately"
            )


def merge_group(items: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The results files of one hardware key as one results document."""
    _check_workload(items)
    configs: dict[str, dict[str, Any]] = {}
    keys: dict[str, tuple[str, dict[str, Any]]] = {}
    verdicts: list[dict[str, Any]] = []
    joined: list[str] = []  # notes of the joins (engine versions that differ)
    for name, doc in items:
        for cfg in doc["configs"]:
            key = key_for(doc, cfg)
            if cfg["name"] not in configs:
                configs[cfg["name"]] = copy.deepcopy(dict(cfg))
                configs[cfg["name"]].setdefault("extra", {})["sources"] = [name]
                keys[cfg["name"]] = (name, key)
                continue
            first_name, first_key = keys[cfg["name"]]
            diff = key_mismatch(first_key, key)
            if diff:
                raise MergeError(
                    f"config {cfg['name']}: {name} and {first_name} differ in "
                    f"{'; '.join(diff)}: not one comparison; rename one config or merge them "
                    "separately"
                )
            joined += _join(configs[cfg["name"]], cfg, name, first_name)
        for v in doc.get("verdicts") or []:
            verdicts.append({**v, "notes": [f"judged in {name}", *(v.get("notes") or [])]})
    first = items[0][1]
    most = max((len(sessions_of(c)) for c in configs.values()), default=1)
    merged = {
        **{k: v for k, v in first.items() if k not in ("configs", "verdicts", "notes")},
        "options": {**(first.get("options") or {}), "sessions": max(most, 1)},  # joined here
        "schema": RESULTS_SCHEMA,
        "started_at": min(str(d.get("started_at")) for _, d in items),
        "finished_at": max(str(d.get("finished_at")) for _, d in items),
        "configs": list(configs.values()),
        "verdicts": verdicts,
        "drift": [x for _, d in items for x in d.get("drift") or []],
        "references": [x for _, d in items for x in d.get("references") or []],
        "notes": sorted({n for _, d in items for n in d.get("notes") or []} | set(joined)),
        "sources": [
            {"file": n, "host": (d.get("host") or {}).get("hostname"), "gpu": d.get("gpu")}
            for n, d in items
        ],
    }
    return annotate(merged)


def _join(kept: dict[str, Any], cfg: Mapping[str, Any], name: str, first: str) -> list[str]:
    """Add another file's record of the same config (runs, load rounds and the rest of what
    ``join_config`` joins); its server sessions get new numbers. Returns the join's notes."""
    note = join_config(kept, copy.deepcopy(dict(cfg)), name, first)
    kept["extra"]["sources"].append(name)
    if cfg.get("error") and not kept.get("error"):
        kept["error"] = f"{name}: {cfg['error']}"
    return [note] if note else []


def markdown(groups: Sequence[Mapping[str, Any]], notes: Sequence[str] = ()) -> str:
    """A Markdown report: one section per hardware key (the single-run report of each)."""
    from pytest_specdec.report.export import markdown_summary

    files = sum(len(g.get("sources") or []) for g in groups)
    out = [f"# Merged results: {files} file(s), {len(groups)} hardware key(s)", ""]
    out += [f"- {n}" for n in notes]
    for group in groups:
        sources = ", ".join(f"`{s['file']}`" for s in group.get("sources") or [])
        out += ["", markdown_summary(group), "", f"Sources: {sources}"]
    return "\n".join(out) + "\n"


def document(groups: Sequence[Mapping[str, Any]], notes: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON report: every group a results document of its own."""
    return {"merged_schema": MERGED_SCHEMA, "notes": list(notes), "groups": list(groups)}
