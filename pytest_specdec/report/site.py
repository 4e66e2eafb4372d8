"""``specdec report site OUT_DIR``: the nightly dashboard, a static site from the baseline
store and nightly results files (docs/dashboard.md).

- ``index.html``: one row per key (hardware x engine x config x model): the latest suite score
  and its verdict, a sparkline over the nights, the last change point, the acceptance verdict;
- ``keys/<key>.html``: the interactive trend with change points and baseline resets, the
  per-prompt table and heatmaps, the latest night's GPU telemetry, every night, and each load
  level's history where the key's sessions measured load levels;
- ``runs/<file>.html``: one results file's load curves (throughput and speedup against clients,
  the crossover) where it measured load levels, its Markdown report, its engine commands
  (redacted) and its engine logs where they are beside it;
- ``assets/``: the chart library, the style sheet and the page script, written once.

Pages read nothing from the network; they work from ``file://`` as from GitHub Pages.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pytest_specdec.core.results import atomic_write_json, utc_now
from pytest_specdec.report.site_assets import VIOLATIONS, check_available, write_assets
from pytest_specdec.report.site_data import SiteData, SiteError, gather
from pytest_specdec.report.site_key import key_page
from pytest_specdec.report.site_load import load_configs
from pytest_specdec.report.site_pages import overview, run_page
from pytest_specdec.verdict.history import HistoryPolicy

OWNED = ("index.html", "assets", "keys", "runs")


@dataclass(frozen=True)
class SiteSummary:
    """What was written: the site's folder, its files, their total size and the notes."""

    out: Path
    files: list[Path]
    data: SiteData

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    def describe(self) -> str:
        keys = self.data.keys
        text = (
            f"{self.out / 'index.html'}: {len(keys)} keys, "
            f"{sum(k.night_count for k in keys)} key-nights, {len(self.data.runs)} runs; "
            f"{len(self.files)} files, {self.size / 1e6:.2f} MB"
        )
        skipped = [*self.data.notes, *(f"{k.name}: {n}" for k in keys for n in k.notes)]
        return text + "".join(f"\nnote: {n}" for n in skipped)


MANIFEST = ".specdec-site.json"  # the files a build wrote, so the next removes only those


def _clear(out: Path) -> None:
    """Remove what an earlier build wrote, so no page is stale: the files its manifest lists
    (and the folders they leave empty), or, from a build older than manifests, the site's own
    names. A folder that holds those names but no site (``assets/`` of the user's docs) is
    refused before anything is written: a file the site did not write is never removed."""
    listed = _manifest(out)
    if listed is not None:
        for rel in listed:
            (out / rel).unlink(missing_ok=True)
        folders = [p for name in OWNED[1:] if (out / name).is_dir()
                   for p in [out / name, *(out / name).rglob("*")] if p.is_dir()]  # fmt: skip
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()
        return
    present = [name for name in OWNED if (out / name).exists()]
    if not present:
        return
    index = out / "index.html"
    if not (index.is_file() and VIOLATIONS in index.read_text(errors="replace")):
        raise SiteError(
            f"{out} already holds {', '.join(present)}, which no earlier report site wrote "
            f"(no {MANIFEST} there); the site would replace them: name a new or empty folder "
            "for it (e.g. site/), or move them aside"
        )
    for name in present:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()


def _owned(parts: tuple[str, ...]) -> bool:
    return bool(parts) and parts[0] in OWNED and ".." not in parts


def _manifest(out: Path) -> list[str] | None:
    """The files an earlier build listed in ``out`` (None: no manifest), each inside one of the
    site's own folders; a damaged manifest is an error naming it."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SiteError(f"{path} is damaged ({exc}): delete it and the site's files, then "
                        "build again") from exc  # fmt: skip
    ok = [f for f in files if isinstance(f, str) and _owned(PurePosixPath(f).parts)]
    if len(ok) != len(files):
        raise SiteError(f"{path} lists files outside the site's folders: delete it and the "
                        "site's files, then build again")  # fmt: skip
    return ok


def build_site(
    out: Path,
    baseline_dir: Path,
    results: Sequence[Path] = (),
    policy: HistoryPolicy | None = None,
) -> SiteSummary:
    """Write the dashboard to ``out``; SiteError on unusable input, SiteUnavailable without
    the chart library (both before anything is written)."""
    check_available()
    data = gather(baseline_dir, results, policy or HistoryPolicy())
    generated = utc_now()
    out.mkdir(parents=True, exist_ok=True)
    _clear(out)
    charts = any(k.nights or k.load_nights for k in data.keys)
    files = write_assets(out, charts=charts or any(load_configs(r.doc) for r in data.runs))
    pages: dict[Path, str] = {}
    sources = ", ".join([f"baselines {baseline_dir}", *(f"results {p}" for p in results)])
    pages[out / "index.html"] = overview(data, generated, sources)
    for view in data.keys:
        pages[out / "keys" / f"{view.slug}.html"] = key_page(view, generated)
    for run in data.runs:
        pages[out / "runs" / f"{run.slug}.html"] = run_page(run, data.keys, out, generated)
    for path, text in pages.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    logs = sorted(p for p in (out / "runs").rglob("*.txt")) if (out / "runs").is_dir() else []
    written = [*files, *pages, *logs]
    manifest = {"files": sorted(p.relative_to(out).as_posix() for p in written)}
    atomic_write_json(out / MANIFEST, manifest)
    return SiteSummary(out, written, data)
