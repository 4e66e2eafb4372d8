"""The lowest constraints (``specdec_lab.installs.lowest``) as a pip constraints file, for
``nox -s oldest``: ``python -m specdec_lab.cli.lowest_constraints [--extra dev] > low.txt``
from the repository root."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specdec_lab.installs import lowest as lowest_module
from specdec_lab.installs.lowest import BoundError, lowest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(lowest_module.__doc__ or "").splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--extra", action="append", default=[], help="an extra to include")
    args = parser.parse_args(argv)
    try:
        lines = lowest(args.pyproject, args.extra)
    except BoundError as exc:
        print(f"lowest_constraints: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
