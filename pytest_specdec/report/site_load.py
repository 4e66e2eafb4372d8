"""The load levels on the dashboard: the curves of a run's page and a key's level history.

Run page (a results file with load levels): the aggregate output tok/s of each config against
the number of clients (log scale), with each level's 95% CI over its rounds as a band and each
round as a dot; for each speculative config with a speedup curve (``verdicts[].load.crossover``,
tonight's, and ``baseline_crossover``, the stored baselines'), its speedup over the plain config
with each level's CI, the line y = 1, and where it falls to 1 (the crossover estimate, and its
band from the levels' CIs); then the levels' table (:func:`pytest_specdec.report.load.level_rows`,
as in the terminal and the Markdown report) and each level's verdict. The tables hold every
number of the charts, so a page read without scripts loses none.

Key page (a key whose sessions measured load levels): each level's aggregate output tok/s per
night, one small panel per client count (each with its own scale, since the levels' throughputs
differ by factors), the latest night's levels against the night before, and every load night.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdec.measure.levels import levels_of, rounds_of
from pytest_specdec.report.load import (
    LEVEL_HEADER,
    VERDICT_HEADER,
    crossover_lines,
    curve_reference,
    level_notes,
    level_rows,
    level_summaries,
    limits_line,
    verdict_rows,
)
from pytest_specdec.report.site_assets import DASH, chart, esc, night_cell, num, table
from pytest_specdec.report.site_assets import verdict_badge as badge
from pytest_specdec.report.site_data import KeyView

WIDTH = 760
CURVES = {"tonight": "#4477aa", "stored baselines": "#888888"}
DASHES = {"tonight": [1, 0], "stored baselines": [6, 4]}
STATES = {"pays": "triangle-up", "even": "circle", "loses": "triangle-down"}
TICKS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
         (1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))  # fmt: skip
MERMAID = re.compile(r"^```mermaid\n.*?^```\n(?:_line 1: [^\n]*_\n)?", re.S | re.M)


def _num(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def load_configs(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The configs of a results document that measured load levels."""
    return [c for c in doc.get("configs") or [] if levels_of(c)]


def _clients_x(levels: Sequence[int]) -> dict[str, Any]:
    return {
        "field": "clients", "type": "quantitative", "title": "concurrent clients",
        "scale": {"type": "log", "base": 2, "nice": False, "padding": 14},
        "axis": {"values": list(levels), "format": "d", "grid": True},
    }  # fmt: skip


# --------------------------------------------------------------------------- run page


def _throughput_values(
    configs: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each config's levels (geometric mean, 95% CI, what the tooltip shows) and kept rounds."""
    levels: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    for config in configs:
        name = str(config.get("name"))
        for lv in level_summaries(config):
            if lv.output_tok_per_s is None:
                continue
            half = lv.ci_half
            levels.append({
                "config": name, "clients": lv.clients, "tok_s": _num(lv.output_tok_per_s, 2),
                "lo": _num(lv.output_tok_per_s / (1 + half), 2) if half is not None else None,
                "hi": _num(lv.output_tok_per_s * (1 + half), 2) if half is not None else None,
                "ci": f"±{half:.1%}" if half is not None else "n/a (one round)",
                "rounds": lv.rounds, "failed": lv.failed_rounds,
                "decode": _num(lv.decode_tok_per_s.get("p50"), 1),
                "ttft_ms": _num(_ms(lv.ttft_s.get("p50")), 1),
                "accept": _num(lv.accept_length, 2),
            })  # fmt: skip
        rounds += [
            {"config": name, "clients": r.clients, "tok_s": _num(r.output_tok_per_s, 2),
             "round": r.round, "session": r.session}
            for r in rounds_of(config) if r.ok
        ]  # fmt: skip
    return levels, rounds


def throughput_spec(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate output tok/s against clients, one line per config: each level's geometric
    mean over its rounds with the 95% CI as a band, and each kept round as a dot."""
    levels, rounds = _throughput_values(configs)
    names = [str(c.get("name")) for c in configs]
    x = _clients_x(sorted({int(v["clients"]) for v in levels}))
    # the axis spans the levels and the rounds; a CI band reaching past it is cut at its edge
    # (the tooltip and the table give it whole)
    top = max((float(v["tok_s"]) for v in [*levels, *rounds]), default=1.0) * 1.2
    y = {"field": "tok_s", "type": "quantitative", "title": "aggregate output tok/s",
         "scale": {"domain": [0, round(top, 2)]}}  # fmt: skip
    color = {"field": "config", "type": "nominal", "title": "config", "scale": {"domain": names}}
    tooltip = [
        {"field": "config", "type": "nominal"}, {"field": "clients", "type": "quantitative"},
        {"field": "tok_s", "type": "quantitative", "title": "tok/s", "format": ".1f"},
        {"field": "ci", "type": "nominal", "title": "95% CI"},
        {"field": "rounds", "type": "quantitative"},
        {"field": "failed", "type": "quantitative", "title": "failed rounds"},
        {"field": "decode", "type": "quantitative", "title": "decode tok/s p50"},
        {"field": "ttft_ms", "type": "quantitative", "title": "TTFT p50 ms"},
        {"field": "accept", "type": "quantitative", "title": "accept length"},
    ]  # fmt: skip
    return {
        "width": WIDTH, "height": 300, "data": {"values": levels},
        "layer": [
            {"transform": [{"filter": "isValid(datum.lo)"}],
             "mark": {"type": "area", "opacity": 0.18, "clip": True},
             "encoding": {"x": x, "y": {**y, "field": "lo", "stack": None}, "y2": {"field": "hi"},
                          "color": color}},
            {"mark": {"type": "line", "point": False},
             "encoding": {"x": x, "y": y, "color": color}},
            {"data": {"values": rounds},
             "mark": {"type": "circle", "size": 22, "opacity": 0.55},
             "encoding": {"x": x, "y": y, "color": color, "tooltip": [
                 {"field": "config", "type": "nominal"},
                 {"field": "clients", "type": "quantitative"},
                 {"field": "session", "type": "quantitative"},
                 {"field": "round", "type": "quantitative"},
                 {"field": "tok_s", "type": "quantitative", "title": "tok/s", "format": ".1f"}]}},
            {"mark": {"type": "point", "filled": True, "size": 60},
             "encoding": {"x": x, "y": y, "color": color, "tooltip": tooltip}},
        ],
        "config": {"legend": {"orient": "top", "symbolOpacity": 1}},
    }  # fmt: skip


def _band(found: Mapping[str, Any]) -> tuple[float, float] | None:
    """The clients between which a crossover's band lies (a bound below the first level or
    above the last is drawn at that level); None where neither bound nor the estimate falls
    between two levels."""
    first, last = found["points"][0]["clients"], found["points"][-1]["clients"]
    low, high = found.get("low") or {}, found.get("high") or {}
    if found.get("where") != "at" and "at" not in (low.get("where"), high.get("where")):
        return None

    def edge(bound: Mapping[str, Any]) -> float:
        if bound.get("where") == "at" and bound.get("clients") is not None:
            return float(bound["clients"])
        return float(first if bound.get("where") == "below" else last)

    return edge(low), edge(high)


def log_ticks(values: Sequence[float | None]) -> list[float]:
    """Ticks for a log axis over ``values``: the coarsest of 1, 1-2-5, ... per decade that puts
    four ticks between the least and the greatest (fewer only where even the finest cannot)."""
    found = [v for v in values if v is not None and v > 0]
    low, high = min(found), max(found)
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    inside: list[float] = []
    for mantissas in TICKS:
        ticks = sorted({round(m * 10.0**e, 9) for e in decades for m in mantissas})
        inside = [v for v in ticks if low <= v <= high]
        if len(inside) >= 4:
            break
    return inside


def speedup_spec(load: Mapping[str, Any]) -> dict[str, Any] | None:
    """One speculative config's speedup over the plain config against clients (log-log: the
    crossover is interpolated in log clients and log speedup), tonight's and the stored
    baselines', each level with its 90% CI; the line y = 1; tonight's crossover estimate (a
    rule) and band (shaded), the stored baselines' estimate dashed. None without a curve."""
    curves = [(label, load.get(key)) for label, key in
              (("tonight", "crossover"), ("stored baselines", "baseline_crossover"))]  # fmt: skip
    found = [(label, c) for label, c in curves if isinstance(c, Mapping) and c.get("points")]
    if not found:
        return None
    values = [
        {"curve": label, "clients": p["clients"], "ratio": _num(p["ratio"], 4),
         "lo": _num(p["ci_low"], 4), "hi": _num(p["ci_high"], 4), "state": p["state"],
         "ci": f"{p['ci_low']:.3f}\u2013{p['ci_high']:.3f}", "against": c.get("reference")}
        for label, c in found for p in c["points"]
    ]  # fmt: skip
    levels = sorted({int(v["clients"]) for v in values})
    x = _clients_x(levels)
    y = {"field": "ratio", "type": "quantitative", "title": f"speedup over {curve_reference(load)}",
         "scale": {"type": "log", "nice": False, "padding": 12},
         "axis": {"values": log_ticks([*(v[k] for v in values for k in ("lo", "hi")), 1.0]),
                  "format": "~g"}}  # fmt: skip
    labels = [label for label, _ in found]
    color = {"field": "curve", "type": "nominal", "title": None,
             "scale": {"domain": labels, "range": [CURVES[k] for k in labels]}}  # fmt: skip
    under, over = _crossover_layers(found, x)
    layers = [
        *under,
        {"data": {"values": [{"one": 1.0}]},
         "mark": {"type": "rule", "color": "#1d2733", "strokeDash": [4, 3]},
         "encoding": {"y": {**y, "field": "one"}}},
        {"mark": {"type": "rule", "strokeWidth": 1.5},
         "encoding": {"x": x, "y": {**y, "field": "lo"}, "y2": {"field": "hi"}, "color": color}},
        {"mark": {"type": "line"}, "encoding": {"x": x, "y": y, "color": color}},
        {"mark": {"type": "point", "filled": True, "size": 80},
         "encoding": {
             "x": x, "y": y, "color": color,
             "shape": {"field": "state", "type": "nominal", "title": "CI against 1",
                       "scale": {"domain": list(STATES), "range": list(STATES.values())}},
             "tooltip": [{"field": "curve", "type": "nominal"},
                         {"field": "against", "type": "nominal", "title": "against"},
                         {"field": "clients", "type": "quantitative"},
                         {"field": "ratio", "type": "quantitative", "title": "speedup",
                          "format": ".3f"},
                         {"field": "ci", "type": "nominal", "title": "90% CI"},
                         {"field": "state", "type": "nominal"}]}},
        *over,
    ]  # fmt: skip
    return {"width": WIDTH, "height": 240, "data": {"values": values}, "layer": layers,
            "config": {"legend": {"orient": "top"}}}  # fmt: skip


def _crossover_layers(
    found: Sequence[tuple[str, Mapping[str, Any]]], x: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The layers under the curves (the first curve's crossover band, shaded) and over them
    (each curve's crossover estimate: a rule, dashed for the stored baselines')."""
    under: list[dict[str, Any]] = []
    label, first = found[0]
    band = _band(first)
    if band is not None:
        under.append({
            "data": {"values": [{"from": band[0], "to": band[1], "text": first.get("text")}]},
            "mark": {"type": "rect", "color": "#cc3311", "opacity": 0.12},
            "encoding": {"x": {**x, "field": "from"}, "x2": {"field": "to"},
                         "tooltip": [{"field": "text", "type": "nominal",
                                      "title": f"crossover band ({label})"}]},
        })  # fmt: skip
    over = [
        {
            "data": {"values": [{"of": label, "clients": c["estimate"], "text": c.get("text")}]},
            # a dash per curve as a mark property: an encoded dash without a legend would take
            # the curves' colour legend with it
            "mark": {"type": "rule", "strokeWidth": 2, "color": "#cc3311",
                     "strokeDash": DASHES[label]},
            "encoding": {"x": x, "tooltip": [
                {"field": "of", "type": "nominal", "title": "crossover"},
                {"field": "clients", "type": "quantitative", "format": ".1f"},
                {"field": "text", "type": "nominal", "title": "where"}]},
        }
        for label, c in found
        if c.get("where") == "at" and c.get("estimate") is not None
    ]  # fmt: skip
    return under, over


def _verdict_table(judgements: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for judgement in judgements:
        levels = (judgement.get("load") or {}).get("levels") or {}
        for row in verdict_rows(judgement):
            outcome, _, rest = row[2].partition(" ")
            message = (levels.get(row[1]) or {}).get("message") or ""
            cell = badge(outcome, str(message)) + (f" {esc(rest)}" if rest else "")
            rows.append([f"<code>{esc(row[0])}</code>", esc(row[1]), cell,
                         *(esc(v) for v in row[3:])])  # fmt: skip
    return table(VERDICT_HEADER, rows, "lrlrrrrll") if rows else ""


def run_section(doc: Mapping[str, Any]) -> str:
    """The run page's load levels: the curves, the levels' tables and verdicts ('' without)."""
    configs = load_configs(doc)
    if not configs:
        return ""
    out = [
        '<h2>Load levels</h2><p class="muted">Closed-loop clients, each covering the workload '
        "once per round. Per config and level: the geometric mean of the rounds' aggregate "
        "output tok/s, the band its 95% CI, the dots the rounds; the clients on a log scale.</p>",
        chart("load-throughput", throughput_spec(configs),
              "aggregate output tok/s against clients, per config"),
    ]  # fmt: skip
    judgements = [j for j in doc.get("verdicts") or [] if isinstance(j.get("load"), Mapping)]
    for i, judgement in enumerate(judgements):
        spec = speedup_spec(judgement["load"])
        if spec is None:
            continue
        name, over = str(judgement.get("config")), curve_reference(judgement["load"])
        out += [
            f"<h3>Speedup of <code>{esc(name)}</code> over <code>{esc(over)}</code></h3>"
            f'<p class="muted">Its throughput over {esc(over)}\'s at each level, with the '
            "level's 90% CI (triangles up: the CI above 1, down: below 1); log scales. Red: "
            "where the curve falls to 1, shaded: the band the levels' CIs give (a guide, not a "
            "simultaneous interval); dashed: the stored baselines' crossover.</p>",
            chart(f"load-speedup-{i}", spec, f"speedup of {name} over {over}"),
        ]
        lines = crossover_lines(judgement)
        out.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")
    for config in configs:
        name = str(config.get("name"))
        numeric = "r" * (len(LEVEL_HEADER) - 2) + "lr"
        out += [
            f"<h3>Levels of <code>{esc(name)}</code></h3>",
            f"<p>{esc(limits_line(name, config).split(': ', 1)[1])}</p>",
            table(LEVEL_HEADER, [[esc(v) for v in row] for row in level_rows(config)], numeric),
        ]
        notes = level_notes(name, config)
        if notes:
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    verdicts = _verdict_table(judgements)
    if verdicts:
        out.append(f"<h3>Level verdicts (Holm across every level of the run)</h3>{verdicts}")
    messages = [(j.get("config"), j["load"]) for j in judgements if j["load"].get("message")]
    if messages:
        out.append("<ul>" + "".join(
            f"<li><code>{esc(name)}</code>: {esc(load['message'])}"
            + "".join(f"; {esc(n)}" for n in load.get("notes") or []) + "</li>"
            for name, load in messages
        ) + "</ul>")  # fmt: skip
    return "".join(out)


def without_mermaid(markdown: str) -> str:
    """The Markdown report with its Mermaid charts (the load curves, which the site's renderer
    would show as code) replaced by a pointer to the charts drawn above them."""
    return MERMAID.sub("(drawn as a chart above, under Load levels)\n", markdown)


# --------------------------------------------------------------------------- key page


def level_history_spec(view: KeyView) -> dict[str, Any]:
    """Each load level's aggregate output tok/s per night with its 95% CI: one panel per
    client count, each with its own y scale."""
    # a CI bar is cut at 1.5 times the level's greatest nightly value and at its least over 1.5
    # (the tooltip and the table give it whole), so one night of two rounds cannot flatten a panel
    spans = {
        c: (min(vs) / 1.5, max(vs) * 1.5)
        for c in {c for n in view.load_nights for c in n.levels}
        if (vs := [n.levels[c].tok_s for n in view.load_nights if c in n.levels])
    }
    values = [
        {"night": n.started_at, "clients": clients, "tok_s": _num(cell.tok_s, 2),
         "lo": _num(max(cell.ci_low, spans[clients][0]), 2) if cell.ci_low else None,
         "hi": _num(min(cell.ci_high, spans[clients][1]), 2) if cell.ci_high else None,
         "ci": f"{cell.ci_low:.1f}\u2013{cell.ci_high:.1f}" if cell.ci_low and cell.ci_high
         else "n/a", "accept": _num(cell.accept, 2), "rounds": cell.runs,
         "sessions": n.sessions, "engine": n.engine_version or "unknown"}
        for n in view.load_nights for clients, cell in sorted(n.levels.items())
    ]  # fmt: skip
    x = {"field": "night", "type": "temporal", "title": "night"}
    y = {"field": "tok_s", "type": "quantitative", "title": "tok/s", "scale": {"zero": False}}
    tooltip = [
        {"field": "night", "type": "nominal"}, {"field": "clients", "type": "quantitative"},
        {"field": "tok_s", "type": "quantitative", "title": "tok/s", "format": ".1f"},
        {"field": "ci", "type": "nominal", "title": "95% CI"},
        {"field": "accept", "type": "quantitative", "title": "accept length", "format": ".2f"},
        {"field": "rounds", "type": "quantitative"},
        {"field": "sessions", "type": "quantitative"},
        {"field": "engine", "type": "nominal"},
    ]  # fmt: skip
    return {
        "data": {"values": values},
        "facet": {"row": {"field": "clients", "type": "ordinal", "sort": "ascending",
                          "header": {"labelExpr": "datum.value + (datum.value == 1 ? "
                                                  "' client' : ' clients')",
                                     "labelAngle": 0, "labelAlign": "left"},
                          "title": None}},
        "spec": {"width": WIDTH, "height": 110, "layer": [
            {"transform": [{"filter": "isValid(datum.lo)"}],
             "mark": {"type": "rule", "color": "#9db4cf"},
             "encoding": {"x": x, "y": {**y, "field": "lo"}, "y2": {"field": "hi"}}},
            {"mark": {"type": "line", "color": "#4477aa"}, "encoding": {"x": x, "y": y}},
            {"mark": {"type": "point", "filled": True, "color": "#4477aa", "size": 45},
             "encoding": {"x": x, "y": y, "tooltip": tooltip}},
        ]},
        "resolve": {"scale": {"y": "independent"}},
    }  # fmt: skip


def _latest_levels(view: KeyView) -> str:
    latest = view.load_nights[-1]
    previous = view.load_nights[-2] if len(view.load_nights) > 1 else None
    rows = []
    for clients, cell in sorted(latest.levels.items()):
        before = previous.levels.get(clients) if previous else None
        history = [n.levels[clients].tok_s for n in view.load_nights if clients in n.levels]
        ci = f"{num(cell.ci_low)}\u2013{num(cell.ci_high)}" if cell.ci_low else DASH
        rows.append([
            str(clients), num(cell.tok_s), ci, num(cell.accept, ".2f"), str(cell.runs),
            num(before.tok_s if before else None),
            f"{cell.tok_s / before.tok_s - 1:+.1%}" if before else DASH,
            num(statistics.median(history)),
        ])  # fmt: skip
    head = ["clients", "tok/s", "95% CI", "accept length", "rounds", "night before", "change",
            "median over nights"]  # fmt: skip
    return (
        f"<p>Latest load night {night_cell(latest.started_at, latest.run, 1)} "
        f"({latest.sessions} server session(s)).</p>" + table(head, rows, "rrrrrrrr")
    )


def _load_nights_table(view: KeyView) -> str:
    levels = sorted({c for n in view.load_nights for c in n.levels})
    rows = [
        [night_cell(n.started_at, n.run, 1), str(n.sessions), esc(n.engine_version or "unknown"),
         *(num(n.levels[c].tok_s) if c in n.levels else DASH for c in levels)]
        for n in reversed(view.load_nights)
    ]  # fmt: skip
    head = ["night", "sessions", "engine", *(f"{c} clients tok/s" for c in levels)]
    return (
        f"<details><summary>Every load night ({len(view.load_nights)}), newest first</summary>"
        + table(head, rows, "lrl" + "r" * len(levels))
        + "</details>"
    )


def key_section(view: KeyView) -> str:
    """The key page's load levels over the nights ('' where its sessions measured none)."""
    if not view.load_nights:
        return ""
    return "".join([
        '<h2>Load levels</h2><p class="muted">Each load level\'s aggregate output tok/s per '
        "night: the geometric mean of its server sessions' means over their rounds, with its "
        "95% CI; one panel per client count, each on its own scale. Hover a point for its "
        "accept length, rounds, sessions and engine.</p>",
        chart("load-history", level_history_spec(view),
              f"aggregate output tok/s of each load level of {view.name} per night"),
        _latest_levels(view),
        _load_nights_table(view),
    ])  # fmt: skip
