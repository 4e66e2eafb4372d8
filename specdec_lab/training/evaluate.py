"""Accept length as the server gets it: the drafted run at every anchor of a continuation, the
server's greedy walk over it (``served_walk``), its summary as the suite reports it
(``walk_summary``), and the check that the server's way of drafting a block agrees with the
training forward (``server_path_check``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from specdec_lab.training.blocks import block_inputs, draft_logits
from specdec_lab.training.data import Data
from specdec_lab.training.model import autocast
from specdec_lab.training.recipe import Recipe


def anchor_runs(
    torch: Any, drafter: Any, data: Data, rows: Any, recipe: Recipe, embed: Any, head: Any
) -> Any:
    """[R, gen_tokens - 1] for ``rows``: the drafted tokens accepted at an anchor on each
    position of the continuation, up to the first that differs from the target's greedy
    token (what SGLang's greedy verification accepts there)."""
    at = torch.arange(recipe.gen_tokens - 1, device=data.tokens.device)
    runs = []
    with torch.no_grad():
        for i in range(0, len(rows), 4):
            chunk = rows[i : i + 4]
            anchors = data.prompt_lengths[chunk][:, None] + at[None]
            inputs = block_inputs(torch, data, chunk, anchors, recipe, embed)
            with autocast(torch, data.tokens.device.type):
                logits = draft_logits(drafter, data, chunk, inputs, head)
            hit = (logits.argmax(-1) == inputs[3]) & (inputs[4] > 0)
            runs.append(hit.long().cumprod(-1).sum(-1))  # 1 while every earlier one was accepted
    return torch.cat(runs).cpu()


def served_walk(
    run_at: Callable[[int], int], length: int, block_size: int
) -> tuple[int, int, list[int]]:
    """The server's greedy walk over one continuation of ``length`` tokens: draft at the
    first generated token, accept ``run_at(anchor)`` drafted tokens plus the target's own, draft
    again after them. Returns (tokens, verify steps, steps that accepted drafted position k)."""
    at, tokens, steps, reached = 0, 0, 0, [0] * (block_size - 1)
    while at < length:
        run = run_at(at)
        tokens, steps, at = tokens + run + 1, steps + 1, at + run + 1
        for k in range(run):
            reached[k] += 1
    return tokens, steps, reached


def walk_summary(walks: Sequence[tuple[int, int, list[int]]]) -> dict[str, Any]:
    """Accept length as the suite reports it (the geometric mean over continuations of tokens
    per verify step), each continuation's, and the acceptance by drafted position over all
    verify steps."""
    by_row = [w[0] / w[1] for w in walks if w[1]]
    steps = sum(w[1] for w in walks)
    reached = [sum(w[2][k] for w in walks) for k in range(len(walks[0][2]))] if walks else []
    return {
        "accept_length": math.exp(sum(map(math.log, by_row)) / len(by_row)) if by_row else 1.0,
        "by_continuation": [round(a, 3) for a in by_row],
        "acceptance_by_position": [round(r / max(1, steps), 4) for r in reached],
    }


def each_prompt(names: Iterable[str], figures: dict[str, Any]) -> str:
    """``walk_summary``'s accept length per continuation, named: "fibonacci 3.28, ..."."""
    return ", ".join(
        f"{name} {a:.2f}" for name, a in zip(names, figures["by_continuation"], strict=True)
    )


def evaluate(
    torch: Any, drafter: Any, data: Data, rows: Any, recipe: Recipe, embed: Any, head: Any
) -> dict[str, Any]:
    """Accept length on ``rows`` as the server gets it: each continuation walked the server's
    way (``served_walk``), then summarised as the suite reports it (``walk_summary``). Beside
    it, the mean over every anchor of the continuation: a position where the drafter does well
    counts once there, however few verify steps the server spends on it."""
    runs = anchor_runs(torch, drafter, data, rows, recipe, embed, head).tolist()
    walks = [served_walk(r.__getitem__, len(r), recipe.block_size) for r in runs]
    every = [x for r in runs for x in r]
    mean_every = 1 + sum(every) / max(1, len(every))
    return {**walk_summary(walks), "every_anchor_accept_length": round(mean_every, 4)}


def server_path_check(
    torch: Any, drafter: Any, data: Data, recipe: Recipe, embed: Any, head: Any
) -> dict[str, Any]:
    """The drafted tokens of a few held-out anchors, computed the training way and the way the
    server computes them: they must agree."""
    n = data.tokens.shape[0]
    rows = torch.arange(n - min(4, recipe.eval_sequences), n, device=data.tokens.device)
    anchors = data.prompt_lengths[rows][:, None] + torch.tensor([0, 3], device=rows.device)
    agree, worst = 0, 0.0
    with torch.no_grad():
        inputs = block_inputs(torch, data, rows, anchors, recipe, embed)
        batched = draft_logits(drafter, data, rows, inputs, head).float()
        s = recipe.block_size
        for i in range(len(rows)):
            for j in range(anchors.shape[1]):
                p = int(anchors[i, j])
                block = inputs[0][i, j * s : (j + 1) * s]
                h = drafter.draft_one(data.feats[rows[i]], block, p)[1:]
                one = (h @ head.t().to(h.dtype)).float()
                worst = max(worst, float((one - batched[i, j]).abs().max()))
                agree += int(torch.equal(one.argmax(-1), batched[i, j].argmax(-1)))
    return {"blocks": int(rows.numel() * anchors.shape[1]), "same_tokens": agree,
            "max_abs_logit_diff": round(worst, 6)}  # fmt: skip
