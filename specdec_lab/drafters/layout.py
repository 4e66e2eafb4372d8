"""The drafters' architectures as SGLang 0.5.17 loads them: config and weight names and shapes
for a target, and a drafter's folder written (``config.json``, ``model.safetensors``).

* ``dflash``: ``DFlashDraftModel`` (sglang/srt/models/dflash.py), one Qwen3-style layer that
  reads the target's hidden states of ``target_layer_ids`` through ``fc``; it shares the
  target's embedding and head. A block of ``block_size`` tokens is drafted at once.
* ``eagle3``: ``LlamaForCausalLMEagle3`` (sglang/srt/models/llama_eagle3.py): ``fc`` over three
  captured hidden states, one ``midlayer``, its own ``lm_head`` over the full vocabulary
  (``d2t`` all zeros, ``t2d`` all true: the identity map); the target's embedding is shared.

The seeded drafters (``seeded``) and the trained one (``specdec_lab.training``) are written in
these layouts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specdec_lab.formats import folder

Shapes = dict[str, tuple[int, ...]]


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
