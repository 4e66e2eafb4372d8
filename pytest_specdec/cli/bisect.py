"""``specdec bisect``: the first engine build that made a config slower (bisect/app.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytest_specdec.bisect.app import EXIT_ERROR, Request, run
from pytest_specdec.bisect.candidates import BisectError
from pytest_specdec.core.values import engine_name, positive_int, probability

DESCRIPTION = (
    "Measures candidates (engine builds, oldest first, in a TOML file) against the good one "
    "in interleaved server sessions and names the first that is slower, git-bisect style: "
    "each step places the middle candidate on the good or the bad side of the step and "
    "re-checks the bad endpoint; a candidate on neither side is skipped. The "
    "state is saved after each step: rerun the same command to resume. Exit 0 when a first "
    "bad candidate was found or none exists, 3 when the evidence cannot decide, 2 on an "
    "error. See docs/bisect.md."
)


def bisect(args: argparse.Namespace) -> int:
    fields = {k: v for k, v in vars(args).items() if k in Request.__dataclass_fields__}
    request = Request(**{**fields, "config_files": tuple(args.config_files)})
    try:
        code, text = run(request)
    except BisectError as exc:
        print(f"specdec bisect: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(text)
    return code


def add_command(sub: Any) -> None:
    p = sub.add_parser("bisect", help="find the engine build that made a config slower",
                       description=DESCRIPTION)  # fmt: skip
    p.add_argument(
        "--candidates",
        type=Path,
        required=True,
        metavar="FILE",
        help="TOML: one [[candidate]] table (name, server, env, args, ref) per build",
    )
    p.add_argument("--spec-config", dest="spec_config", required=True, metavar="NAME",
                   help="the one spec config to measure")  # fmt: skip
    p.add_argument("--engine", type=engine_name, default=None, help="default: the suite's")
    p.add_argument("--good", default=None, help="a candidate known good (default: the first)")
    p.add_argument("--bad", default=None, help="a candidate known bad (default: the last)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--out-dir",
        type=Path,
        default=Path("results/bisect"),
        help="state file, step results, engine logs (default %(default)s)",
    )
    p.add_argument(
        "--build-cmd",
        default=None,
        metavar="CMD",
        help="builds a candidate's ref: run as CMD REF, prints the engine path",
    )
    _measure_options(p)
    p.set_defaults(func=bisect)


def _measure_options(p: argparse.ArgumentParser) -> None:
    """What each server session measures, and how a step decides."""
    p.add_argument("--suite-file", type=Path, default=None,
                   help="the suite file (default: suites/specdec.toml here, else the "
                   "built-in suite, as a pytest run in this folder)")  # fmt: skip
    p.add_argument(
        "--config-file",
        dest="config_files",
        action="append",
        type=Path,
        default=[],
        help="extra config TOML (repeatable)",
    )
    p.add_argument("--workload", default=None, help="prompt suite (default: the suite's)")
    p.add_argument("--runs", type=positive_int, default=5, help="runs per prompt and session")
    p.add_argument("--max-tokens", type=positive_int, default=256)
    p.add_argument(
        "--max-sessions",
        type=positive_int,
        default=8,
        help="sessions a side before a candidate is skipped (default %(default)s)",
    )
    p.add_argument(
        "--alpha",
        type=probability,
        default=0.01,
        help="false-alarm rate of each comparison (default %(default)s)",
    )
    p.add_argument(
        "--min-delta",
        type=probability,
        default=0.03,
        help="smallest drop that counts as bad (default %(default)s)",
    )
    p.add_argument(
        "--launcher",
        choices=("process", "docker"),
        default="process",
        help="docker: each candidate's server is an image",
    )
