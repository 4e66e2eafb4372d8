"""PNG charts of results and baseline history (matplotlib, imported lazily; Agg canvas).

- :func:`results_chart`: output tok/s per prompt, one bar per config, 95% CI error bars, the
  mean accept length written above each bar, and the suite geometric mean as a last group.
- :func:`trend_chart`: the suite score (geometric mean over prompts) of every stored baseline
  session over time, one line per baseline file (config), with a 95% CI bar per session and
  the run's per-run suite values as dots.

Without matplotlib both raise :class:`ChartsUnavailable`, which names the extra to install.
"""

from __future__ import annotations

import importlib
import itertools
import math
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scipy import stats as sps

from pytest_specdec.core.results import atomic_replace
from pytest_specdec.report.export import hardware_label, prompt_names, records
from pytest_specdec.report.markdown import excluded
from pytest_specdec.report.summary import CellSummary, config_cells, suite_geomean
from pytest_specdec.verdict.baselines import Baseline, BaselineError, load_baseline
from pytest_specdec.verdict.history import HistoryUnavailable, change_points
from pytest_specdec.verdict.nights import night_start, nights

PLOT_EXTRA = "pip install 'pytest-specdec[plot]'"
DPI = 150
COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#000000")


class ChartsUnavailable(ImportError):
    """matplotlib is not installed; the message says how to install it."""


class ChartInputError(ValueError):
    """The files given have nothing to chart, or do not exist; the message names them."""


def _mpl(module: str) -> Any:
    """A matplotlib module, imported on first use (typed as Any: matplotlib is optional)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ChartsUnavailable(
            f"PNG charts need matplotlib, which is not installed: {PLOT_EXTRA}"
        ) from exc


def check_available() -> None:
    """Raise :class:`ChartsUnavailable` now (at option parsing) rather than after the run."""
    _mpl("matplotlib")


def _figure(width: float, height: float) -> Any:
    """A matplotlib Figure on an Agg canvas (no pyplot, no global backend switch)."""
    fig = _mpl("matplotlib.figure").Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    _mpl("matplotlib.backends.backend_agg").FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    """Write the PNG atomically (temp file in the same folder, then rename), shared as the
    file it replaces was."""
    atomic_replace(
        path, lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": "pytest-specdec"}),
        suffix=".png",
    )  # fmt: skip
    return path


# ------------------------------------------------------------------------------- results


def _legend_label(name: str, verdict: Mapping[str, Any] | None, boot_failed: bool) -> str:
    if boot_failed:
        return f"{name} (boot failed)"
    suite = (verdict or {}).get("suite")
    if suite and suite.get("ratio") is not None:
        return f"{name}: {verdict['outcome'] if verdict else ''} ({suite['ratio']:.3f}x)"
    return f"{name}: {verdict['outcome']}" if verdict else name


def _bar_group(
    ax: Any,
    x: Sequence[float],
    width: float,
    cells: Sequence[CellSummary | None],
    excluded: Sequence[tuple[int, int]],
    **style: str,
) -> None:
    """One config's bars; ``cells`` None: the server never booted (nothing was measured)."""
    heights = [c.mean if c and c.mean is not None else 0.0 for c in cells]
    errors = [c.ci_half if c and c.ci_half is not None else math.nan for c in cells]
    error_style = {"elinewidth": 1, "ecolor": "#333333"}
    below = [min(e, h) for e, h in zip(errors, heights, strict=True)]  # tok/s is never < 0
    ax.bar(x, heights, width, yerr=[below, errors], capsize=3, error_kw=error_style, **style)
    for xi, h, e, c, (failed, invalid) in zip(x, heights, errors, cells, excluded, strict=True):
        missing = c is None or c.mean is None
        counts = [f"{failed} failed"] * bool(failed) + [f"{invalid} invalid"] * bool(invalid)
        if c is None:
            note = "boot failed"
        elif c.mean is None:
            note = ", ".join(counts) or "not run"
        else:
            accept = [f"a {c.accept_length:.2f}"] if c.accept_length is not None else []
            note = " ".join(accept + [f"({', '.join(counts)})"] * bool(counts))
        if not note:
            continue
        ax.annotate(
            note,
            (xi, h + (0.0 if math.isnan(e) else e)),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
            rotation=90 if missing or width < 0.2 else 0,
            color="#aa0000" if missing else "#222222",
        )


def results_chart(results: Mapping[str, Any], path: Path) -> Path:
    """Grouped bars: prompts (and the suite geomean) by config, 95% CI error bars, accept
    length annotated. Returns ``path``."""
    recs, prompts = records(results), prompt_names(results)
    if not recs or not prompts:
        raise ChartInputError("results document has no configs or no prompts: nothing to chart")
    if not any(r.measured() for r in recs):
        raise ChartInputError(
            "results document holds load levels only, no prompt measured one request at a "
            "time: nothing for this chart; `specdec report site` draws the load curves"
        )
    verdicts = {v.get("config"): v for v in results.get("verdicts") or []}
    groups = [*prompts, "suite geomean"]
    fig = _figure(max(7.0, 1.6 + 1.15 * len(groups) * max(1.0, len(recs) / 2.5)), 4.8)
    ax = fig.add_subplot()
    width = 0.8 / len(recs)
    for i, rec in enumerate(recs):
        boot_failed = bool(rec.error) and not rec.measured()
        cells = config_cells(rec, prompts)
        geo = suite_geomean(cells)
        suite_cell = CellSummary(0, 0, geo, None, geo, None, None, None, None)
        row: list[CellSummary | None] = [*(cells[p] for p in prompts), suite_cell]
        row = [None] * len(row) if boot_failed else row
        offset = (i - (len(recs) - 1) / 2) * width
        label = _legend_label(rec.name, verdicts.get(rec.name), boot_failed)
        color = COLORS[i % len(COLORS)]
        counts = [excluded(rec.measured(p)) for p in prompts] + [(0, 0)]
        xs = [g + offset for g in range(len(groups))]
        _bar_group(ax, xs, width, row, counts, color=color, label=label)
    ax.axvline(len(prompts) - 0.5, color="#999999", linewidth=0.8, linestyle=":")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("output tok/s (mean, 95% CI)")
    ax.margins(y=0.12)
    ax.grid(axis="y", linewidth=0.4, alpha=0.6)
    ax.set_axisbelow(True)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    workload = (results.get("workload") or {}).get("name") or "workload"
    options = results.get("options") or {}
    engines = sorted({f"{r.engine} {r.engine_version}" for r in recs if r.engine_version})
    ax.set_title(f"Output tok/s: {workload} on {hardware_label(results)}", fontsize=11)
    note = (
        f"{options.get('runs', '?')} measured runs per cell, max_tokens "
        f"{options.get('max_tokens', '?')}, run {results.get('started_at', '?')}. "
        "a = mean accept length (tokens per verify step); suite geomean = geometric mean over "
        f"prompts. Engines: {'; '.join(engines) or 'versions unknown'}"
    )
    wrap = int(fig.get_figwidth() * 17)
    fig.supxlabel(textwrap.fill(note, wrap, max_lines=3), fontsize=7, color="#555555")
    return _save(fig, path)


# --------------------------------------------------------------------------------- trend


def _baseline_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    return out


def _load(path: Path) -> Baseline:
    baseline = load_baseline(path)
    if baseline is None:
        raise BaselineError(f"baseline {path} does not exist; pass existing baseline JSON files")
    return baseline


SessionPoint = tuple[datetime, float, float, float]


def _session_point(session: Mapping[str, Any]) -> SessionPoint | None:
    """(time, geometric mean, 95% CI low, high) of a session's suite score; None without one."""
    suite, when = session.get("suite"), night_start(session)
    if not suite or not when:
        return None
    n, mean, sd = int(suite["n"]), float(suite["mean_log"]), float(suite["sd_log"])
    half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) if n >= 2 else 0.0
    return (_when(when), math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def _when(text: object) -> datetime:
    """An ISO 8601 time stamp as an aware datetime (UTC where it names no zone)."""
    start = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return start if start.tzinfo else start.replace(tzinfo=timezone.utc)


def _trend_label(baseline: Baseline, varying: set[str]) -> str:
    key = baseline.key
    parts = [str(key.get("config"))]
    if "model" in varying:
        parts.append(str(key.get("model_name") or key.get("model")))
    if "hardware" in varying:
        parts.append(str((key.get("hardware") or {}).get("name")))
    if "engine" in varying:
        parts.append(str(key.get("engine")))
    n = len(baseline.sessions)
    return " · ".join(parts) + f" ({n} session{'' if n == 1 else 's'})"


def _varying(baselines: Sequence[Baseline]) -> set[str]:
    def fields(b: Baseline) -> dict[str, str]:
        k = b.key
        hw = (k.get("hardware") or {}).get("name")
        return {"model": str(k.get("model_name")), "hardware": str(hw), "engine": str(k["engine"])}

    values = [fields(b) for b in baselines]
    return {f for f in ("model", "hardware", "engine") if len({v[f] for v in values}) > 1}


def _positions(
    times: Sequence[datetime], slots: Mapping[datetime, int], dodge: float
) -> list[float]:
    """x of each session: runs sit in evenly spaced slots (one per start time, in order);
    server sessions of one run share its start and sit side by side; configs are dodged."""
    count = Counter(times)
    seen: dict[datetime, int] = {}
    out = []
    for t in times:
        seen[t] = seen.get(t, -1) + 1
        out.append(slots[t] + (seen[t] - (count[t] - 1) / 2) * 0.18 + dodge * 0.05)
    return out


def _sessions(baseline: Baseline) -> list[tuple[Mapping[str, Any], SessionPoint]]:
    """Sessions with a suite score and their points, oldest first."""
    found = [(s, p) for s in baseline.sessions if (p := _session_point(s))]
    return sorted(found, key=lambda sp: (sp[1][0], int(sp[0].get("session") or 1)))


def _plot_trend(
    ax: Any,
    baseline: Baseline,
    style: Mapping[str, str],
    slots: Mapping[datetime, int],
    dodge: float,
) -> int:
    found = _sessions(baseline)
    if not found:
        return 0
    sessions, points = [s for s, _ in found], [p for _, p in found]
    xs, ys = _positions([p[0] for p in points], slots, dodge), [p[1] for p in points]
    err = [[y - p[2] for y, p in zip(ys, points, strict=True)]]
    err.append([p[3] - y for y, p in zip(ys, points, strict=True)])
    ax.errorbar(xs, ys, yerr=err, marker="o", markersize=4, capsize=3, linewidth=1.4, **style)
    for x, s in zip(xs, sessions, strict=True):
        runs = [float(v) for v in (s.get("suite") or {}).get("runs", [])]
        ax.scatter([x] * len(runs), runs, s=10, color=style["color"], alpha=0.5, linewidths=0)
    return len(points)


def _engine_changes(
    baselines: Sequence[Baseline], slots: Mapping[datetime, int]
) -> set[tuple[float, str]]:
    """(x between two slots, text) where a baseline's engine version changed."""
    out = set()
    for b in baselines:
        found = _sessions(b)
        for (before, _), (s, p) in itertools.pairwise(found):
            if s.get("engine_version") != before.get("engine_version"):
                out.add((slots[p[0]] - 0.5, f"engine {s.get('engine_version')}"[:48]))
    return out


def _change_points(
    baselines: Sequence[Baseline], slots: Mapping[datetime, int]
) -> list[tuple[float, str, str]]:
    """(x just before the first night of a new level, text, color) for each baseline's change
    points (history.py); none where ruptures is missing (the chart is drawn without them)."""
    out = []
    for i, b in enumerate(baselines):
        try:
            points = change_points(nights(b.sessions))
        except HistoryUnavailable:
            return []
        for c in points:
            when = _when(c.night)
            if when in slots:
                out.append(
                    (slots[when] - 0.5, f"change {c.ratio - 1:+.1%}", COLORS[i % len(COLORS)])
                )
    return out


def _time_axis(ax: Any, slots: Mapping[datetime, int]) -> None:
    """One tick per run start time, thinned to at most 12 labels."""
    every = max(1, math.ceil(len(slots) / 12))
    shown = [(t, i) for t, i in slots.items() if i % every == 0]
    ax.set_xticks([i for _, i in shown], [t.strftime("%Y-%m-%d\n%H:%M") for t, _ in shown])
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlim(-0.6, len(slots) - 0.4)
    ax.set_xlabel("baseline sessions by run start (evenly spaced)", fontsize=8)


def trend_chart(baseline_files: Sequence[Path], path: Path) -> Path:
    """The suite geometric mean per baseline session over time, one line per baseline file
    (a folder stands for every ``*.json`` under it). Returns ``path``."""
    files = _baseline_files(baseline_files)
    if not files:
        raise ChartInputError(f"no baseline files in {', '.join(map(str, baseline_files))}")
    baselines = [_load(f) for f in files]
    varying = _varying(baselines)
    fig = _figure(9.0, 5.0)
    ax = fig.add_subplot()
    times = sorted({p[0] for b in baselines for _, p in _sessions(b)})
    slots = {t: i for i, t in enumerate(times)}
    plotted = 0
    for i, b in enumerate(baselines):
        style = {"label": _trend_label(b, varying), "color": COLORS[i % len(COLORS)]}
        plotted += _plot_trend(ax, b, style, slots, i - (len(baselines) - 1) / 2)
    if not plotted:
        names = ", ".join(map(str, files))
        raise ChartInputError(f"no baseline session with a suite score in {names}")
    _time_axis(ax, slots)
    for x, text in sorted(_engine_changes(baselines, slots)):
        ax.axvline(x, color="#777777", linestyle=":", linewidth=0.9)
        where = {"xycoords": ("data", "axes fraction"), "textcoords": "offset points"}
        ax.annotate(text, (x, 1.0), xytext=(-2, -4), rotation=90, fontsize=6, va="top",
                    ha="right", color="#555555", **where)  # fmt: skip
    for x, text, color in _change_points(baselines, slots):
        ax.axvline(x, color=color, linestyle="--", linewidth=1.2, alpha=0.8)
        where = {"xycoords": ("data", "axes fraction"), "textcoords": "offset points"}
        ax.annotate(text, (x, 0.0), xytext=(3, 4), rotation=90, fontsize=7, va="bottom",
                    ha="left", color=color, **where)  # fmt: skip
    # Log scale: the verdicts work on ln tok/s, each session's CI is symmetric there, and a
    # bad night (a fraction of the usual speed) does not squash every other session.
    ax.set_yscale("log")
    ticker = _mpl("matplotlib.ticker")
    low, high = ax.get_ylim()
    wide = high / low >= 10  # within one decade, 1-2-5 ticks would leave most of it unlabelled
    ax.yaxis.set_major_locator(
        ticker.LogLocator(subs=(1.0, 2.0, 5.0)) if wide else ticker.MaxNLocator(nbins=8)
    )
    if not wide:
        ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylabel("suite output tok/s (geometric mean, log scale)")
    ax.grid(which="both", linewidth=0.4, alpha=0.6)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    keys = {(b.key.get("hardware") or {}).get("name") for b in baselines}
    ax.set_title(f"Suite score per baseline session: {', '.join(map(str, keys))}", fontsize=11)
    fig.supxlabel(
        "point: geometric mean over prompts of one server session, bar: its 95% CI, dots: the "
        "session's per-run suite values; dotted line: engine version changed; dashed line: a "
        "change point (specdec history)",
        fontsize=7,
        color="#555555",
    )
    return _save(fig, path)
