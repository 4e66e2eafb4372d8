"""The training loop: DFlash's block objective, AdamW with warmup and cosine decay, the accept
length measured every ``eval_every`` steps, and the weights of the best evaluation kept.
"""

from __future__ import annotations

import math
import time
from typing import Any

from specdec_lab.training.blocks import block_inputs, draft_logits, sample_anchors
from specdec_lab.training.data import Data
from specdec_lab.training.evaluate import evaluate
from specdec_lab.training.model import autocast, compute_dtype
from specdec_lab.training.recipe import Recipe


def train(
    torch: Any, drafter: Any, data: Data, recipe: Recipe, embed: Any, head: Any, log: Any,
    max_seconds: float | None, workload: Data | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train; every ``eval_every`` steps the accept length on the held-out continuations (of
    prompts about things never trained on) and, with ``workload``, on the continuations of
    the suite's own prompts (report only). The held-out rows are split in two: the weights
    kept are those of the evaluation with the best accept length on the first half (a small
    drafter on a few thousand sequences can memorise them, and then do worse on new text
    while its loss still drops), and the figure reported is the second half's, which chose
    nothing."""
    device = data.tokens.device
    n = data.tokens.shape[0]
    train_rows = n - recipe.eval_sequences
    choose = torch.arange(train_rows, train_rows + recipe.eval_sequences // 2, device=device)
    held = torch.arange(train_rows + recipe.eval_sequences // 2, n, device=device)
    gen = torch.Generator(device=device).manual_seed(recipe.seed)
    opt = torch.optim.AdamW(drafter.parameters(), lr=recipe.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)  # fmt: skip

    def lr_at(step: int) -> float:
        if step < recipe.warmup:
            return recipe.lr * (step + 1) / recipe.warmup
        done = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
        return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))

    loss_curve: list[list[float]] = []
    accept_curve: list[list[float]] = []
    workload_curve: list[list[float]] = []
    choose_curve: list[list[float]] = []
    # the kept weights (a copy on the device), the step and the measurements at that step
    kept: dict[str, Any] = {"step": -1, "accept": -1.0}

    def measure(at: int) -> str:
        chooser = evaluate(torch, drafter, data, choose, recipe, embed, head)["accept_length"]
        choose_curve.append([at, round(chooser, 4)])
        held_out = evaluate(torch, drafter, data, held, recipe, embed, head)
        accept_curve.append([at, round(held_out["accept_length"], 4)])
        said = f"held-out accept length {held_out['accept_length']:.2f}"
        on = None
        if workload is not None:
            rows = torch.arange(workload.tokens.shape[0], device=device)
            on = evaluate(torch, drafter, workload, rows, recipe, embed, head)
            workload_curve.append([at, round(on["accept_length"], 4)])
            said += f", on the {recipe.eval_workload} prompts {on['accept_length']:.2f}"
        if chooser > kept["accept"]:
            state = {k: v.detach().clone() for k, v in drafter.state_dict().items()}
            kept.update(step=at, accept=chooser, state=state,
                        final=held_out, final_workload=on)  # fmt: skip
        return said

    measure(0)
    start, steps_done, stopped_early = time.monotonic(), 0, False
    # the loss summed on the device (float64, as Python would add it): no sync at every step
    window, window_n = torch.zeros((), dtype=torch.float64, device=device), 0
    for step in range(recipe.steps):
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            stopped_early = True
            log(f"stopped at step {step}: --max-minutes reached")
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        rows = torch.randint(0, train_rows, (recipe.batch,), generator=gen, device=device)
        anchors = sample_anchors(torch, data, rows, recipe.anchors, gen)
        inputs = block_inputs(torch, data, rows, anchors, recipe, embed)
        with autocast(torch, device.type):
            logits = draft_logits(drafter, data, rows, inputs, head)
        ce = torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 2), inputs[3].flatten(), reduction="none"
        ).view_as(inputs[4])
        loss = (ce * inputs[4]).sum() / inputs[4].sum().clamp(min=1e-6)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        steps_done = step + 1
        window, window_n = window + loss.detach().double(), window_n + 1
        if steps_done % max(1, recipe.eval_every // 10) == 0 or steps_done == recipe.steps:
            loss_curve.append([steps_done, round(float(window) / window_n, 4)])
            window, window_n = torch.zeros_like(window), 0
        if steps_done % recipe.eval_every == 0 or steps_done == recipe.steps:
            said = measure(steps_done)
            log(f"step {steps_done}: loss {loss_curve[-1][1]:.3f}, {said} "
                f"({time.monotonic() - start:.0f} s)")  # fmt: skip
    if accept_curve[-1][0] != steps_done:  # stopped between evaluations
        measure(steps_done)
    drafter.load_state_dict(kept["state"])
    if kept["step"] != steps_done:
        log(f"kept the weights of step {kept['step']}: the best accept length on the held-out "
            f"rows that choose ({kept['accept']:.2f})")  # fmt: skip
    on_workload = {} if workload is None else {
        "workload_accept_length": workload_curve, "final_workload": kept["final_workload"],
    }  # fmt: skip
    return {
        "compute_dtype": compute_dtype(device.type),
        "steps_done": steps_done,
        "stopped_early": stopped_early,
        "seconds": round(time.monotonic() - start, 1),
        "loss": loss_curve,
        "accept_length": accept_curve,
        "choosing_accept_length": choose_curve,
        "kept_step": kept["step"],
        "final": kept["final"],
        **on_workload,
    }
