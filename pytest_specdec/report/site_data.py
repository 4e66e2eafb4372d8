"""What the nightly dashboard shows, gathered from the baseline store and nightly results files.

One *key* is one baseline key (hardware x engine x config x models x workload), named as its
baseline file is (``gpu-nvidia-h200-x1/sglang/dflash-b16--model.json``). Its nights are made
exactly as ``specdec history`` makes them (:func:`pytest_specdec.verdict.history.nights`,
:func:`~pytest_specdec.verdict.history.change_points`), each server session once (by its id),
from the baseline file and from any results files given; here each night also keeps its
per-prompt values, so the pages can show a per-prompt table and heatmap. Sessions that measured
load levels (``levels`` in the baseline entry) also make the key's *load nights*: per night and
client count, the level's aggregate output tok/s with its CI. A session with load levels only
(no suite score) is in the load nights and not in the suite's nights.

Inputs are checked where they are read: an empty folder, or no input at all, is a
:class:`SiteError`; so are files of another schema version (a site never mixes them); a file
that is not valid JSON, or not a results file, is skipped and named in the site's notes.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy import stats as sps

from pytest_specdec.core.results import RESULTS_SCHEMA, ResultsError, load_results
from pytest_specdec.report.merge import folder_results
from pytest_specdec.verdict.baselines import (
    BASELINE_SCHEMA,
    BaselineError,
    load_baseline,
)
from pytest_specdec.verdict.history import (
    ChangePoint,
    HistoryPolicy,
    change_points,
    joined,
)
from pytest_specdec.verdict.nights import by_night, has_suite, night_start, nights


class SiteError(ValueError):
    """The inputs cannot make a site (none given, an empty folder, mixed schema versions)."""


def slug(name: str) -> str:
    """A file name for a page: ``gpu-x/engine/config--model.json`` → ``gpu-x__engine__...``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.removesuffix(".json").replace("/", "__"))


@dataclass(frozen=True)
class PromptNight:
    """One prompt (or one load level) on one night: geometric-mean tok/s over its sessions,
    with a 95% CI; ``runs``: its measured runs (a level's rounds)."""

    tok_s: float
    ci_low: float | None
    ci_high: float | None
    accept: float | None
    runs: int


@dataclass(frozen=True)
class NightView:
    """One night of one key: the suite score (as ``specdec history`` computes it) and more."""

    started_at: str
    tok_s: float
    ci_low: float | None
    ci_high: float | None
    accept: float | None
    sessions: int
    engine_version: str | None
    commit: str | None
    prompts: dict[str, PromptNight]
    run: str | None  # the slug of the run page of the results file it came from, if any


@dataclass(frozen=True)
class LoadNight:
    """One night of a key's load levels: per client count, the aggregate output tok/s of the
    sessions that measured it (geometric mean of their rounds' means, 95% CI)."""

    started_at: str
    levels: dict[int, PromptNight]
    sessions: int
    engine_version: str | None
    commit: str | None
    run: str | None  # the slug of the run page of the results file it came from, if any


@dataclass(frozen=True)
class Reset:
    """The night a key's stored baseline history starts, where earlier nights exist."""

    night: str
    earlier: int  # nights before it, known only from results files


@dataclass
class RunView:
    """One results file: its page, and the document."""

    path: Path
    slug: str
    doc: dict[str, Any]

    @property
    def started_at(self) -> str:
        return str(self.doc.get("started_at") or "")


@dataclass
class KeyView:
    name: str
    key: dict[str, Any]
    nights: list[NightView] = field(default_factory=list)
    points: list[ChangePoint] = field(default_factory=list)
    resets: list[Reset] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    latest_config: dict[str, Any] | None = None  # the latest night's record in a results file
    # (the latest night with a suite score; with load levels where the key has only those)
    latest_run: RunView | None = None
    load_nights: list[LoadNight] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def night_count(self) -> int:
        """The key's nights: with a suite score, load levels, or both."""
        return len({(n.started_at, n.run) for n in self.nights}
                   | {(n.started_at, n.run) for n in self.load_nights})  # fmt: skip

    @property
    def last_night(self) -> str | None:
        """The latest night with a suite score or load levels."""
        found = [v[-1].started_at for v in (self.nights, self.load_nights) if v]
        return max(found) if found else None

    def verdict(self) -> dict[str, Any] | None:
        """The latest night's suite verdict, where its results file carries one."""
        if self.latest_run is None or self.latest_config is None:
            return None
        found = [
            v
            for v in self.latest_run.doc.get("verdicts") or []
            if isinstance(v, Mapping) and v.get("config") == self.latest_config.get("name")
        ]
        return dict(found[-1]) if found else None

    def acceptance(self) -> dict[str, Any] | None:
        """The latest night's acceptance verdict (the verdict entry's ``acceptance``: outcome
        in ``verdict``, reason in ``message``), where its results file carries one."""
        found = (self.verdict() or {}).get("acceptance")
        return dict(found) if isinstance(found, Mapping) and found.get("verdict") else None


@dataclass
class SiteData:
    keys: list[KeyView]
    runs: list[RunView]
    notes: list[str]  # inputs skipped, and why


# ------------------------------------------------------------------------------ numbers


def _t_interval(logs: Sequence[float], sd: float | None, n: int) -> tuple[float, float] | None:
    """95% t-interval of a mean ln tok/s: over several sessions' means, or within one."""
    if len(logs) >= 2:
        half = float(sps.t.ppf(0.975, len(logs) - 1)) * statistics.stdev(logs)
        half /= math.sqrt(len(logs))
    elif sd is not None and n >= 2:
        half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    else:
        return None
    center = statistics.fmean(logs)
    return math.exp(center - half), math.exp(center + half)


def _prompt_night(cells: Sequence[Mapping[str, Any]]) -> PromptNight | None:
    cells = [c for c in cells if isinstance(c, Mapping) and c.get("mean_log") is not None]
    if not cells:
        return None
    logs = [float(c["mean_log"]) for c in cells]
    one = cells[0]
    ci = _t_interval(logs, one.get("sd_log"), int(one.get("n") or 0))
    accepts = [float(c["accept_length"]) for c in cells if c.get("accept_length")]
    return PromptNight(
        tok_s=math.exp(statistics.fmean(logs)),
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        accept=statistics.fmean(accepts) if accepts else None,
        runs=sum(int(c.get("n") or 0) for c in cells),
    )


def night_views(
    sessions: Sequence[Mapping[str, Any]], run_of: Mapping[str, str]
) -> list[NightView]:
    """The nights of one key, oldest first; ``run_of`` maps a session id to its run page."""
    groups = by_night(sessions)
    out = []
    for night in nights(sessions):
        group = groups[night.key]
        suites = [s["suite"] for s in group]
        ci = _t_interval(
            [float(s["mean_log"]) for s in suites], suites[0].get("sd_log"),
            int(suites[0].get("n") or 0),
        )  # fmt: skip
        names = dict.fromkeys(p for s in group for p in s.get("prompts") or {})
        prompts = {
            p: cell
            for p in names
            if (cell := _prompt_night([(s.get("prompts") or {}).get(p) or {} for s in group]))
        }
        runs = [run_of[str(s.get("id"))] for s in group if str(s.get("id")) in run_of]
        out.append(
            NightView(
                started_at=night.started_at, tok_s=math.exp(night.mean_log),
                ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
                accept=night.accept, sessions=night.sessions,
                engine_version=night.engine_version, commit=night.commit, prompts=prompts,
                run=runs[-1] if runs else None,
            )
        )  # fmt: skip
    return out


def load_night_views(
    sessions: Sequence[Mapping[str, Any]], run_of: Mapping[str, str]
) -> list[LoadNight]:
    """The nights of one key's load levels, oldest first, from the sessions that have them."""
    groups = by_night(sessions, keep=lambda s: isinstance(s.get("levels"), Mapping)
                      and bool(s["levels"]))  # fmt: skip
    out = []
    for key in sorted(groups):
        group = groups[key]
        when = night_start(group[0])
        counts = sorted({int(c) for s in group for c in s["levels"]})
        levels = {
            c: cell
            for c in counts
            if (cell := _prompt_night([s["levels"].get(str(c)) or {} for s in group]))
        }
        runs = [run_of[str(s.get("id"))] for s in group if str(s.get("id")) in run_of]
        out.append(
            LoadNight(
                started_at=when, levels=levels, sessions=len(group),
                engine_version=group[-1].get("engine_version"), commit=group[-1].get("commit"),
                run=runs[-1] if runs else None,
            )
        )  # fmt: skip
    return out


# ------------------------------------------------------------------------------ loading


def _schema_of(path: Path) -> object:
    """The ``schema`` of a JSON document that has one and a ``configs`` or ``sessions`` list;
    None otherwise (not valid JSON, or not one of this tool's documents)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("schema"), int):
        return None
    return data["schema"] if ("configs" in data or "sessions" in data) else None


def _result_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = folder_results(path)
            if not found:
                raise SiteError(f"--results folder {path} holds no results (*.json, *.json.gz)")
            out += found
        elif path.is_file():
            out.append(path)
        else:
            raise SiteError(f"--results {path} does not exist")
    return out


class _Gatherer:
    def __init__(self, baseline_dir: Path) -> None:
        self.root = baseline_dir
        self.keys: dict[str, KeyView] = {}
        self.sessions: dict[str, dict[str, Mapping[str, Any]]] = {}
        self.stored: dict[str, set[str]] = {}  # session ids of each key's baseline file
        self.run_of: dict[str, str] = {}
        self.latest: dict[str, dict[str, tuple[RunView, dict[str, Any]]]] = {}
        self.runs: list[RunView] = []
        self.notes: list[str] = []
        self.other_schema: list[str] = []

    def add(self, name: str, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> None:
        self.keys.setdefault(name, KeyView(name, dict(key)))
        self.sessions.setdefault(name, {}).update({str(e.get("id")): e for e in entries})

    def refused(self, path: Path, exc: Exception, schema: int) -> None:
        found = _schema_of(path)
        if found is not None and found != schema:
            self.other_schema.append(f"{path} (schema {found})")
        else:
            self.notes.append(f"skipped {path}: {exc}")

    def baselines(self) -> None:
        if not self.root.is_dir():
            return
        for path in sorted(self.root.rglob("*.json")):
            if path.name.startswith("."):
                continue
            try:
                baseline = load_baseline(path)
            except BaselineError as exc:
                self.refused(path, exc, BASELINE_SCHEMA)
                continue
            if baseline is not None:
                name = str(path.relative_to(self.root))
                self.add(name, baseline.key, baseline.sessions)
                self.stored[name] = {str(s.get("id")) for s in baseline.sessions}

    def results(self, path: Path) -> None:
        try:
            doc = load_results(path)
        except ResultsError as exc:
            self.refused(path, exc, RESULTS_SCHEMA)
            return
        run = RunView(path, f"{len(self.runs) + 1:03d}-{slug(path.stem)}", doc)
        self.runs.append(run)
        for config in doc["configs"]:
            name, key, entries, diff = joined(doc, config, self.root, self.keys)
            if diff:
                target = self.keys.setdefault(name, KeyView(name, dict(key)))
                target.notes.append(f"{path}: {config.get('name')} left out: {'; '.join(diff)}")
                continue
            self.add(name, key, entries)
            self.run_of.update({str(e.get("id")): run.slug for e in entries})
            self.latest.setdefault(name, {})[run.started_at] = (run, config)

    def finish(self, policy: HistoryPolicy) -> list[KeyView]:
        out = []
        for name, view in sorted(self.keys.items()):
            sessions = list(self.sessions.get(name, {}).values())
            view.nights = night_views(sessions, self.run_of)
            view.points = change_points(nights(sessions), policy)  # the nights of view.nights
            view.resets = _resets(view.nights, sessions, self.stored.get(name, set()))
            view.load_nights = load_night_views(sessions, self.run_of)
            # the record of the latest suite night (its telemetry, its verdict); of the latest
            # load night where the key has load levels only
            anchor = view.nights[-1].started_at if view.nights else view.last_night
            if anchor is not None:
                found = self.latest.get(name, {}).get(anchor)
                if found is not None:
                    view.latest_run, view.latest_config = found
            if view.nights or view.load_nights or view.notes:
                out.append(view)
        return out


def _resets(
    views: Sequence[NightView], sessions: Sequence[Mapping[str, Any]], stored: set[str]
) -> list[Reset]:
    """Where the stored baseline history starts after nights known only from results files
    (the baseline file was deleted or started over)."""
    first = min(
        (night_start(s) for s in sessions if str(s.get("id")) in stored and has_suite(s)),
        default=None,
    )  # fmt: skip
    if first is None:
        return []
    earlier = sum(1 for v in views if v.started_at < first)
    return [Reset(first, earlier)] if earlier else []


def gather(
    baseline_dir: Path, results: Sequence[Path] = (), policy: HistoryPolicy | None = None
) -> SiteData:
    """Every key's nights, change points and latest records; SiteError on unusable input."""
    if not results and not (baseline_dir.is_dir() and any(baseline_dir.rglob("*.json"))):
        where = ("is empty" if baseline_dir.is_dir() else "is a file, not a folder"
                 if baseline_dir.exists() else "does not exist")  # fmt: skip
        raise SiteError(
            f"nothing to build a site from: the baseline folder {baseline_dir} {where} and no "
            "results files were given; pass --baseline-dir DIR and/or --results FILE_OR_DIR"
        )
    gatherer = _Gatherer(baseline_dir)
    gatherer.baselines()
    for path in _result_files(results):
        gatherer.results(path)
    if gatherer.other_schema:
        mixed = "mixed schema versions" if gatherer.runs or gatherer.keys else "another schema"
        raise SiteError(
            f"{mixed}: {', '.join(gatherer.other_schema)}; this "
            f"pytest-specdec reads results schema {RESULTS_SCHEMA} and baseline schema "
            f"{BASELINE_SCHEMA}: one site never mixes versions; build it with the pytest-specdec "
            "that wrote them, or leave those files out"
        )
    keys = gatherer.finish(policy or HistoryPolicy())
    if not any(k.nights or k.load_nights for k in keys):
        notes = [*gatherer.notes, *(n for k in keys for n in k.notes)]
        raise SiteError(
            "no usable nights in the inputs"
            + (": " + "; ".join(notes) if notes else f" ({baseline_dir}, {len(results)} results)")
        )
    return SiteData(keys, gatherer.runs, gatherer.notes)
