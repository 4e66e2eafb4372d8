"""Presentation: the terminal table (rows = configs, columns = prompts + geometric mean)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_specdec.core.results import ConfigRecord
from pytest_specdec.measure.decode import decode_summary, short_lines
from pytest_specdec.measure.roofline import describe as roofline_cell
from pytest_specdec.report.load import (
    LEVEL_HEADER,
    VERDICT_HEADER,
    crossover_lines,
    level_notes,
    level_rows,
    limits_line,
    verdict_rows,
)
from pytest_specdec.report.summary import (
    CellSummary,
    config_cells,
    cost_line,
    suite_geomean,
    unmeasured_label,
)
from pytest_specdec.verdict.acceptance import accept_summary_lines, short
from pytest_specdec.verdict.judge import LOAD_ONLY, Judgement


def _cell(c: CellSummary) -> str:
    left_out = ", ".join(
        f"{n} {what}" for n, what in ((c.failed, "err"), (c.invalid, "invalid")) if n
    )
    if c.mean is None:
        if c.failed and not c.invalid:
            return f"ERR x{c.failed}"
        return f"({left_out})" if left_out else "-"
    text = f"{c.mean:.1f}"
    if c.ci_half is not None:
        text += f" ±{c.ci_half:.1f}"
    if c.accept_length is not None:
        text += f" a{c.accept_length:.2f}"
    if left_out:
        text += f" ({left_out})"
    return text


def table_rows(
    records: Sequence[ConfigRecord],
    prompts: Sequence[str],
    rooflines: Mapping[str, Mapping[str, Any] | None] | None = None,
    decodes: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[list[str]]:
    """Rows of the throughput table; a roofline column when any config has a share.
    ``decodes``: each config's decode summary, where the caller has it already."""
    roof = rooflines or {}
    with_roof = any((r or {}).get("share") is not None for r in roof.values())
    head = ["config", *prompts, "geomean", "decode", *(["decode (roofline)"] if with_roof else [])]
    rows = [head]
    for rec in records:
        tail = [roofline_cell(roof.get(rec.name))] if with_roof else []
        if rec.error and not rec.runs:
            label = unmeasured_label(rec)
            rows.append([rec.name, *([label] + ["-"] * (len(prompts) - 1)), "-", "-", *tail])
            continue
        cells = config_cells(rec, prompts)
        geo = suite_geomean(cells)
        geo_text = f"{geo:.1f}" if geo else "-"
        summary = (decodes or {}).get(rec.name) or decode_summary(rec.to_dict(), prompts)
        decode = summary["tok_per_s"]
        decode_text = f"{decode:.1f}" if decode else "-"
        rows.append([rec.name, *(_cell(cells[p]) for p in prompts), geo_text, decode_text, *tail])
    return rows


def roofline_lines(rooflines: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """What the roofline column means, once per distinct (bytes per token, peak bandwidth)."""
    seen: dict[tuple[float, float], list[str]] = {}
    for name, entry in rooflines.items():
        if entry and entry.get("share") is not None:
            key = (entry["bytes_per_token"], entry["peak_gb_per_s"])
            seen.setdefault(key, []).append(name)
    out = []
    for (per_token, peak), names in seen.items():
        source = next(str(e["peak_source"]) for n, e in rooflines.items() if n == names[0] and e)
        out.append(
            f"roofline ({', '.join(names)}): decode tok/s = 1 / median TPOT; share = decode tok/s "
            f"x {per_token / 1e9:.2f} GB of target weights read per token / {peak:.0f} GB/s peak "
            f"({source}); over 100% only speculation can reach"
        )
    return out


def render_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(w) if j == 0 else cell.rjust(w)
                for j, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def terminal_summary(
    records: Mapping[str, ConfigRecord],
    prompts: Sequence[str],
    results_path: str | None,
    rooflines: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> list[str]:
    """Lines for pytest's terminal summary."""
    if not records:
        return []
    # A config measured at load levels only has no row here (its own table follows).
    shown = [r for r in records.values() if r.measured() or not r.extra.get("load")]
    decodes = {r.name: decode_summary(r.to_dict(), prompts) for r in shown}
    out = []
    if shown:
        out += [
            "output tok/s: mean ±95% CI half-width over measured runs; aN = mean accept length "
            "(tokens per verify step) where the engine reports it; geomean: the suite score; "
            "decode: geometric mean over the prompts that decode of 1 / median TPOT",
            render_table(table_rows(shown, prompts, rooflines, decodes)),
            *roofline_lines(rooflines or {}),
            *short_lines(decodes),
        ]
    for rec in records.values():
        if rec.extra.get("load"):
            doc = rec.to_dict()
            out.append(limits_line(rec.name, doc))
            out.append(render_table([LEVEL_HEADER, *level_rows(doc)]))
            out.extend(level_notes(rec.name, doc))
    for rec in records.values():
        line = f"{rec.name}: engine {rec.engine_version or 'version unknown'}"
        if rec.boot_s is not None:
            line += f", ready in {rec.boot_s:.1f} s"
        if rec.log_path:
            line += f", log {rec.log_path}"
        out.append(line)
        cost = cost_line(rec)
        if cost is not None:
            out.append(cost)
        if rec.error:
            out.append(f"{rec.name}: ERROR {rec.error.splitlines()[0]}")
    if results_path:
        out.append(f"results: {results_path}")
    return out


def _verdict_row(j: Judgement) -> list[str]:
    v = j.suite
    if v is None:
        return [j.config, j.outcome, "-", "-", "-", "-", "-", "-", j.message.split(";")[0][:60]]
    p_adj = f"{v.p_adjusted:.3g}" if v.p_adjusted is not None else "-"
    accepts = [c for a in j.accept.values() if (c := a.get("change")) is not None]
    accept = f"{sum(accepts) / len(accepts):+.1%}" if accepts else "-"
    return [
        j.config,
        v.outcome.value + (" (provisional)" if v.provisional else ""),
        f"{v.ratio:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}]",
        f"{min(v.p_regress, v.p_improve):.3g} / {p_adj}",
        f"{v.mde:.1%} (δ {v.delta:.1%})",
        accept,
        short(j.acceptance.to_dict() if j.acceptance else None),
        j.cause or "-",
        j.against,
    ]


def verdict_lines(judgements: Sequence[Judgement]) -> list[str]:
    """The verdict table (suite score per config) and one explanation line per config."""
    if not judgements:
        return []
    header = ["config", "verdict", "ratio [90% CI]", "p raw / Holm", "MDE", "accept Δ"]
    header += ["accept verdict", "cause", "against"]
    suites = [j for j in judgements if j.status != LOAD_ONLY]  # the others: load levels only
    scores = {j.score for j in suites}
    what = " of decode tok/s, 1 / TPOT" if scores == {"decode"} else ""
    out = []
    if suites:
        out.append(f"verdicts (suite score = geometric mean over prompts{what}):")
        out.append(render_table([header, *(_verdict_row(j) for j in suites)]))
    for j in suites:
        out.append(f"{j.config}: {j.message}")
        out.extend(f"{j.config}: note: {n}" for n in j.notes)
        for prompt, v in j.prompts.items():
            if v.outcome.value != "UNCHANGED":
                out.append(f"{j.config}/{prompt}: {v.explanation}")
        out.extend(accept_summary_lines(j.config, j.acceptance))
    return out + load_verdict_lines(judgements)


def load_verdict_lines(judgements: Sequence[Judgement]) -> list[str]:
    """The load levels' verdicts (aggregate output tok/s per level), the notes, and each
    speculative config's crossover."""
    with_load = [j.to_dict() for j in judgements if j.load is not None]
    rows = [row for j in with_load for row in verdict_rows(j)]
    out = []
    if rows:
        out += ["load levels (aggregate output tok/s per level; Holm across every level of the "
                "run):", render_table([VERDICT_HEADER, *rows])]  # fmt: skip
    for j in judgements:
        if j.load is None:
            continue
        if not j.load.levels:
            out.append(f"{j.config}: load: {j.load.message}")
        for lv in j.load.levels.values():
            if lv.verdict is not None and lv.verdict.outcome.value != "UNCHANGED":
                out.append(f"{j.config}: {lv.message}")
        out.extend(f"{j.config}: load note: {n}" for n in j.load.notes)
    return out + [line for j in with_load for line in crossover_lines(j)]
