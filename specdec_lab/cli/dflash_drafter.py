"""``scripts/make-dflash-drafter``: a DFLASH drafter distilled from its target
(``specdec_lab.training``), and ``chart SIDECAR.json OUT.svg``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from specdec_lab import training
from specdec_lab.training.chart import chart
from specdec_lab.training.make import make
from specdec_lab.training.recipe import Recipe


def _ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give target layer ids as integers separated by commas, e.g. 1,8,14,20,27"
        ) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["chart"]:
        if len(argv) != 3:
            raise SystemExit("usage: make-dflash-drafter chart SIDECAR.json OUT.svg")
        svg = chart(json.loads(Path(argv[1]).read_text(encoding="utf-8")))
        part = Path(argv[2] + ".part")
        part.write_text(svg, encoding="utf-8")
        os.replace(part, argv[2])
        return 0
    d = Recipe()
    description = (training.__doc__ or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="make-dflash-drafter", description=description)
    p.add_argument("--target", type=Path, required=True, help="the target's Hugging Face folder")
    p.add_argument("--out", type=Path, help="folder for the drafter (default: the target's)")
    p.add_argument("--device", help="cuda or cpu (default: cuda where there is one)")
    p.add_argument("--force", action="store_true", help="train again even if up to date")
    p.add_argument("--max-minutes", type=float,
                   help="stop training after this long (recorded in the sidecar)")  # fmt: skip
    p.add_argument("--target-layer-ids", type=_ids, default=d.target_layer_ids,
                   help="target layers feeding the drafter (default %(default)s)")  # fmt: skip
    for name in ("seed", "prompts", "gen_tokens", "gen_batch", "layers", "ffn", "block_size",
                 "mask_token_id", "steps", "batch", "anchors", "warmup", "eval_every",
                 "eval_sequences"):  # fmt: skip
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name),
                       help="default %(default)s")  # fmt: skip
    p.add_argument("--eval-workload", default=d.eval_workload,
                   help="built-in workload whose prompts the accept length is also measured "
                        "on, never trained on ('' for none; default %(default)s)")  # fmt: skip
    for name in ("lr", "gamma"):
        p.add_argument(
            f"--{name}", type=float, default=getattr(d, name), help="default %(default)s"
        )
    args = p.parse_args(argv)
    fields = {f for f in Recipe.__dataclass_fields__ if f != "generator"}
    recipe = Recipe(**{f: getattr(args, f) for f in fields})

    def log(message: str) -> None:
        print(f"[make-dflash-drafter] {message}", file=sys.stderr, flush=True)

    print(make(args, recipe, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
