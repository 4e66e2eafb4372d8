"""One config's records from several results files joined: the pytest-xdist workers' files of
one run (``merge_worker_results``, which the controller writes as the run's results) and the
files ``specdec report merge`` joins (``join_config``). Every part a record keeps is kept: runs,
load rounds, server sessions (numbered after the kept ones), costs and lossless checks.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_specdec.core.results import load_results


def merge_worker_results(path: Path, since: float) -> dict[str, Any] | None:
    """The per-worker files ``<stem>.gw<N><suffix>`` written since ``since``, merged into one
    document (None when there are none). The caller writes it to ``path``, once.

    Each config runs on one worker (xdist groups); one found in several is joined
    (``join_config``). Verdicts, drift, reference records and notes are concatenated. The
    worker files are kept beside the merged one.
    """
    worker = re.compile(rf"{re.escape(path.stem)}\.gw\d+{re.escape(path.suffix)}")
    found = path.parent.glob(f"{glob.escape(path.stem)}.gw*{glob.escape(path.suffix)}")
    parts = sorted(p for p in found if worker.fullmatch(p.name) and p.stat().st_mtime >= since)
    if not parts:
        return None
    docs = [load_results(p) for p in parts]
    merged = dict(docs[0])
    merged["options"] = {**merged.get("options", {}), "results_path": str(path)}
    workers = [p.name.removeprefix(f"{path.stem}.").removesuffix(path.suffix) for p in parts]
    merged["configs"], notes = _merge_configs(
        [(w, c) for w, d in zip(workers, docs, strict=True) for c in d["configs"]]
    )
    for key in ("verdicts", "drift", "references"):
        merged[key] = [v for d in docs for v in d.get(key) or []]
    merged["notes"] = sorted({n for d in docs for n in d.get("notes", [])} | set(notes))
    merged["workers"] = {p.name: {"gpu": d.get("gpu")} for p, d in zip(parts, docs, strict=True)}
    merged["started_at"] = min(d["started_at"] for d in docs)
    merged["finished_at"] = max(d["finished_at"] for d in docs)
    return merged


def _merge_configs(
    configs: list[tuple[str, dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per config name from (worker, record) pairs, and the notes of the joins. A
    config found in several workers' files is joined (``join_config``) and those workers
    listed in ``extra.workers``."""
    out: dict[str, dict[str, Any]] = {}
    seen: dict[str, list[str]] = {}
    notes: list[str] = []
    for worker, cfg in configs:
        seen.setdefault(cfg["name"], []).append(worker)
        if cfg["name"] not in out:
            out[cfg["name"]] = dict(cfg)
        else:
            note = join_config(out[cfg["name"]], cfg, worker, seen[cfg["name"]][0])
            notes += [note] if note else []
    for name, workers in seen.items():
        if len(workers) > 1:
            out[name]["extra"] = {**out[name].get("extra", {}), "workers": workers}
    return list(out.values()), notes


def join_config(kept: dict[str, Any], cfg: Mapping[str, Any], name: str, first: str) -> str | None:
    """Add ``name``'s record of a config to ``kept`` (``first``'s): runs, load rounds, sessions,
    costs, lossless checks, its server sessions numbered after ``kept``'s highest. Sessions of
    two engine versions are kept, as a baseline's history keeps them; the note says so."""
    extra, other = dict(kept.get("extra") or {}), cfg.get("extra") or {}
    numbered = [*kept.get("runs", []), *(extra.get("load") or []), *(extra.get("sessions") or [])]
    offset = max((int(e.get("session", 1)) for e in numbered), default=0)

    def shifted(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{**e, "session": int(e.get("session", 1)) + offset} for e in entries]

    kept["runs"] = [*kept.get("runs", []), *shifted(cfg.get("runs") or [])]
    for key in ("load", "sessions", "cost", "cooldown"):  # cost, cooldown: one per session
        if other.get(key):
            added = shifted(other[key]) if key in ("load", "sessions") else list(other[key])
            extra[key] = [*(extra.get(key) or []), *added]
    if other.get("lossless"):
        extra["lossless"] = {**other["lossless"], **(extra.get("lossless") or {})}
    kept["extra"] = extra
    before, after = kept.get("engine_version"), cfg.get("engine_version")
    if before == after:
        return None
    return (
        f"config {kept['name']}: engine version {before} in {first}, {after} in {name} (its "
        f"sessions from {offset + 1} here); the record names {before}"
    )
