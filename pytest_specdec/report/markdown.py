"""Markdown sections of the CI report: throughput table, verdicts, GPU health, failures and
the environment. Each function renders records (``ConfigRecord``) or the results document's
``verdicts`` (``Judgement.to_dict()``); :func:`pytest_specdec.report.export.markdown_summary` puts
them together.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdec.core.results import ConfigRecord, RunRecord
from pytest_specdec.gpu.hygiene import DEFAULT_INVALIDATING_BITS
from pytest_specdec.gpu.readings import decode_reasons
from pytest_specdec.measure.levels import rounds_of
from pytest_specdec.measure.roofline import describe as roofline_cell
from pytest_specdec.report.summary import (
    CellSummary,
    config_cells,
    cost_line,
    suite_geomean,
    unmeasured_label,
)
from pytest_specdec.verdict.acceptance import short
from pytest_specdec.verdict.methods import more_unit
from pytest_specdec.verdict.sessions import position_rates

INVALIDATING = set(decode_reasons(DEFAULT_INVALIDATING_BITS))
NONE = "-"
MARKED = ("REGRESSED", "MISMATCH", "IMPROVED")


def md(text: object) -> str:
    """Free text made safe for a Markdown table cell (HTML escaped, pipes and line breaks,
    CR and CRLF among them)."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", "<br>")


def code(text: object) -> str:
    """Text as an inline code span that is safe in a table cell (no HTML escaping applies)."""
    flat = str(text).replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    return "`" + flat.replace("`", "'").replace("|", "\\|") + "`"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A GFM table; ``align`` has one letter per column, ``l`` or ``r`` (default: first
    column left, the others right)."""
    letters = align or "l" + "r" * (len(header) - 1)
    lines = [header, ["---:" if a == "r" else "---" for a in letters], *rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


def excluded(runs: Sequence[RunRecord]) -> tuple[int, int]:
    """(failed, invalid): runs with an error, and runs GPU hygiene ruled out; neither counts."""
    failed = sum(1 for r in runs if r.error is not None)
    return failed, sum(1 for r in runs if r.error is None and r.invalid)


def _excluded_text(runs: Sequence[RunRecord]) -> list[str]:
    failed, invalid = excluded(runs)
    return [f"**{failed} failed**"] * bool(failed) + [f"**{invalid} invalid**"] * bool(invalid)


def _cell(c: CellSummary, runs: Sequence[RunRecord]) -> str:
    flags = _excluded_text(runs)
    if c.mean is None:
        return " · ".join(flags) or NONE
    text = f"{c.mean:.1f} ± {c.ci_half:.1f}" if c.ci_half is not None else f"{c.mean:.1f} (n={c.n})"
    if c.accept_length is not None:
        text += f" · acc {c.accept_length:.2f}"
    return " · ".join([text, *flags])


def throughput_table(
    recs: Sequence[ConfigRecord],
    prompts: Sequence[str],
    rooflines: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> str:
    roof = rooflines or {}
    with_roof = any((r or {}).get("share") is not None for r in roof.values())
    rows = []
    for rec in recs:
        tail = [roofline_cell(roof.get(rec.name))] if with_roof else []
        if rec.error and not rec.measured():
            label = f"**{unmeasured_label(rec)}**"
            rows.append([code(rec.name), label, *[NONE] * len(prompts), *tail])
            continue
        cells = config_cells(rec, prompts)
        geo = suite_geomean(cells)
        geo_text = f"**{geo:.1f}**" if geo is not None else NONE
        cols = [_cell(cells[p], rec.measured(p)) for p in prompts]
        rows.append([code(rec.name), *cols, geo_text, *tail])
    header = ["config", *(md(p) for p in prompts), "geomean"]
    return md_table(header + (["decode tok/s (roofline)"] if with_roof else []), rows)


def _outcome(j: Mapping[str, Any]) -> str:
    """The outcome word; bold where it fails the run or is news (REGRESSED, MISMATCH, IMPROVED)."""
    outcome = str(j.get("outcome"))
    text = f"**{outcome}**" if outcome in MARKED else outcome
    return text + (" (provisional)" if (j.get("suite") or {}).get("provisional") else "")


def _p(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else NONE


def ratio_text(v: Mapping[str, Any]) -> str:
    if v.get("ratio") is None:
        return NONE
    low, high = v.get("ci_low"), v.get("ci_high")
    level = f" {v['ci_level']:.0%}" if v.get("ci_level") else ""
    ci = f" [{low:.3f}, {high:.3f}]{level}" if low is not None and high is not None else ""
    return f"{v['ratio']:.3f}{ci}"


def _accept_change(j: Mapping[str, Any]) -> str:
    changes = [c["change"] for c in (j.get("accept") or {}).values() if c.get("change") is not None]
    return f"{statistics.fmean(changes):+.1%}" if changes else NONE


def _mde(v: Mapping[str, Any]) -> str:
    return f"{v['mde']:.1%} (δ {v['delta']:.1%})" if v.get("mde") is not None else NONE


def _more(v: Mapping[str, Any]) -> str:
    """How much more data would decide an INCONCLUSIVE verdict."""
    if v.get("outcome") != "INCONCLUSIVE":
        return NONE
    unit = more_unit(v.get("method"))
    n = v.get("runs_needed")
    return f"~{n} {unit}" if n is not None else f"too many {unit}"


def _verdict_row(j: Mapping[str, Any]) -> list[str]:
    v = j.get("suite") or {}
    p_raw = min(v["p_regress"], v["p_improve"]) if v.get("p_regress") is not None else None
    mde = _mde(v)
    runs = f"{v['n_new']} / {v['n_ref']}" if v.get("n_new") is not None else NONE
    notes = [str(j.get("against") or ""), *(str(n) for n in j.get("notes") or [])]
    return [
        code(j.get("config")),
        _outcome(j),
        ratio_text(v),
        f"{_p(p_raw)} / {_p(v.get('p_adjusted'))}",
        mde,
        runs,
        _accept_change(j),
        short(j.get("acceptance")) if (j.get("acceptance") or {}).get("suite") else NONE,
        md(j.get("cause") or NONE),
        "<br>".join(md(n) for n in notes if n),
    ]


def _prompt_row(config: str, prompt: str, v: Mapping[str, Any]) -> list[str]:
    p_raw = min(v["p_regress"], v["p_improve"]) if v.get("p_regress") is not None else None
    outcome = _outcome({"outcome": v.get("outcome"), "suite": v})
    return [code(config), md(prompt), outcome, ratio_text(v), _p(p_raw), _mde(v), _more(v)]


def verdict_section(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    if not verdicts:
        return ["_No verdicts recorded: nothing was judged against a baseline or reference._"]
    header = ["config", "verdict", "ratio [CI]", "p raw / Holm", "MDE (δ)", "n new / ref"]
    header += ["accept Δ", "accept verdict", "cause", "against · notes"]
    out = [md_table(header, [_verdict_row(j) for j in verdicts], "llrrrrrlll"), ""]
    for j in verdicts:
        out.append(f"- {code(j.get('config'))}: {md(j.get('message'))}")
        accept = j.get("acceptance") or {}
        if accept.get("message"):
            out.append(f"- {code(j.get('config'))}: {md(accept['message'])}")
    prompt_rows = [
        _prompt_row(str(j.get("config")), p, v)
        for j in verdicts
        for p, v in (j.get("prompts") or {}).items()
    ]
    if prompt_rows:
        head = ["config", "prompt", "verdict", "ratio [CI]", "p raw", "MDE (δ)", "more to decide"]
        out += [
            "",
            "<details><summary>Per-prompt verdicts (diagnosis; the suite score gates)</summary>",
        ]
        out += ["", md_table(head, prompt_rows, "lllrrrr"), "", "</details>"]
    return out


def run_label(rec: ConfigRecord, run: RunRecord) -> str:
    """``run 2``, or ``session 3 run 2`` where the config had several server sessions."""
    several = len({r.session for r in rec.runs}) > 1
    return f"session {run.session} run {run.run}" if several else f"run {run.run}"


def _range(devices: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float] | None:
    spreads = [d[key] for d in devices if d.get(key)]
    if not spreads:
        return None
    return min(s["min"] for s in spreads), max(s["max"] for s in spreads)


def _span(values: Sequence[tuple[float, float]], unit: str) -> str:
    if not values:
        return "null (not reported)"
    return f"{min(v[0] for v in values):.0f}-{max(v[1] for v in values):.0f} {unit}"


def _watched(rec: ConfigRecord) -> list[tuple[str, Mapping[str, Any], Sequence[Any]]]:
    """What the GPU monitor watched for a config: its measured runs and its load rounds (not
    the warm-up ones), each as (where, telemetry, why it was ruled out)."""
    out: list[tuple[str, Mapping[str, Any], Sequence[Any]]] = [
        (f"{r.prompt} {run_label(rec, r)}", r.gpu, r.invalid or ())
        for r in rec.runs if r.gpu and r.phase != "warmup"
    ]  # fmt: skip
    for r in rounds_of({"extra": rec.extra}):
        if r.gpu:
            where = f"{r.clients} clients round {r.round} (session {r.session})"
            out.append((where, r.gpu, r.invalid))
    return out


def _gpu_row(rec: ConfigRecord) -> tuple[list[str], list[str]] | None:
    """One table row of a config's GPU telemetry and the lines explaining flagged runs."""
    runs = _watched(rec)
    if not runs:
        return None
    temps: list[tuple[float, float]] = []
    clocks: list[tuple[float, float]] = []
    seen: dict[str, int] = {}
    notes: list[str] = []
    invalid = lost = 0
    for where, tele, ruled_out in runs:
        devices = tele.get("devices") or []
        temps += [t] if (t := _range(devices, "gpu_temp_c")) else []
        clocks += [c] if (c := _range(devices, "sm_clock_mhz")) else []
        for name in {n for d in devices for n in d.get("reasons_seen") or []}:
            seen[name] = seen.get(name, 0) + 1
        if ruled_out:
            invalid += 1
            notes.append(f"{where} invalid (rerun): {'; '.join(map(str, ruled_out))}")
        if tele.get("telemetry_lost"):
            lost += 1
            why = [
                f"GPU {d.get('index')}: {d.get('lost_reason')}"
                for d in devices
                if d.get("lost_reason")
            ]
            notes.append(f"{where} telemetry lost: {'; '.join(why)}")
    flags = [
        (f"**{n}**" if n in INVALIDATING else n) + f" {k}/{len(runs)}"
        for n, k in sorted(seen.items())
    ]
    row = [code(rec.name), str(len(runs)), _span(temps, "°C"), _span(clocks, "MHz")]
    row += [", ".join(flags) or "none", str(invalid), str(lost)]
    return row, [f"- {code(rec.name)} {md(n)}" for n in notes]


def gpu_lines(recs: Sequence[ConfigRecord]) -> list[str]:
    rows = [r for r in map(_gpu_row, recs) if r is not None]
    if not rows:
        return ["_No GPU telemetry recorded (CPU engine, external server, or NVML unavailable)._"]
    header = ["config", "runs", "GPU temp", "SM clock", "throttle reasons (runs)", "invalid runs"]
    out = [md_table([*header, "telemetry lost"], [r for r, _ in rows], "lrrrlrr"), ""]
    out += ["Reasons in bold invalidate a run; `sw_power_cap` is normal under load.", ""]
    return out + [n for _, notes in rows for n in notes]


def cost_lines(recs: Sequence[ConfigRecord]) -> list[str]:
    """What each config's server sessions held the machine for, summed over its sessions
    (boots, warm-up, one-request runs and load levels: the GPU time its verdict cost)."""
    lines = [f"- {md(line)}" for r in recs if (line := cost_line(r)) is not None]
    return lines or ["_Not recorded._"]


def failure_lines(recs: Sequence[ConfigRecord], limit: int = 50) -> list[str]:
    """Boot errors and failed runs, each with its cause (runs of one error grouped)."""
    out: list[str] = []
    for rec in recs:
        if rec.error:
            first, _, rest = rec.error.partition("\n")
            log = f" (log {code(rec.log_path)})" if rec.log_path else ""
            out.append(f"- {code(rec.name)} **boot failed**: {md(first)}{log}")
            if rest.strip():
                tail = [f"  {line}" for line in rest.strip().splitlines()]
                out += ["  <details><summary>details</summary>", "", "  ````text", *tail]
                out += ["  ````", "  </details>"]
        groups: dict[tuple[str, str, str], list[str]] = {}
        for r in rec.runs:
            if r.error:
                groups.setdefault((r.prompt, r.phase, r.error), []).append(run_label(rec, r))
        for (prompt, phase, error), numbers in groups.items():
            runs = ", ".join(numbers)
            out.append(f"- {code(f'{rec.name}/{prompt}')} {phase} {runs}: {md(error)}")
    total = sum(len(r.runs) for r in recs)
    if not out:
        return [f"None: all {total} runs (warmup and measured) succeeded; every server booted."]
    return out[:limit] + ([f"- … and {len(out) - limit} more"] if len(out) > limit else [])


def _model(model: Mapping[str, Any] | None) -> str:
    if not model:
        return NONE
    sha = model.get("sha256")
    return f"{md(model.get('id'))}" + (f" (sha256 {code(str(sha)[:12])})" if sha else "")


def _environment_row(r: ConfigRecord) -> list[str]:
    ready = f"{r.boot_s:.1f} s" if r.boot_s is not None else NONE
    target, draft = _model(r.models.get("target")), _model(r.models.get("draft"))
    return [code(r.name), md(r.engine), md(r.engine_version or "unknown"), target, draft, ready]


def environment_details(results: Mapping[str, Any], recs: Sequence[ConfigRecord]) -> list[str]:
    host, tool = results.get("host") or {}, results.get("tool") or {}
    workload = results.get("workload") or {}
    rows = [_environment_row(r) for r in recs]
    head = ["config", "engine", "version", "target model", "draft model", "ready in"]
    out = ["<details><summary>Environment: engines, models, host, GPU</summary>", ""]
    out += [md_table(head, rows, "lllllr"), ""]
    keys = ("cpu_model", "cpu_count", "platform", "python", "hostname")
    cpu, count, system, python, name = (md(host.get(k) or "unknown") for k in keys)
    out.append(f"- host: {cpu}, {count} CPUs, {system}, Python {python} ({name})")
    gpu = results.get("gpu")
    for dev in (gpu.get("devices") or []) if isinstance(gpu, Mapping) else []:
        fields = ", ".join(f"{k} {md(v)}" for k, v in dev.items() if v is not None and k != "uuid")
        out.append(f"- GPU: {fields}")
    if not gpu:
        out.append("- GPU: none recorded")
    sha = str(workload.get("sha256") or "")[:12]
    source = md(workload.get("source"))
    out.append(f"- workload: {md(workload.get('name'))} ({source}, sha256 {code(sha)})")
    out.append(f"- tool: {md(tool.get('name'))} {md(tool.get('version'))}")
    out += [f"- {code(r.name)} command: {code(' '.join(r.command))}" for r in recs if r.command]
    return [*out, "", "</details>"]


def position_section(results: Mapping[str, Any], prompts: Sequence[str]) -> list[str]:
    """Acceptance rate per draft position, per config over the suite's prompts and per prompt
    (where the engine reports it); nothing where no config has it."""
    rows, per_prompt = [], []
    for config in results.get("configs") or []:
        rates = position_rates(config, prompts)
        if not rates:
            continue
        name = code(config.get("name"))
        rows.append([name, *(f"{r:.0%}" for r in rates)])
        for p in prompts:
            own = position_rates(config, [p])
            if own:
                per_prompt.append([name, md(p), *(f"{r:.0%}" for r in own)])
    if not rows:
        return []
    width = max(len(r) for r in rows) - 1
    header = ["config", *(str(k) for k in range(1, width + 1))]
    return [
        "### Acceptance per draft position",
        "",
        "Share of verify steps that accepted the drafted token at each position (a position is "
        "accepted only with every one before it), over the measured runs.",
        "",
        md_table(header, [r + [""] * (width + 1 - len(r)) for r in rows], "l" + "r" * width),
        "",
        "<details><summary>Per prompt</summary>",
        "",
        md_table(["config", "prompt", *header[1:]],
                 [r + [""] * (width + 2 - len(r)) for r in per_prompt], "ll" + "r" * width),
        "",
        "</details>",
        "",
    ]  # fmt: skip
