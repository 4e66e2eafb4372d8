"""``scripts/build-sglang-fork-wheel``: an SGLang fork's wheel
(``specdec_lab.installs.fork_wheel``)."""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

from specdec_lab.installs import fork_wheel
from specdec_lab.installs.fork_wheel import BuildError, build


def main() -> int:
    parser = argparse.ArgumentParser(description=(fork_wheel.__doc__ or "").split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a git clone or bare mirror of the fork")
    parser.add_argument("ref", help="branch, tag or commit")
    parser.add_argument("out", type=Path, help="folder for the wheel")
    parser.add_argument("--label", default="fork", help="local version label (default fork)")
    parser.add_argument("--version", default=None, help="the wheel's version (PEP 440)")
    args = parser.parse_args()
    if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", args.label):
        parser.error(f"--label {args.label!r}: lower-case letters and digits, dot-separated")
    try:
        wheel = build(args.src, args.ref, args.out, args.label, args.version)
    except BuildError as exc:
        print(f"build-sglang-fork-wheel: {exc}", file=sys.stderr)
        return 1
    print(f"{wheel} sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
