"""The dashboard's page of one key: its trend, change points and resets, the per-prompt table
and heatmaps, the latest night's GPU telemetry, every night, and its load levels' history."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdec.report.site_assets import DASH, chart, esc, night_cell, num, page, table
from pytest_specdec.report.site_charts import heatmap_spec, prompt_names, trend_spec
from pytest_specdec.report.site_data import KeyView, NightView
from pytest_specdec.report.site_load import key_section
from pytest_specdec.verdict.history import ChangePoint


def hardware_text(hw: Mapping[str, Any]) -> str:
    if hw.get("kind") == "gpu":
        extra = [
            f"driver {hw['driver']}" if hw.get("driver") else "",
            f"{hw['power_limit_w']:g} W" if hw.get("power_limit_w") else "",
            f"SM locked {hw['clock_lock_mhz']} MHz" if hw.get("clock_lock_mhz") else "",
        ]
        more = ", ".join(e for e in extra if e)
        return f"{hw.get('count')}x {hw.get('name')}" + (f" ({more})" if more else "")
    return f"{hw.get('name')} ({hw.get('count')} CPUs)"


def model_text(key: Mapping[str, Any]) -> str:
    return str(key.get("model_name") or str(key.get("model") or "unknown")[:12])


def change_text(point: ChangePoint) -> str:
    accept = point.accept_change
    return f"{point.ratio - 1:+.1%} [{point.ci_low - 1:+.1%}, {point.ci_high - 1:+.1%}]" + (
        f", accept length {accept:+.1%}" if accept is not None else ""
    )


def _key_table(view: KeyView) -> str:
    key = view.key
    rows = [
        ("hardware", hardware_text(key.get("hardware") or {})),
        ("engine", str(key.get("engine"))), ("config", str(key.get("config"))),
        ("model", f"{model_text(key)} ({str(key.get('model'))[:12]})"),
        ("draft model", str(key.get("draft_model") or "none")[:12]),
        ("workload sha256", str(key.get("workload_sha256"))[:12]),
        ("max tokens", str(key.get("max_tokens"))),
        ("engine args", " ".join(map(str, key.get("engine_args") or [])) or "none"),
    ]  # fmt: skip
    return table(["field", "value"], [[esc(k), esc(v)] for k, v in rows])


def _points(view: KeyView) -> str:
    if not view.points:
        text = f"<p>No change point over {len(view.nights)} nights.</p>"
    else:
        rows = [
            [night_cell(c.night, view.nights[c.index].run, 1),
             f"<code>{esc(c.previous_night)}</code>",
             esc(c.engines()), esc(change_text(c)), f"{c.p:.2g}", f"{c.n_before} → {c.n_after}"]
            for c in view.points
        ]  # fmt: skip
        head = ["change at night", "night before", "engine", "change [90% CI]", "p", "nights"]
        text = table(head, rows, "lllrrr")
    for reset in view.resets:
        text += (
            f"<p>Baseline reset: the stored baseline history starts at <code>{esc(reset.night)}"
            f"</code>; the {reset.earlier} night(s) before it come from results files only.</p>"
        )
    return text


def _prompt_table(view: KeyView) -> str:
    latest = view.nights[-1]
    previous = view.nights[-2] if len(view.nights) > 1 else None
    rows = []
    for prompt in prompt_names(view):
        cell = latest.prompts.get(prompt)
        before = previous.prompts.get(prompt) if previous else None
        history = [n.prompts[prompt].tok_s for n in view.nights if prompt in n.prompts]
        ci = f"{num(cell.ci_low)}\u2013{num(cell.ci_high)}" if cell and cell.ci_low else DASH
        change = f"{cell.tok_s / before.tok_s - 1:+.1%}" if cell and before else DASH
        rows.append([
            esc(prompt), num(cell.tok_s if cell else None), ci,
            num(cell.accept if cell else None, ".2f"), str(cell.runs if cell else 0),
            num(before.tok_s if before else None), change, num(statistics.median(history)),
        ])  # fmt: skip
    head = ["prompt", "tok/s", "95% CI", "accept length", "runs", "night before", "change",
            "median over nights"]  # fmt: skip
    return f"<p>Latest night <code>{esc(latest.started_at)}</code>.</p>" + table(
        head, rows, "lrrrrrrr"
    )


def _range(devices: Sequence[Mapping[str, Any]], field: str) -> list[str]:
    found = [d[field] for d in devices if isinstance(d.get(field), Mapping)]
    if not found:
        return [DASH, DASH, DASH]
    lows = [float(f["min"]) for f in found if f.get("min") is not None]
    means = [float(f["mean"]) for f in found if f.get("mean") is not None]
    highs = [float(f["max"]) for f in found if f.get("max") is not None]
    return [num(min(lows, default=None)), num(statistics.fmean(means) if means else None),
            num(max(highs, default=None))]  # fmt: skip


def telemetry(config: Mapping[str, Any] | None, night: NightView) -> str:
    """Power, clocks, temperatures and clock-event (throttle) reasons over the latest night's
    measured runs, per GPU; or why there are none."""
    if config is None:
        return (
            f'<p class="muted">No GPU telemetry: the latest night (<code>{esc(night.started_at)}'
            "</code>) comes from the baseline store, which keeps no telemetry; pass its results "
            "file with <code>--results</code>.</p>"
        )
    runs = [r for r in config.get("runs") or [] if r.get("phase") == "measure"]
    per_gpu: dict[int, list[Mapping[str, Any]]] = {}
    for run in runs:
        for device in (run.get("gpu") or {}).get("devices") or []:
            per_gpu.setdefault(int(device.get("index") or 0), []).append(device)
    if not per_gpu:
        return (
            '<p class="muted">No GPU telemetry in the latest night\'s results (a CPU engine, '
            "an external server, or no NVML).</p>"
        )
    out = []
    fields = [("power (W)", "power_w"), ("SM clock (MHz)", "sm_clock_mhz"),
              ("memory clock (MHz)", "mem_clock_mhz"), ("GPU temperature (°C)", "gpu_temp_c"),
              ("memory temperature (°C)", "mem_temp_c")]  # fmt: skip
    for index, devices in sorted(per_gpu.items()):
        rows = [[esc(label), *_range(devices, key)] for label, key in fields]
        out.append(f"<h3>GPU {index}: {len(devices)} measured runs</h3>")
        out.append(table(["reading", "min", "mean", "max"], rows, "lrrr"))
        seen = Counter(r for d in devices for r in d.get("reasons_seen") or [])
        if seen:
            reasons = [[f"<code>{esc(r)}</code>", str(n)] for r, n in sorted(seen.items())]
            out.append(table(["throttle reason", "runs seen in"], reasons, "lr"))
        else:
            out.append("<p>Throttle reasons: none seen.</p>")
    invalid = [r for r in runs if r.get("invalid")]
    if invalid:
        out.append(
            f"<p>{len(invalid)} run(s) ruled out by GPU hygiene: "
            f"{esc('; '.join(sorted({', '.join(r['invalid']) for r in invalid})))}.</p>"
        )
    return "".join(out)


def _nights_table(view: KeyView) -> str:
    rows = [
        [night_cell(n.started_at, n.run, 1), num(n.tok_s),
         f"{num(n.ci_low)}\u2013{num(n.ci_high)}" if n.ci_low else DASH, num(n.accept, ".2f"),
         str(n.sessions), esc(n.engine_version or "unknown"), esc(n.commit or "unknown")]
        for n in reversed(view.nights)
    ]  # fmt: skip
    head = ["night", "suite tok/s", "95% CI", "accept length", "sessions", "engine", "commit"]
    return (
        f"<details><summary>Every night ({len(view.nights)}), newest first</summary>"
        + table(head, rows, "lrrrrll")
        + "</details>"
    )


def key_page(view: KeyView, generated: str) -> str:
    body = [f"<h2>Key</h2>{_key_table(view)}"]
    if view.notes:
        items = "".join(f"<li>{esc(n)}</li>" for n in view.notes)
        body.append(
            f'<div class="notes"><strong>Left out of this key</strong><ul>{items}</ul></div>'
        )
    if view.nights:
        body += [
            '<h2>Trend</h2><p class="muted">Suite score (geometric mean over prompts) per night '
            "with its 95% CI; hover a point for its engine, commit and sessions. Red dashed: "
            "change points (green: the level of each segment); grey dashed: baseline resets.</p>",
            chart("trend", trend_spec(view), f"suite tok/s of {view.name} per night"),
            f"<h2>Change points</h2>{_points(view)}",
            f"<h2>Per prompt</h2>{_prompt_table(view)}",
            '<p class="muted">Per prompt across nights: tok/s against the prompt\'s median '
            "night, and the accept length where the engine reports it.</p>",
            chart("heatmap", heatmap_spec(view), "per-prompt tok/s and accept length heatmaps"),
        ]
        gpu = telemetry(view.latest_config, view.nights[-1])
        body += [key_section(view), f"<h2>GPU telemetry of the latest night</h2>{gpu}",
                 f"<h2>Nights</h2>{_nights_table(view)}"]  # fmt: skip
    elif view.load_nights:
        body += [
            "<p>No suite score: this key's server sessions measured load levels only (no prompt "
            "one request at a time).</p>",
            key_section(view),
        ]
    else:
        body.append("<p>No usable night for this key (see the notes above).</p>")
    charts = bool(view.nights or view.load_nights)
    return page(view.name, f"generated {esc(generated)}", "".join(body), 1, charts=charts)
