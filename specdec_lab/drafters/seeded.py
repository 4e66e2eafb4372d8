"""Drafters for SGLang's own speculative algorithms, made from a seed for a given target.

Used by ``scripts/make-sglang-drafters``. SGLang's DFLASH and EAGLE-3 need a draft network in
a layout of their own, trained against the target; none is to be had without a model hub.
These have the architecture, config and weight names SGLang 0.5.17 loads, with random weights
from a seed: they drive SGLang's real code paths (hidden states captured from the target's
layers, the draft forward, tree or block verification) and propose tokens the target rarely
accepts, so their accept length is near 1. That is what they are for: the machinery measured
and gated, not a speedup.

* ``dflash``: ``DFlashDraftModel`` (sglang/srt/models/dflash.py), one Qwen3-style layer that
  reads the target's hidden states of ``target_layer_ids`` through ``fc``; it shares the
  target's embedding and head. A block of ``block_size`` tokens is drafted at once.
* ``eagle3``: ``LlamaForCausalLMEagle3`` (sglang/srt/models/llama_eagle3.py): ``fc`` over three
  captured hidden states, one ``midlayer``, its own ``lm_head`` over the full vocabulary
  (``d2t`` all zeros, ``t2d`` all true: the identity map); the target's embedding is shared.

Weights come from PCG64's raw stream keyed by (seed, drafter, tensor index), the same on any
machine and NumPy version; the recipe and the weights' sha256 are written beside them
(``specdec-model.json``), as ``make-memory-bound-models`` does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specdec_lab.formats import folder

GENERATOR = "pytest-specdec make-sglang-drafters 2"
KINDS = {"dflash": 0, "eagle3": 1}
_INT8_STD = math.sqrt((256**2 - 1) / 12)
Shapes = dict[str, tuple[int, ...]]


def random_matrix(seed: int, kind: str, index: int, shape: tuple[int, int]) -> np.ndarray:
    """F16 values of standard deviation 0.02 (a trained layer's scale), from the raw stream."""
    bits = np.random.PCG64(np.random.SeedSequence([seed, KINDS[kind], index]))
    n = shape[0] * shape[1]
    raw = bits.random_raw((n + 7) // 8).view(np.uint8)[:n].view(np.int8)
    out: np.ndarray = (raw.astype(np.float32) * np.float32(0.02 / _INT8_STD)).astype(np.float16)
    return out.reshape(shape)


def _dims(target: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    hidden, heads = int(target["hidden_size"]), int(target["num_attention_heads"])
    kv = int(target.get("num_key_value_heads", heads))
    head_dim = int(target.get("head_dim") or hidden // heads)
    return hidden, heads, kv, head_dim, int(target["num_hidden_layers"])


def _shared(target: Mapping[str, Any]) -> dict[str, Any]:
    """Fields a drafter takes from its target, so that vocabulary and positions line up."""
    out = {
        k: target[k]
        for k in (
            "vocab_size",
            "max_position_embeddings",
            "rms_norm_eps",
            "bos_token_id",
            "eos_token_id",
            "rope_theta",
            "rope_parameters",
        )
        if k in target
    }
    return {**out, "hidden_act": "silu", "attention_bias": False, "torch_dtype": "float16"}


def _one_layer(hidden: int, heads: int, kv: int, head_dim: int, ffn: int) -> dict[str, Any]:
    """The config fields of a one-layer drafter with its own head count and width."""
    return {"hidden_size": hidden, "num_hidden_layers": 1, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": head_dim, "intermediate_size": ffn,
            "tie_word_embeddings": False}  # fmt: skip


def _layer(
    prefix: str, hidden: int, heads: int, kv: int, head_dim: int, ffn: int, attn_in: int
) -> Shapes:
    return {
        f"{prefix}self_attn.q_proj.weight": (heads * head_dim, attn_in),
        f"{prefix}self_attn.k_proj.weight": (kv * head_dim, attn_in),
        f"{prefix}self_attn.v_proj.weight": (kv * head_dim, attn_in),
        f"{prefix}self_attn.o_proj.weight": (hidden, heads * head_dim),
        f"{prefix}mlp.gate_proj.weight": (ffn, hidden),
        f"{prefix}mlp.up_proj.weight": (ffn, hidden),
        f"{prefix}mlp.down_proj.weight": (hidden, ffn),
        f"{prefix}input_layernorm.weight": (hidden,),
        f"{prefix}post_attention_layernorm.weight": (hidden,),
    }


def dflash(
    target: Mapping[str, Any],
    block_size: int,
    ffn: int,
    layers: int = 1,
    target_layer_ids: list[int] | None = None,
) -> tuple[dict[str, Any], Shapes]:
    """Config and weight shapes of a DFLASH drafter of ``layers`` layers for ``target``.

    ``target_layer_ids`` are the target layers whose outputs feed ``fc`` (SGLang captures the
    output of layer L at the input of layer L + 1, so L stays below the last layer); by
    default SGLang's own choice for a one-layer drafter, the middle layer. The draft layers
    attend to the context and to the whole block in both directions: the config says so
    (``layer_types`` all full attention, ``is_causal`` false), which is what SGLang reads.
    """
    hidden, heads, kv, head_dim, n_target = _dims(target)
    captured = sorted(target_layer_ids) if target_layer_ids else [n_target // 2]
    if captured[0] < 0 or captured[-1] > n_target - 2:
        raise SystemExit(
            f"target layer ids {captured} are out of range for a {n_target}-layer target: "
            f"give ids from 0 to {n_target - 2}"
        )
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        **_one_layer(hidden, heads, kv, head_dim, ffn),
        "num_hidden_layers": layers,
        "layer_types": ["full_attention"] * layers,
        "is_causal": False,
        "use_sliding_window": False,
        "block_size": block_size,
        "num_target_layers": n_target,
        "dflash_config": {"mask_token_id": 0, "target_layer_ids": captured},
        **_shared(target),
    }
    shapes: Shapes = {
        "fc.weight": (hidden, len(captured) * hidden),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
    }
    for i in range(layers):
        shapes |= _layer(f"layers.{i}.", hidden, heads, kv, head_dim, ffn, hidden)
        shapes |= {
            f"layers.{i}.self_attn.q_norm.weight": (head_dim,),
            f"layers.{i}.self_attn.k_norm.weight": (head_dim,),
        }
    return config, shapes


def eagle3(target: Mapping[str, Any], ffn: int) -> tuple[dict[str, Any], Shapes]:
    """Config and weight shapes of an EAGLE-3 draft head for ``target`` (full vocabulary)."""
    hidden, heads, kv, head_dim, layers = _dims(target)
    captured = [1, layers // 2 - 1, layers - 4]  # SGLang's default capture points
    vocab = int(target["vocab_size"])
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "target_hidden_size": hidden,
        **_one_layer(hidden, heads, kv, head_dim, ffn),
        "draft_vocab_size": vocab,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": captured,
            "use_aux_hidden_state": True,
        },
        **_shared(target),
    }
    shapes: Shapes = {
        "fc.weight": (hidden, len(captured) * hidden),
        "norm.weight": (hidden,),
        "lm_head.weight": (vocab, hidden),
        "midlayer.hidden_norm.weight": (hidden,),
    }
    shapes |= _layer("midlayer.", hidden, heads, kv, head_dim, ffn, 2 * hidden)
    shapes |= {"d2t": (vocab,), "t2d": (vocab,)}
    return config, shapes


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


def write_weights(out: Path, config: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
    """A drafter's folder: ``config.json`` and ``model.safetensors`` (the arrays in their
    order; none left half-written); returns the weights' sha256."""
    out.mkdir(parents=True, exist_ok=True)
    entries = [(n, a.shape, a.dtype) for n, a in arrays.items()]
    writer = folder.SafetensorsWriter(out / folder.SAFETENSORS, entries, {"format": "pt"})
    try:
        for name, array in arrays.items():
            writer.write(name, array)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    folder.write_json(out / "config.json", config)
    return hashlib.sha256((out / folder.SAFETENSORS).read_bytes()).hexdigest()


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make-sglang-drafters", description=__doc__.split("\n")[0])
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
