"""What the xdist controller saw of its workers, and what a lost worker means for the merged
results.

Every test of a config belongs to the config's group. Each worker reads the group from its
tests' parameters (the ``specdec_slot`` a test runs in) and writes a map, test id → group, to a
folder the controller named in the worker's input (``GROUPS_KEY``), before it reports its
collection; the controller reads it when that report arrives. So the grouping never depends on
the test id, which pytest 9.2 no longer lets xdist rewrite (pytest-xdist #1386). Where no map
came (a worker on another host), xdist's own ``<test id>@<group>`` suffix is read instead.

The controller sees a teardown report for every test that ran, on which worker, and hears of a
worker that went down with an error and of the test it was running. A config whose worker was
lost is marked in the merged document: its record gets an ``error`` naming the worker, the
test and how much did not run; its measured runs are kept, never completed or averaged into
anything. A config that had not started when its worker was lost gets a record with that
error and no runs. A config whose tests ran on two workers is named too: its server sessions
were booted twice, and its verdict judged only part of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specdec.core.results import atomic_write_json

GROUPS_KEY = "specdec_groups"  # workerinput: the folder the workers write their group maps to


def groups_file(folder: Path, worker: str) -> Path:
    return folder / f"{worker}.json"


def write_groups(folder: Path, worker: str, groups: Mapping[str, str]) -> None:
    """A worker's map, test id → config group, written whole (temp file and rename)."""
    atomic_write_json(groups_file(folder, worker), dict(groups))


def read_groups(folder: Path, worker: str) -> dict[str, str]:
    """The map a worker wrote; empty when it wrote none (e.g. it runs on another host)."""
    try:
        found = json.loads(groups_file(folder, worker).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(k): str(v) for k, v in found.items()}


def group_of(nodeid: str) -> str | None:
    """The group xdist itself appends to a test id under ``--dist loadgroup`` where pytest lets
    it (``…::test[baseline-haiku]@baseline`` → ``baseline``; pytest ≤ 9.1)."""
    head, sep, group = nodeid.rpartition("@")
    bare = sep and "::" in head and not any(c in group for c in "/[]")
    return group if bare and group else None


def short_test(nodeid: str) -> str:
    """A test id without its file and group: ``test_throughput[baseline-haiku]``."""
    return nodeid.rpartition("::")[2].rpartition("@")[0] or nodeid


@dataclass
class LostWorker:
    """A worker that went down with an error (``error`` as xdist gives it)."""

    worker: str
    error: str
    running: str | None = None  # the test id it was running, when xdist knew it

    def describe(self) -> str:
        text = f"xdist worker {self.worker} went down ({self.error})"
        if self.running:
            text += f" while running {short_test(self.running)}"
        return text


@dataclass
class WorkerLedger:
    """The controller's account of the workers: tests per config group, tests that ran, lost
    workers. Fed by the xdist hooks; read once at the end of the run."""

    groups: dict[str, str] = field(default_factory=dict)  # test id -> group, from the workers
    tests: dict[str, set[str]] = field(default_factory=dict)  # group -> its test ids
    ran: set[str] = field(default_factory=set)
    ran_on: dict[str, set[str]] = field(default_factory=dict)  # group -> workers that ran it
    lost: list[LostWorker] = field(default_factory=list)

    def group(self, nodeid: str) -> str | None:
        """A test's config group: from its worker's map, else from xdist's id suffix."""
        return self.groups.get(nodeid) or group_of(nodeid)

    def collected(self, ids: Iterable[str], groups: Mapping[str, str] | None = None) -> None:
        """A worker's collection, with the group map it wrote (``read_groups``)."""
        self.groups.update(groups or {})
        for nodeid in ids:
            group = self.group(nodeid)
            if group is not None:
                self.tests.setdefault(group, set()).add(nodeid)

    def finished(self, nodeid: str, worker: str | None) -> None:
        self.ran.add(nodeid)
        group = self.group(nodeid)
        if group is not None and worker is not None:
            self.ran_on.setdefault(group, set()).add(worker)

    def split(self) -> dict[str, list[str]]:
        """Group → the workers it ran on, for the groups that ran on more than one."""
        return {g: sorted(w) for g, w in sorted(self.ran_on.items()) if len(w) > 1}

    def _lost(self, worker: str) -> LostWorker:
        """The lost worker's entry, added on first word of it ("crashed" until xdist says
        more)."""
        for lost in self.lost:
            if lost.worker == worker:
                return lost
        self.lost.append(LostWorker(worker, "crashed"))
        return self.lost[-1]

    def worker_down(self, worker: str, error: object) -> None:
        """A worker left; ``error`` is None for a normal shutdown."""
        if error is not None:
            self._lost(worker).error = str(error).strip() or "no reason given"

    def crashed_while(self, worker: str, nodeid: str) -> None:
        """xdist names the test a lost worker was running (it is reported failed)."""
        self.ran.add(nodeid)
        self._lost(worker).running = nodeid

    def damage(self) -> dict[str, str]:
        """Config name → why its results are incomplete, for the configs a lost worker hit
        (the one it was running, and any with tests that never ran). Empty when no worker was
        lost: tests left out by ``-x`` or ``--maxfail`` are not a fault."""
        if not self.lost:
            return {}
        crashed_in = {self.group(w.running): w for w in self.lost if w.running}
        lost_text = "; ".join(w.describe() for w in self.lost)
        out: dict[str, str] = {}
        for group, ids in sorted(self.tests.items()):
            missing = len(ids - self.ran)
            worker = crashed_in.get(group)
            if worker is None and not missing:
                continue
            cause = worker.describe() if worker is not None else lost_text
            parts = [cause]
            if missing:
                parts.append(f"{missing} of {len(ids)} tests did not run")
            others = sorted(self.ran_on.get(group, set()) - {w.worker for w in self.lost})
            if others:
                parts.append(f"others ran on {', '.join(others)}")
            out[group] = "; ".join(parts)
        return out


def mark_lost_workers(
    merged: dict[str, Any], ledger: WorkerLedger, configs: Mapping[str, dict[str, Any]]
) -> None:
    """Mark the merged document with the lost workers: ``lost_workers`` at the top, an
    ``error`` on every config they hit (a new record, with no runs, for one that never wrote
    any). ``configs`` maps a config name to the record to start from (name, engine, config).
    The summary's tables show each config's error from its record."""
    if not ledger.lost:
        return
    merged["lost_workers"] = [
        {
            "worker": w.worker,
            "error": w.error,
            "running": w.running,
            "config": ledger.group(w.running) if w.running else None,
        }
        for w in ledger.lost
    ]
    records = {c["name"]: c for c in merged["configs"]}
    for name, why in ledger.damage().items():
        record = records.get(name)
        if record is None:
            record = {**configs.get(name, {"name": name}), "runs": []}
            merged["configs"].append(record)
        kept = sum(1 for r in record.get("runs", []) if r.get("phase") == "measure")
        record["error"] = f"incomplete: {why}; {kept} measured runs kept"
        record.setdefault("extra", {})["lost_worker"] = True


def lost_worker_lines(ledger: WorkerLedger) -> list[str]:
    """One summary line per lost worker."""
    return [f"{w.describe()}; its results are kept as far as it wrote them" for w in ledger.lost]


def mark_split_configs(merged: dict[str, Any], ledger: WorkerLedger) -> list[str]:
    """The configs whose tests ran on more than one worker (the controller's reports) or whose
    records came from more than one worker's file, by name; each record gets an ``error``
    naming the workers (the summary prints it). Such a run fails: its verdicts judged parts."""
    split = ledger.split()
    for record in merged["configs"]:
        workers = record.get("extra", {}).get("workers", [])
        if len(workers) > 1:
            split[record["name"]] = sorted({*split.get(record["name"], []), *workers})
    records = {c["name"]: c for c in merged["configs"]}
    for name, workers in sorted(split.items()):
        why = (
            f"split: its tests ran on xdist workers {', '.join(workers)}, so its engine was "
            "booted on each and no one process judged all of its runs; run under the plugin's "
            "scheduler (-n N, or -n N --dist loadgroup) without worker restarts"
        )
        record = records.get(name)
        if record is not None:
            record["error"] = f"{record['error']}; {why}" if record.get("error") else why
    return sorted(split)
