"""Drafters for SGLang's own speculative algorithms, made from a seed for a given target.

Used by ``scripts/make-sglang-drafters`` (``specdec_lab.cli.sglang_drafters``). SGLang's DFLASH
and EAGLE-3 need a draft network in a layout of their own, trained against the target; none is
to be had without a model hub. These have the architecture, config and weight names SGLang
0.5.17 loads (``layout``), with random weights from a seed: they drive SGLang's real code paths
(hidden states captured from the target's layers, the draft forward, tree or block
verification) and propose tokens the target rarely accepts, so their accept length is near 1.
That is what they are for: the machinery measured and gated, not a speedup.

Weights come from PCG64's raw stream keyed by (seed, drafter, tensor index), the same on any
machine and NumPy version; the recipe and the weights' sha256 are written beside them
(``specdec-model.json``), as ``make-memory-bound-models`` does.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specdec_lab.drafters.layout import Shapes, dflash, eagle3, write_weights
from specdec_lab.formats import folder

GENERATOR = "pytest-specdec make-sglang-drafters 2"
KINDS = {"dflash": 0, "eagle3": 1}
_INT8_STD = math.sqrt((256**2 - 1) / 12)


def random_matrix(seed: int, kind: str, index: int, shape: tuple[int, int]) -> np.ndarray:
    """F16 values of standard deviation 0.02 (a trained layer's scale), from the raw stream."""
    bits = np.random.PCG64(np.random.SeedSequence([seed, KINDS[kind], index]))
    n = shape[0] * shape[1]
    raw = bits.random_raw((n + 7) // 8).view(np.uint8)[:n].view(np.int8)
    out: np.ndarray = (raw.astype(np.float32) * np.float32(0.02 / _INT8_STD)).astype(np.float16)
    return out.reshape(shape)


def tensor(seed: int, kind: str, index: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name == "d2t":  # draft id → target id offset: zero everywhere, the identity map
        return np.zeros(shape, dtype=np.int64)
    if name == "t2d":
        return np.ones(shape, dtype=np.bool_)
    if len(shape) == 1:  # norm gains of one
        return np.ones(shape, dtype=np.float16)
    return random_matrix(seed, kind, index, (shape[0], shape[1]))


BUILDERS: dict[
    str, Callable[[Mapping[str, Any], argparse.Namespace], tuple[dict[str, Any], Shapes]]
] = {
    "dflash": lambda t, a: dflash(t, a.block_size, a.ffn),
    "eagle3": lambda t, a: eagle3(t, a.ffn),
}


def write(out: Path, kind: str, config: dict[str, Any], shapes: Shapes, seed: int) -> str:
    """The drafter's folder, its weights from the seed; returns the weights' sha256."""
    arrays = {n: tensor(seed, kind, i, n, s) for i, (n, s) in enumerate(shapes.items())}
    return write_weights(out, config, arrays)


def make(target: Path, out_dir: Path, kind: str, args: argparse.Namespace) -> Path:
    config_path = target / "config.json"
    if not config_path.is_file():
        raise SystemExit(
            f"make-sglang-drafters: {config_path} does not exist; give --target the "
            "Hugging Face folder of the target (make-memory-bound-models --format hf)"
        )
    target_config = json.loads(config_path.read_text(encoding="utf-8"))
    config, shapes = BUILDERS[kind](target_config, args)
    label = f"{kind}-b{args.block_size}" if kind == "dflash" else kind
    out = out_dir / f"{target.name.removesuffix('.hf')}.{label}-seed{args.seed}.hf"
    recipe = {
        "generator": GENERATOR,
        "kind": kind,
        "seed": args.seed,
        "ffn": args.ffn,
        "block_size": args.block_size if kind == "dflash" else None,
        "target_config": target_config,
    }
    sidecar = out / folder.SIDECAR
    if sidecar.is_file() and json.loads(sidecar.read_text()).get("recipe") == recipe:
        return out
    digest = write(out, kind, config, shapes, args.seed)
    folder.write_json(
        sidecar,
        {
            "recipe": recipe,
            "sha256": digest,
            "params": sum(int(np.prod(s)) for s in shapes.values()),
        },
    )
    return out
