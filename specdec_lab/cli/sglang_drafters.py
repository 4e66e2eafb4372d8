"""``scripts/make-sglang-drafters``: DFLASH and EAGLE-3 drafters from a seed
(``specdec_lab.drafters.seeded``) for a target in Hugging Face layout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_lab.drafters import seeded
from specdec_lab.drafters.seeded import BUILDERS, make


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="make-sglang-drafters", description=(seeded.__doc__ or "").split("\n")[0]
    )
    p.add_argument("--target", type=Path, required=True, help="the target's Hugging Face folder")
    p.add_argument("--out", type=Path, help="folder for the drafters (default: the target's)")
    p.add_argument(
        "--kind",
        action="append",
        choices=sorted(BUILDERS),
        help="dflash and/or eagle3 (repeatable; default both)",
    )
    p.add_argument("--seed", type=int, default=1, help="random seed (default %(default)s)")
    p.add_argument("--block-size", type=int, default=16, help="DFLASH block (default 16)")
    p.add_argument("--ffn", type=int, default=1536, help="drafter FFN width (default 1536)")
    args = p.parse_args(argv)
    for kind in args.kind or sorted(BUILDERS):
        path = make(args.target, args.out or args.target.parent, kind, args)
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
