"""Presentation: the terminal table (rows = configs, columns = prompts + geometric mean)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_specdec.results import ConfigRecord
from pytest_specdec.summary import CellSummary, config_cells, suite_geomean


def _cell(c: CellSummary) -> str:
    if c.mean is None:
        return f"ERR x{c.failed}" if c.failed else "-"
    text = f"{c.mean:.1f}"
    if c.ci_half is not None:
        text += f" ±{c.ci_half:.1f}"
    if c.accept_length is not None:
        text += f" a{c.accept_length:.2f}"
    if c.failed:
        text += f" ({c.failed} err)"
    return text


def table_rows(records: Sequence[ConfigRecord], prompts: Sequence[str]) -> list[list[str]]:
    rows = [["config", *prompts, "geomean"]]
    for rec in records:
        if rec.error and not rec.runs:
            rows.append([rec.name, *(["BOOT FAILED"] + ["-"] * (len(prompts) - 1)), "-"])
            continue
        cells = config_cells(rec, prompts)
        geo = suite_geomean(cells)
        rows.append([rec.name, *(_cell(cells[p]) for p in prompts), f"{geo:.1f}" if geo else "-"])
    return rows


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
    records: Mapping[str, ConfigRecord], prompts: Sequence[str], results_path: str | None
) -> list[str]:
    """Lines for pytest's terminal summary."""
    if not records:
        return []
    out = [
        "output tok/s: mean ±95% CI half-width over measured runs; aN = mean accept length "
        "(tokens per verify step) where the engine reports it",
        render_table(table_rows(list(records.values()), prompts)),
    ]
    for rec in records.values():
        line = f"{rec.name}: engine {rec.engine_version or 'version unknown'}"
        if rec.boot_s is not None:
            line += f", ready in {rec.boot_s:.1f} s"
        if rec.log_path:
            line += f", log {rec.log_path}"
        out.append(line)
        if rec.error:
            out.append(f"{rec.name}: ERROR {rec.error.splitlines()[0]}")
    if results_path:
        out.append(f"results: {results_path}")
    return out
