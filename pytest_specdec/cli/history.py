"""``specdec history``: change points in each baseline key's nightly history (history.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_specdec.report.table import render_table
from pytest_specdec.verdict.history import HistoryPolicy, Series, load_series


def rows(series: list[Series]) -> list[list[str]]:
    head = ["baseline", "nights", "signal", "change at night", "engine", "change [90% CI]"]
    out = [[*head, "accept Δ"]]
    for s in series:
        if not s.points and not s.accept_points:
            out.append([s.name, str(len(s.nights)), "-", "-", "-", "no change point", "-"])
        for c in sorted([*s.points, *s.accept_points], key=lambda c: (c.night, c.signal)):
            accept = f"{c.accept_change:+.1%}" if c.accept_change is not None else "-"
            change = f"{c.ratio - 1:+.1%} [{c.ci_low:.3f}, {c.ci_high:.3f}]"
            row = [s.name, str(len(s.nights)), c.signal, c.night, c.engines(), change, accept]
            out.append(row)
    return out


def history(args: argparse.Namespace) -> int:
    try:
        policy = HistoryPolicy(
            penalty=args.penalty, min_size=args.min_size, floor=args.floor, alpha=args.alpha
        )
    except ValueError as exc:
        print(f"specdec history: error: {exc} (see specdec history --help)", file=sys.stderr)
        return 2
    if not args.baseline_dir.is_dir() and not args.results:
        print(f"specdec history: error: --baseline-dir {args.baseline_dir} is not a folder "
              "(fix the path), and no --results were given", file=sys.stderr)  # fmt: skip
        return 2
    series = load_series(args.baseline_dir, args.results, policy)
    if args.config:
        stored = sorted({str(s.key.get("config")) for s in series})
        series = [s for s in series if s.key.get("config") in args.config]
        if not series:
            print(f"specdec history: error: no history of config {', '.join(args.config)} "
                  f"(configs there: {', '.join(stored) or 'none'})", file=sys.stderr)  # fmt: skip
            return 2
    if args.json:
        doc: dict[str, Any] = {"policy": vars(policy), "series": [s.to_dict() for s in series]}
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    if not series:
        print(f"no baseline history under {args.baseline_dir}")
        return 0
    print(render_table(rows([s for s in series if s.nights])))
    for s in series:
        for note in s.notes:
            print(f"{s.name}: note: {note}")
    return 0


def add_command(sub: Any) -> None:
    defaults = HistoryPolicy()
    p = sub.add_parser(
        "history",
        help="change points over the nightly history of each baseline key",
        description="Finds on which night each config's speed changed, and on which its "
        "accept length changed (PELT change points over the nightly suite scores and mean "
        "accept lengths of the baseline store, and of nightly results files), with the engine "
        "version on either side, the size with its CI and the accept-length change. See "
        "docs/history.md.",
    )
    p.add_argument("--baseline-dir", type=Path, default=Path("baselines"))
    p.add_argument(
        "--results",
        type=Path,
        nargs="*",
        default=[],
        help="nightly results files, or folders of them, beside the baselines",
    )
    p.add_argument("--config", nargs="*", help="only these configs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--penalty", type=float, default=defaults.penalty,
                   help="penalty factor of sigma^2 ln(n) (default %(default)s)")  # fmt: skip
    p.add_argument("--min-size", type=int, default=defaults.min_size,
                   help="nights per segment at least (default %(default)s)")  # fmt: skip
    p.add_argument("--floor", type=float, default=defaults.floor,
                   help="segments closer than this are merged (default %(default)s)")  # fmt: skip
    p.add_argument("--alpha", type=float, default=defaults.alpha,
                   help="a change point needs p below this (default %(default)s)")  # fmt: skip
    p.set_defaults(func=history)
