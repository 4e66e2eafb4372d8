"""A distilled DFLASH drafter on the suite's own prompts: the trainer's evaluation against the
server's way of drafting in float16.

The target (a Hugging Face folder) continues the prompts of a built-in workload greedily; the
drafter (a folder ``make-dflash-drafter`` wrote) then drafts a 16-token block at every
``--stride``-th position of each continuation, twice:

* as ``make-dflash-drafter`` evaluates it (every anchor in one masked forward, bf16 autocast on
  a GPU, float32 on a CPU);
* as SGLang serves it: float16 weights and activations, the context's keys and values first,
  then the block on its own, one anchor at a time.

Each line prints the accept length (drafted tokens up to the first that differs from the
target's greedy token, plus one) and the acceptance at drafted positions 1 to 3. Two figures
far apart mean the served drafter is not the trained one; two low figures mean the drafter
does not carry over to these prompts.

    PYTHON=~/.cache/pytest-specdec/sglang-0.5.17-venv/bin/python
    $PYTHON bench/dflash_served_way.py --target SmolLM2.hf \
        --drafter out/SmolLM2.dflash-b16-distilled-seed1.hf [--workload seed] [--tokens 96]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import dflash_drafter
import hf_layout


def served_way(torch: Any, drafter: Any, data: Any, recipe: Any, embed: Any, head: Any,
               stride: int) -> tuple[float, list[float]]:  # fmt: skip
    """Accept length and acceptance by position, drafting one anchor at a time in float16."""
    s = recipe.block_size
    half = drafter.half()
    lengths, by_position = [], [0.0] * (s - 1)
    for row in range(data.tokens.shape[0]):
        first, end = int(data.prompt_lengths[row]), int(data.lengths[row])
        for anchor in range(first, end - s, stride):
            ids = torch.full((s,), recipe.mask_token_id, dtype=torch.long)
            ids[0] = data.tokens[row, anchor]
            with torch.no_grad():
                h = half.draft_one(data.feats[row].half(), embed(ids).half(), anchor)[1:]
            drafted = (h.float() @ head.t().float()).argmax(-1)
            run = (drafted == data.tokens[row, anchor + 1 : anchor + s]).long().cumprod(0)
            lengths.append(1 + int(run.sum()))
            by_position = [a + float(b) for a, b in zip(by_position, run, strict=True)]
    n = max(1, len(lengths))
    return sum(lengths) / n, [round(x / n, 4) for x in by_position]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", type=Path, required=True, help="the target's Hugging Face folder")
    p.add_argument("--drafter", type=Path, required=True, help="the drafter's folder")
    p.add_argument("--workload", default="seed", help="built-in workload (default seed)")
    p.add_argument("--tokens", type=int, default=96, help="continuation length (default 96)")
    p.add_argument("--stride", type=int, default=6, help="anchor stride (default 6)")
    args = p.parse_args(argv)

    import torch

    sidecar = json.loads((args.drafter / hf_layout.SIDECAR).read_text(encoding="utf-8"))
    fields = dflash_drafter.Recipe.__dataclass_fields__
    given = {k: tuple(v) if isinstance(v, list) else v
             for k, v in sidecar["recipe"].items() if k in fields and k != "generator"}  # fmt: skip
    texts = dflash_drafter.workload_prompts(args.workload)
    recipe = dflash_drafter.Recipe(**{**given, "gen_tokens": args.tokens, "gen_batch": len(texts)})
    model, tokenizer = dflash_drafter.load_target(args.target, "cpu", torch.float32)
    rendered = [dflash_drafter.render(tokenizer, t) for t in texts]
    data = dflash_drafter.generate(torch, model, rendered, recipe, lambda _: None)
    embed, head = dflash_drafter.target_lookup(torch, model)
    config = json.loads((args.drafter / "config.json").read_text(encoding="utf-8"))
    drafter = dflash_drafter.build_modules(torch)(config)
    weights = hf_layout.read_safetensors(args.drafter / hf_layout.SAFETENSORS)
    drafter.load_state_dict({k: torch.from_numpy(v.astype("float32")) for k, v in weights})
    rows = torch.arange(len(texts))
    trained = dflash_drafter.evaluate(torch, drafter, data, rows, recipe, embed, head)
    served, by_position = served_way(torch, drafter, data, recipe, embed, head, args.stride)
    made_by = sidecar["recipe"].get("generator")
    print(f"{args.workload} prompts ({len(texts)}, {args.tokens} tokens each), "
          f"drafter {args.drafter.name} ({made_by}):")  # fmt: skip
    print(f"  trainer's evaluation       accept length {trained['accept_length']:.2f}, "
          f"positions 1-3 {trained['acceptance_by_position'][:3]}")  # fmt: skip
    print(f"  served way, float16        accept length {served:.2f}, "
          f"positions 1-3 {by_position[:3]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
