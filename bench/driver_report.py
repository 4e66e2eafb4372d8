"""What the load-driver benchmark prints (see driver.py): the ceiling table beside the peer,
the overhead lines and the verdicts against its targets."""

from __future__ import annotations

from collections.abc import Sequence

from driver_peer import PeerResult
from driver_plan import DRIVER, CeilingRow, OverheadRow

# --- report ----------------------------------------------------------------------------------

COLUMNS = (
    ("driver", 16), ("conc", 5), ("stream tok/s", 13), ("req/s", 8), ("reqs", 6), ("err", 4),
    ("tok/cpu-s", 11), ("drv cpu", 8), ("srv cpu", 8), ("others", 7), ("vs peer", 8),
    ("per cpu", 8),
)  # fmt: skip


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "null" if value is None else format(value, spec)


def table_lines(rows: Sequence[CeilingRow], peer: PeerResult | None) -> list[str]:
    theirs = {r.concurrency: r for r in (peer.rows if peer else [])}
    lines = [_cells([name for name, _ in COLUMNS])]
    for row in [*rows, *(peer.rows if peer else [])]:
        other = theirs.get(row.concurrency) if row.driver == DRIVER else None
        cells = [
            row.driver, str(row.concurrency), _fmt(row.tokens_per_s),
            _fmt(row.requests_per_s, ",.1f"), str(row.requests), str(row.errors),
            _fmt(row.tokens_per_cpu_s), _fmt(row.driver_cpu, ".0%"),
            _fmt(row.server_cpu, ".0%") if row.driver == DRIVER else "-",
            _fmt(row.others_cpu, ".0%"),
            _ratio(row.tokens_per_s, other.tokens_per_s) if other else "",
            _ratio(row.tokens_per_cpu_s, other.tokens_per_cpu_s) if other else "",
        ]  # fmt: skip
        lines.append(_cells(cells))
    return lines


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if ours and theirs else "null"


def _cells(cells: Sequence[str]) -> str:
    widths = [w for _, w in COLUMNS]
    return cells[0].ljust(widths[0]) + "".join(
        c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)
    )


def overhead_line(o: OverheadRow) -> str:
    return (
        f"overhead at {o.rate:,.0f} tok/s x {o.tokens} tokens, c={o.concurrency}, "
        f"{o.requests} requests: e2e median {o.e2e_ms_median:.2f} ms (ideal "
        f"{o.tokens / o.rate * 1e3:.0f}); over ideal median {o.overhead_pct_median:.3f}% "
        f"({o.overhead_ms_median:.2f} ms), p90 {o.overhead_pct_p90:.3f}%; driver's own median "
        f"{_fmt(o.own_ms_median, '.3f')} ms (medians: request {_fmt(o.request_ms_median, '.3f')}"
        f", tail {_fmt(o.tail_ms_median, '.3f')}), p90 {_fmt(o.own_pct_p90, '.3f')}%; "
        f"TPOT error median {_fmt(o.tpot_err_pct_median, '+.3f')}%"
    )


def summary_lines(
    rows: Sequence[CeilingRow], over: Sequence[OverheadRow], peer: PeerResult | None
) -> list[str]:
    lines = [overhead_line(o) for o in over]
    ours = max((r.tokens_per_s or 0.0 for r in rows), default=0.0)
    theirs = max((r.tokens_per_s or 0.0 for r in (peer.rows if peer else [])), default=0.0)
    if peer and theirs:
        verdict = "met" if ours >= 2 * theirs else "MISSED"
        lines.append(
            f"ceiling {ours:,.0f} tok/s vs {peer.name} {theirs:,.0f} tok/s: "
            f"{ours / theirs:.2f}x (target >= 2x: {verdict})"
        )
        ours_cpu = max((r.tokens_per_cpu_s or 0.0 for r in rows), default=0.0)
        theirs_cpu = max((r.tokens_per_cpu_s or 0.0 for r in peer.rows), default=0.0)
        if ours_cpu and theirs_cpu:
            lines.append(
                f"per CPU-second of the driver: {ours_cpu:,.0f} vs {theirs_cpu:,.0f} tok: "
                f"{ours_cpu / theirs_cpu:.2f}x"
            )
        lines.append(
            f"{peer.name}: {peer.run_s or 0:.0f} s in all (start-up included); worker processes "
            f"per benchmark {peer.processes}"
        )
    else:
        lines.append(f"ceiling {ours:,.0f} tok/s; ratio to peer null ({_why(peer)})")
    for o in over:
        if o.concurrency == 1:
            verdict = "met" if o.overhead_pct_p90 < 1.0 else "MISSED"
            lines.append(
                f"overhead p90 {o.overhead_pct_p90:.3f}% at {o.rate:,.0f} tok/s "
                f"(target < 1%: {verdict})"
            )
    busy = max((r.others_cpu or 0.0 for r in rows), default=0.0)
    if busy > 0.1:
        lines.append(
            f"warning: other processes took up to {busy:.0%} of the driver's core; wall tok/s "
            "understates the one-core ceiling (tok/cpu-s does not)"
        )
    return lines


def _why(peer: PeerResult | None) -> str:
    if peer is None:
        return "peer not run"
    return peer.reason or "the peer completed no request"
