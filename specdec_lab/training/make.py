"""A drafter made for a target: kept where its recipe matches, else the data generated, the
drafter trained and checked, and its folder (``config.json``, ``model.safetensors``, the
``specdec-model.json`` sidecar) published whole.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specdec_lab.drafters import layout
from specdec_lab.formats import folder
from specdec_lab.training.data import Data, generate, load_target, on_device, render, target_lookup
from specdec_lab.training.evaluate import each_prompt, server_path_check
from specdec_lab.training.model import build_modules, write_drafter
from specdec_lab.training.prompts import prompts, workload_lines, workload_prompts
from specdec_lab.training.recipe import Recipe
from specdec_lab.training.templates import KINDS
from specdec_lab.training.train import train


def output_dir(target: Path, out_dir: Path | None, recipe: Recipe) -> Path:
    stem = target.name.removesuffix(".hf")
    name = f"{stem}.dflash-b{recipe.block_size}-distilled-seed{recipe.seed}.hf"
    return (out_dir or target.parent) / name


def target_identity(target: Path) -> dict[str, Any]:
    """The target's name, config and weights' sha256: the one its sidecar records for the
    folder's ``model.safetensors`` (``make-memory-bound-models`` writes it under ``hf``; the
    sidecar's own ``sha256`` is the GGUF's), None for a folder without one."""
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    sidecar = target / folder.SIDECAR
    record = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.is_file() else {}
    return {"name": target.name, "sha256": (record.get("hf") or {}).get("sha256"),
            "config": config}  # fmt: skip


def generated(torch: Any, model: Any, rendered: list[list[int]], recipe: Recipe, log: Any) -> Data:
    """:func:`generate`, with a GPU out of memory named and its fix given."""
    try:
        return generate(torch, model, rendered, recipe, log)
    except torch.cuda.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        raise SystemExit(
            f"make-dflash-drafter: the GPU ran out of memory while the target generated "
            f"--gen-batch {recipe.gen_batch} continuations at a time ({first}); give a smaller "
            f"--gen-batch, e.g. {max(1, recipe.gen_batch // 2)} (a recipe setting: the drafter "
            "made differs)"
        ) from exc


def make(args: argparse.Namespace, recipe: Recipe, log: Any) -> Path:
    target: Path = args.target
    if not (target / "config.json").is_file():
        raise SystemExit(
            f"make-dflash-drafter: {target / 'config.json'} does not exist; give --target the "
            "Hugging Face folder of the target (make-memory-bound-models --format hf)"
        )
    recipe.check()
    identity = target_identity(target)
    target_config = identity["config"]
    config, shapes = layout.dflash(
        target_config, recipe.block_size, recipe.ffn, recipe.layers, list(recipe.target_layer_ids)
    )
    config["dflash_config"]["mask_token_id"] = recipe.mask_token_id
    out = output_dir(target, args.out, recipe)
    wanted = json.loads(json.dumps(
        {"recipe": asdict(recipe), "target": {k: identity[k] for k in ("name", "sha256")}}
    ))  # fmt: skip
    sidecar = out / folder.SIDECAR
    if sidecar.is_file() and not args.force:
        have = json.loads(sidecar.read_text(encoding="utf-8"))
        if {k: have.get(k) for k in wanted} == wanted:
            log(f"up to date: {out}")
            return out

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(recipe.seed)
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # Strict, not warn-only: cuDNN's attention backward (what scaled_dot_product_attention
    # picks on an H200) is non-deterministic unless determinism is demanded outright, and it
    # was the one op that warned. The same recipe, target, GPU and torch should then give the
    # same drafter, whose sha256 is part of every baseline key stored with it.
    torch.use_deterministic_algorithms(True)
    dtype = torch.float16 if device == "cuda" else torch.float32
    exclude = {json.loads(line).get("prompt") for line in workload_lines()} - {None}
    # training prompts, then the held-out ones (the last rows): about other things
    drawn = prompts(recipe.seed, recipe.prompts - recipe.eval_sequences, exclude) + prompts(
        recipe.seed, recipe.eval_sequences, exclude, split="held-out"
    )
    began = time.monotonic()
    model, tokenizer = load_target(target, device, dtype)
    rendered = [render(tokenizer, text) for _, text in drawn]
    log(f"target loaded on {device} ({time.monotonic() - began:.0f} s); "
        f"{len(rendered)} prompts, {recipe.gen_tokens} tokens each")  # fmt: skip
    data = generated(torch, model, rendered, recipe, log)
    workload, texts = None, {}
    if recipe.eval_workload:
        texts = workload_prompts(recipe.eval_workload)
        workload = generated(torch, model, [render(tokenizer, t) for t in texts.values()], recipe,
                             log)  # fmt: skip
    embed, head = target_lookup(torch, model)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    data = on_device(data)
    workload = on_device(workload) if workload is not None else None
    drafter = build_modules(torch)(config).to(device)
    for p in drafter.parameters():  # a trained layer's scale; norm gains of one
        if p.ndim > 1:
            torch.nn.init.normal_(p, std=0.02)
    result = train(torch, drafter, data, recipe, embed, head, log,
                   args.max_minutes * 60 if args.max_minutes else None, workload)  # fmt: skip
    check = server_path_check(torch, drafter, data, recipe, embed, head)
    if check["same_tokens"] != check["blocks"]:
        raise SystemExit(f"make-dflash-drafter: the server's path drafts other tokens: {check}")
    part = out.with_name(out.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    digest = write_drafter(part, drafter, config, shapes)
    kinds = {k: sum(1 for kind, _ in drawn if kind == k) for k in KINDS}
    folder.write_json(
        part / folder.SIDECAR,
        {
            **wanted,
            "sha256": digest,
            "params": sum(math.prod(s) for s in shapes.values()),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__,
            "deterministic": torch.are_deterministic_algorithms_enabled()
            and not torch.is_deterministic_algorithms_warn_only_enabled(),
            "data": {
                "prompts_by_kind": kinds,
                "tokens": int((data.lengths - data.prompt_lengths).sum()),
                "generate_s": round(data.seconds, 1),
                "held_out_sequences": recipe.eval_sequences,
                "workload_sequences": 0 if workload is None else int(workload.tokens.shape[0]),
                "workload_prompts": list(texts),
            },
            "training": result,
            "server_path_check": check,
            "total_s": round(time.monotonic() - began, 1),
        },
    )
    if out.exists():
        shutil.rmtree(out)
    os.replace(part, out)
    on = result.get("final_workload")
    log(f"wrote {out}: held-out accept length {result['final']['accept_length']:.2f}"
        + (f", on the {recipe.eval_workload} prompts {on['accept_length']:.2f} "
           f"({each_prompt(texts, on)})" if on else "")
        + f", {result['steps_done']} steps, {time.monotonic() - began:.0f} s in all")  # fmt: skip
    return out
