"""A distilled DFLASH drafter on the suite's own prompts: the trainer's evaluation against the
server's way of drafting in float16.

The target (a Hugging Face folder) continues the prompts of a built-in workload greedily; the
drafter (a folder ``make-dflash-drafter`` wrote) then drafts 16-token blocks along each
continuation as the server's greedy verification walks it (draft at the first generated token,
accept the drafted tokens up to the first miss plus the target's own, draft again after them),
twice:

* as ``make-dflash-drafter`` evaluates it (a block at every position in one masked forward,
  bf16 autocast on a GPU, float32 on a CPU, then the walk over those);
* as SGLang serves it: float16 weights and activations, the context's keys and values first,
  then the block on its own, one verify step at a time.

Each line prints the accept length (the geometric mean over prompts of tokens per verify step,
as the suite reports it), each prompt's, and the acceptance at drafted positions 1 to 3. Two
figures far apart mean the served drafter is not the trained one; two low figures mean the
drafter does not carry over to these prompts.

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a plain checkout
from specdec_lab.formats import folder
from specdec_lab.training.data import generate, load_target, render, target_lookup
from specdec_lab.training.evaluate import each_prompt, evaluate, served_walk, walk_summary
from specdec_lab.training.model import build_modules
from specdec_lab.training.prompts import workload_prompts
from specdec_lab.training.recipe import Recipe


def served_way(
    torch: Any, drafter: Any, data: Any, recipe: Any, embed: Any, head: Any
) -> dict[str, Any]:
    """The server's walk over each continuation, drafting one block at a time in float16."""
    s = recipe.block_size
    half = drafter.half()
    walks = []
    for row in range(data.tokens.shape[0]):
        first, end = int(data.prompt_lengths[row]), int(data.lengths[row])

        def run_at(at: int, row: int = row, first: int = first, end: int = end) -> int:
            anchor = first + at
            ids = torch.full((s,), recipe.mask_token_id, dtype=torch.long)
            ids[0] = data.tokens[row, anchor]
            with torch.no_grad():
                h = half.draft_one(data.feats[row].half(), embed(ids).half(), anchor)[1:]
            drafted = (h.float() @ head.t().float()).argmax(-1)
            target = data.tokens[row, anchor + 1 : min(end, anchor + s)]
            hit = drafted[: len(target)] == target
            return int(hit.long().cumprod(0).sum())

        walks.append(served_walk(run_at, end - first - 1, s))
    return walk_summary(walks)


def _line(name: str, figures: dict[str, Any], prompts: list[str]) -> str:
    each = each_prompt(prompts, figures)
    return (
        f"  {name:<25}accept length {figures['accept_length']:.2f} ({each}), "
        f"positions 1-3 {figures['acceptance_by_position'][:3]}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", type=Path, required=True, help="the target's Hugging Face folder")
    p.add_argument("--drafter", type=Path, required=True, help="the drafter's folder")
    p.add_argument("--workload", default="seed", help="built-in workload (default seed)")
    p.add_argument("--tokens", type=int, default=96, help="continuation length (default 96)")
    args = p.parse_args(argv)

    import torch

    sidecar = json.loads((args.drafter / folder.SIDECAR).read_text(encoding="utf-8"))
    fields = Recipe.__dataclass_fields__
    given = {k: tuple(v) if isinstance(v, list) else v
             for k, v in sidecar["recipe"].items() if k in fields and k != "generator"}  # fmt: skip
    texts = workload_prompts(args.workload)
    recipe = Recipe(**{**given, "gen_tokens": args.tokens, "gen_batch": len(texts)})
    model, tokenizer = load_target(args.target, "cpu", torch.float32)
    rendered = [render(tokenizer, t) for t in texts.values()]
    data = generate(torch, model, rendered, recipe, lambda _: None)
    embed, head = target_lookup(torch, model)
    config = json.loads((args.drafter / "config.json").read_text(encoding="utf-8"))
    drafter = build_modules(torch)(config)
    weights = folder.read_safetensors(args.drafter / folder.SAFETENSORS)
    drafter.load_state_dict({k: torch.from_numpy(v.astype("float32")) for k, v in weights})
    rows = torch.arange(len(texts))
    trained = evaluate(torch, drafter, data, rows, recipe, embed, head)
    served = served_way(torch, drafter, data, recipe, embed, head)
    made_by = sidecar["recipe"].get("generator")
    print(f"{args.workload} prompts ({len(texts)}, {args.tokens} tokens each), "
          f"drafter {args.drafter.name} ({made_by}):")  # fmt: skip
    print(_line("trainer's evaluation", trained, list(texts)))
    print(_line("served way, float16", served, list(texts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
