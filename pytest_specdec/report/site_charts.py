"""Vega-Lite specifications of the dashboard's interactive charts (drawn in the browser by the
Vega bundle that :mod:`pytest_specdec.report.site_assets` writes beside the pages), and the
overview's sparklines (small static SVG: a word-sized line, no interaction).

The data of each chart is inline in its spec, so a page needs no request to draw it.
"""

from __future__ import annotations

import html
import itertools
import statistics
from collections.abc import Sequence
from typing import Any

from pytest_specdec.report.site_data import KeyView, NightView

WIDTH = 760
COLORS = {"change point": "#cc3311", "baseline reset": "#888888"}


def _num(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _engine(night: NightView) -> str:
    return night.engine_version or "unknown"


def trend_spec(view: KeyView) -> dict[str, Any]:
    """Suite tok/s per night with its 95% CI; hover: night, engine, commit, tok/s [CI],
    accept length, sessions. Change points are red dashed rules (with the level of each
    segment drawn across it), baseline resets grey."""
    values = [
        {
            "night": n.started_at, "tok_s": _num(n.tok_s), "lo": _num(n.ci_low),
            "hi": _num(n.ci_high), "accept": _num(n.accept), "sessions": n.sessions,
            "engine": _engine(n), "commit": n.commit or "unknown",
            "ci": f"{n.ci_low:.1f}\u2013{n.ci_high:.1f}" if n.ci_low and n.ci_high else "n/a",
        }
        for n in view.nights
    ]  # fmt: skip
    marks = [
        {"night": c.night, "label": f"change {c.ratio - 1:+.1%} ({c.engines()})",
         "kind": "change point"}
        for c in view.points
    ] + [
        {"night": r.night, "label": f"baseline reset ({r.earlier} earlier nights)",
         "kind": "baseline reset"}
        for r in view.resets
    ]  # fmt: skip
    x = {"field": "night", "type": "temporal", "title": "night"}
    y = {"field": "tok_s", "type": "quantitative", "title": "suite tok/s (geomean)",
         "scale": {"zero": False}}  # fmt: skip
    return {
        "width": WIDTH, "height": 260, "data": {"values": values},
        "layer": _trend_layers(view, marks, x, y), "config": {"legend": {"orient": "top"}},
    }  # fmt: skip


def _trend_layers(
    view: KeyView, marks: list[dict[str, Any]], x: dict[str, Any], y: dict[str, Any]
) -> list[dict[str, Any]]:
    """The trend's layers: CI rules, line, points with the tooltip, segment levels, marks."""
    kinds = list(dict.fromkeys(m["kind"] for m in marks))
    tooltip = [
        {"field": "night", "type": "nominal", "title": "night"},
        {"field": "engine", "type": "nominal", "title": "engine"},
        {"field": "commit", "type": "nominal", "title": "commit"},
        {"field": "tok_s", "type": "quantitative", "title": "tok/s", "format": ".1f"},
        {"field": "ci", "type": "nominal", "title": "95% CI"},
        {"field": "accept", "type": "quantitative", "title": "accept length", "format": ".2f"},
        {"field": "sessions", "type": "quantitative", "title": "sessions"},
    ]
    layers: list[dict[str, Any]] = [
        {"mark": {"type": "rule", "color": "#9db4cf"},
         "encoding": {"x": x, "y": {**y, "field": "lo"}, "y2": {"field": "hi"}}},
        {"mark": {"type": "line", "color": "#4477aa"}, "encoding": {"x": x, "y": y}},
        {"mark": {"type": "point", "filled": True, "color": "#4477aa", "size": 45},
         "encoding": {"x": x, "y": y, "tooltip": tooltip}},
    ]  # fmt: skip
    levels = _levels(view)
    if levels:
        layers.append({
            "data": {"values": levels},
            "mark": {"type": "rule", "color": "#228833", "strokeWidth": 2, "opacity": 0.8},
            "encoding": {"x": {**x, "field": "start"}, "x2": {"field": "end"},
                         "y": {**y, "field": "level"},
                         "tooltip": [{"field": "label", "type": "nominal", "title": "level"}]},
        })  # fmt: skip
    if marks:
        layers.append({
            "data": {"values": marks},
            "mark": {"type": "rule", "strokeDash": [6, 4], "strokeWidth": 2},
            "encoding": {
                "x": x,
                "color": {"field": "kind", "type": "nominal", "title": None,
                          "scale": {"domain": kinds, "range": [COLORS[k] for k in kinds]}},
                "tooltip": [{"field": "kind", "type": "nominal", "title": "marker"},
                            {"field": "night", "type": "nominal", "title": "night"},
                            {"field": "label", "type": "nominal", "title": "what"}],
            },
        })  # fmt: skip
    return layers


def _levels(view: KeyView) -> list[dict[str, Any]]:
    """One level (geometric mean of the nights' suite tok/s) per segment between change points."""
    if not view.points:
        return []
    edges = [0, *(c.index for c in view.points), len(view.nights)]
    out = []
    for a, b in itertools.pairwise(edges):
        segment = view.nights[a:b]
        level = statistics.geometric_mean(n.tok_s for n in segment)
        out.append({
            "start": segment[0].started_at, "end": segment[-1].started_at,
            "level": round(level, 2), "label": f"{level:.1f} tok/s over {len(segment)} nights",
        })  # fmt: skip
    return out


def heatmap_spec(view: KeyView) -> dict[str, Any]:
    """Per-prompt tok/s (colour: change against the prompt's median night) and, where the
    engine reports it, accept length across nights: two heatmaps over one shared dataset."""
    values = []
    for prompt in prompt_names(view):
        series = [n.prompts[prompt].tok_s for n in view.nights if prompt in n.prompts]
        median = statistics.median(series) if series else None
        for n in view.nights:
            cell = n.prompts.get(prompt)
            if cell is not None:
                values.append({
                    "night": n.started_at, "prompt": prompt, "tok_s": _num(cell.tok_s),
                    "vs": _num(cell.tok_s / median - 1, 4) if median else None,
                    "accept": _num(cell.accept), "runs": cell.runs,
                })  # fmt: skip
    tok = {
        "field": "vs",
        "type": "quantitative",
        "title": "tok/s vs median",
        "scale": {"scheme": "redblue", "domainMid": 0},
        "legend": {"format": "+.0%"},
    }
    accept = {"field": "accept", "type": "quantitative", "title": "accept length",
              "scale": {"scheme": "viridis"}}  # fmt: skip
    charts = [_heat(view, tok, "tok/s across nights")]
    if any(v["accept"] is not None for v in values):
        charts.append({**_heat(view, accept, "accept length across nights"),
                       "transform": [{"filter": "isValid(datum.accept)"}]})  # fmt: skip
    return {"data": {"values": values}, "vconcat": charts,
            "resolve": {"scale": {"color": "independent"}}}  # fmt: skip


def _heat(view: KeyView, color: dict[str, Any], title: str) -> dict[str, Any]:
    return {
        "title": title, "width": WIDTH, "height": {"step": 22}, "mark": {"type": "rect"},
        "encoding": {
            "x": {"field": "night", "type": "ordinal", "title": "night", "sort": "ascending",
                  "axis": {"labelExpr": "slice(datum.value, 0, 10)", "labelOverlap": True}},
            "y": {"field": "prompt", "type": "nominal", "title": None,
                  "sort": prompt_names(view)},
            "color": color,
            "tooltip": [
                {"field": "night", "type": "nominal"}, {"field": "prompt", "type": "nominal"},
                {"field": "tok_s", "type": "quantitative", "title": "tok/s", "format": ".1f"},
                {"field": "vs", "type": "quantitative", "title": "vs median", "format": "+.1%"},
                {"field": "accept", "type": "quantitative", "title": "accept length",
                 "format": ".2f"},
                {"field": "runs", "type": "quantitative"},
            ],
        },
    }  # fmt: skip


def prompt_names(view: KeyView) -> list[str]:
    """The prompts of a key, in the order they first appear."""
    return list(dict.fromkeys(p for n in view.nights for p in n.prompts))


def sparkline(view: KeyView, width: int = 140, height: int = 28) -> str:
    """An inline SVG of the nights' suite tok/s; the last change point's night as a red dot."""
    values = [n.tok_s for n in view.nights]
    if len(values) < 2:
        return "\u2013"
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (width - 4) / (len(values) - 1)

    def xy(i: int) -> tuple[float, float]:
        return 2 + i * step, 2 + (height - 4) * (1 - (values[i] - low) / span)

    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(xy, range(len(values))))
    dots: Sequence[int] = [view.points[-1].index] if view.points else []
    marks = "".join(
        f'<circle cx="{xy(i)[0]:.1f}" cy="{xy(i)[1]:.1f}" r="2.6" fill="#cc3311"/>' for i in dots
    )
    label = html.escape(f"{len(values)} nights, {low:.1f} to {high:.1f} tok/s", quote=True)
    return (
        f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="{label}">'
        f"<title>{label}</title>"
        f'<polyline fill="none" stroke="#4477aa" stroke-width="1.5" points="{points}"/>'
        f"{marks}</svg>"
    )
