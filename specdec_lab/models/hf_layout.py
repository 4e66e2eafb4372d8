"""The Hugging Face layout of a llama GGUF model: config.json, model.safetensors, tokenizer.

Used by ``scripts/gguf-to-hf`` (``specdec_lab.cli.gguf_to_hf``) and
``scripts/make-memory-bound-models --format hf``, so that
SGLang and vLLM (which load Hugging Face folders) run the very weights llama.cpp runs. No
model hub: the tensors come from the GGUF (dequantized to F16 where it is quantized), the
tokenizer from the GGUF's own vocabulary through transformers' GGUF converter.

What changes on the way, and only that:

* names: ``blk.N.attn_q.weight`` → ``model.layers.N.self_attn.q_proj.weight``, ...;
* the rows of the query and key projections: llama.cpp's converter interleaves the two halves
  of each head for its rotary layout; :func:`unpermute` puts them back in Hugging Face's order.

Every other value is the same bytes (F16 matrices, F32 norms): :func:`verify` re-reads both
files and compares each tensor exactly. ``model.safetensors`` is written tensor by tensor
(the 14.8 GB target never has to fit in memory) and published atomically
(``specdec_lab.formats.folder``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec_lab.formats.folder import (
    SAFETENSORS,
    LayoutError,
    SafetensorsWriter,
    read_safetensors,
    write_json,
)

_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def hf_name(name: str) -> str:
    """The Hugging Face name of a llama GGUF tensor."""
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _BLOCK and parts[3] == "weight":
        return f"model.layers.{parts[1]}.{_BLOCK[parts[2]]}.weight"
    raise LayoutError(f"tensor {name!r} has no Hugging Face name in a llama model")


def unpermute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's rotary row order of a query/key projection (``n_head`` heads)."""
    rows = weight.shape[0]
    if rows % (2 * n_head):
        raise LayoutError(f"{rows} rows do not split into {n_head} heads of two halves")
    half = rows // n_head // 2
    out: np.ndarray = (
        weight.reshape(n_head, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )
    return out


@dataclass(frozen=True)
class Heads:
    n_head: int
    n_head_kv: int

    def to_hf(self, name: str, array: np.ndarray) -> np.ndarray:
        """``array`` (GGUF orientation) as the Hugging Face tensor of the same values."""
        if name.endswith(".attn_q.weight"):
            return unpermute(array, self.n_head)
        if name.endswith(".attn_k.weight"):
            return unpermute(array, self.n_head_kv)
        return array


# ------------------------------------------------------------------------------ config


def _meta(metadata: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = metadata.get(key, default)
    if value is None:
        raise LayoutError(f"the GGUF has no {key!r}: not a llama model this layout knows")
    return value


def hf_config(metadata: Mapping[str, Any], vocab: int, n_ff: int, tied: bool) -> dict[str, Any]:
    """config.json of a LlamaForCausalLM from the GGUF's llama.* metadata."""
    n_embd = int(_meta(metadata, "llama.embedding_length"))
    n_head = int(_meta(metadata, "llama.attention.head_count"))
    theta = float(metadata.get("llama.rope.freq_base", 10000.0))
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": n_embd,
        "intermediate_size": n_ff,
        "num_hidden_layers": int(_meta(metadata, "llama.block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(metadata.get("llama.attention.head_count_kv", n_head)),
        "head_dim": n_embd // n_head,
        "rms_norm_eps": float(_meta(metadata, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "max_position_embeddings": int(metadata.get("llama.context_length", 8192)),
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float16",
        "use_cache": True,
    }
    for ours, theirs in (("bos_token_id", "bos"), ("eos_token_id", "eos")):
        token = metadata.get(f"tokenizer.ggml.{theirs}_token_id")
        if token is not None:
            config[ours] = int(token)
    return config


def _fields(reader: Any, *names: str) -> dict[str, Any]:
    return {n: reader.fields[n].contents() for n in names if n in reader.fields}


def write_tokenizer(gguf: Path, out_dir: Path) -> None:
    """tokenizer.json and tokenizer_config.json from a GGUF's own byte-level BPE vocabulary.

    The pre-tokenizer is llama.cpp's ``smollm`` one: every digit apart, then GPT-2's split
    (``tests/test_hf_layout.py`` checks the ids against llama-server's own ``/tokenize``)."""
    from tokenizers import (  # type: ignore[import-untyped]
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
    )

    fields = _fields(
        _open(gguf),
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.chat_template",
    )
    kind = (fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre"))
    if kind not in (("gpt2", "smollm"), ("gpt2", "gpt-2")):
        raise LayoutError(f"{gguf}: tokenizer {kind} is not a byte-level BPE this layout knows")
    tokens: list[str] = fields["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    split: list[Any] = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if kind[1] == "smollm":
        split.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(split)
    tokenizer.decoder = decoders.ByteLevel()
    special = [
        t
        for t, kind_ in zip(tokens, fields["tokenizer.ggml.token_type"], strict=True)
        if kind_ == 3
    ]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 8192,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
    }
    for role in ("bos", "eos"):
        token_id = fields.get(f"tokenizer.ggml.{role}_token_id")
        if token_id is not None:
            config[f"{role}_token"] = tokens[int(token_id)]
    if "tokenizer.chat_template" in fields:
        config["chat_template"] = fields["tokenizer.chat_template"]
    write_json(out_dir / "tokenizer_config.json", config)


# ------------------------------------------------------------------------------ plain conversion


def _open(gguf: Path) -> Any:
    from gguf import GGUFReader

    return GGUFReader(gguf)


def _gguf_tensors(reader: Any) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor, one at a time, dequantized: F16 matrices, F32 vectors, GGUF orientation."""
    from gguf import GGMLQuantizationType, dequantize

    plain = (GGMLQuantizationType.F16, GGMLQuantizationType.F32)
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        data = np.asarray(t.data) if t.tensor_type in plain else dequantize(t.data, t.tensor_type)
        values = data.reshape(shape)
        yield t.name, values.astype(np.float32 if values.ndim == 1 else np.float16, copy=False)


def _shapes(reader: Any) -> dict[str, tuple[int, ...]]:
    return {t.name: tuple(int(d) for d in reversed(t.shape.tolist())) for t in reader.tensors}


def scalar_metadata(reader: Any) -> dict[str, Any]:
    """A GGUFReader's scalar fields (arrays left out) by name."""
    out = {}
    for field in reader.fields.values():
        value = field.contents()
        if not isinstance(value, list):
            out[field.name] = value
    return out


def heads_of(metadata: Mapping[str, Any]) -> Heads:
    n_head = int(_meta(metadata, "llama.attention.head_count"))
    return Heads(n_head, int(metadata.get("llama.attention.head_count_kv", n_head)))


def convert(gguf: Path, out_dir: Path, tokenizer_from: Path | None = None) -> dict[str, Any]:
    """The Hugging Face folder of a llama GGUF (F16; quantized tensors dequantized)."""
    reader = _open(gguf)
    metadata = scalar_metadata(reader)
    if metadata.get("general.architecture") != "llama":
        raise LayoutError(f"{gguf} is a {metadata.get('general.architecture')!r} model, not llama")
    shapes = _shapes(reader)
    heads = heads_of(metadata)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = [
        (hf_name(n), s, np.dtype(np.float32 if len(s) == 1 else np.float16))
        for n, s in shapes.items()
    ]
    writer = SafetensorsWriter(out_dir / SAFETENSORS, entries, {"format": "pt"})
    try:
        for name, array in _gguf_tensors(reader):
            writer.write(hf_name(name), heads.to_hf(name, array))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    vocab, n_ff = shapes["token_embd.weight"][0], shapes["blk.0.ffn_gate.weight"][0]
    config = hf_config(metadata, vocab, n_ff, tied="output.weight" not in shapes)
    write_json(out_dir / "config.json", config)
    write_tokenizer(tokenizer_from or gguf, out_dir)
    return config


# ------------------------------------------------------------------------------ verification


def _same(theirs: np.ndarray | None, ours: np.ndarray) -> bool:
    """The same shape, dtype and bytes."""
    if theirs is None or theirs.shape != ours.shape or theirs.dtype != ours.dtype:
        return False
    return bool(np.array_equal(theirs.view(np.uint8), np.ascontiguousarray(ours).view(np.uint8)))


def verify(gguf: Path, hf_dir: Path) -> dict[str, Any]:
    """Compare every tensor of ``hf_dir`` with the GGUF's (dequantized where quantized):
    the same names after mapping, shapes and values, bit for bit."""
    reader = _open(gguf)
    heads = heads_of(scalar_metadata(reader))
    hf = dict(read_safetensors(hf_dir / SAFETENSORS))
    mismatched = []
    count = 0
    for name, array in _gguf_tensors(reader):
        count += 1
        theirs = hf.pop(hf_name(name), None)
        ours = heads.to_hf(name, array)
        if not _same(theirs, ours):
            mismatched.append(name)
    return {
        "gguf": str(gguf),
        "hf": str(hf_dir),
        "tensors": count,
        "mismatched": mismatched,
        "extra_in_hf": sorted(hf),
        "equal": not mismatched and not hf,
    }
