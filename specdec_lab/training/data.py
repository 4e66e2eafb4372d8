"""The data: the target's greedy continuations of the rendered prompts, and its hidden states
along them at the layers the drafter reads; what the drafter borrows from the target (its
embedding and LM head).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_lab.training.recipe import Recipe


@dataclass
class Data:
    tokens: Any  # [N, T] long, right-padded
    feats: Any  # [N, T, K*H] target dtype
    lengths: Any  # [N]
    prompt_lengths: Any  # [N]
    seconds: float = 0.0


def load_target(path: Path, device: str, dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device)
    model.eval()
    return model, tokenizer


def target_lookup(torch: Any, model: Any) -> tuple[Any, Any]:
    """What the drafter borrows from the target: its embedding (ids -> float32 vectors) and
    its LM head's weight."""
    embed_w = model.get_input_embeddings().weight.detach()

    def embed(ids: Any) -> Any:
        return torch.nn.functional.embedding(ids, embed_w).float()

    return embed, model.get_output_embeddings().weight.detach()


def render(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def _captured(hidden_states: Sequence[Any], layer_ids: Sequence[int]) -> Any:
    import torch

    return torch.cat([hidden_states[i + 1] for i in layer_ids], -1)


def generate(torch: Any, model: Any, rendered: list[list[int]], recipe: Recipe, log: Any) -> Data:
    """Greedy continuations of ``gen_tokens`` tokens (past any end of text, as the suite's
    fixed-length requests), and the captured hidden states of every token fed to the target.
    The hidden states are kept in host memory, a batch at a time on the GPU: the default recipe's
    (23.8 GB for the 7.4B target) beside that target and a batch's prefill do not fit 80 GB;
    :func:`on_device` moves them there once the target is gone."""
    device = next(model.parameters()).device
    width = max(map(len, rendered)) + recipe.gen_tokens
    n = len(rendered)
    kh = len(recipe.target_layer_ids) * model.config.hidden_size
    tokens = torch.zeros(n, width, dtype=torch.long, device=device)
    feats = torch.zeros(n, width, kh, dtype=model.dtype)  # host memory
    # one batch's hidden states on the GPU, and where they land on the host before their rows
    # are filled in: reused, and page-locked on a GPU for a fast copy
    most = min(recipe.gen_batch, n)
    batch_feats = torch.zeros(most, width, kh, dtype=model.dtype, device=device)
    staging = torch.empty(most, width, kh, dtype=model.dtype, pin_memory=device.type == "cuda")
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    prompt_lengths = torch.tensor([len(r) for r in rendered], device=device)
    # batches of prompts of about the same length: a batch is padded to its longest prompt
    order = sorted(range(n), key=lambda i: len(rendered[i]))
    start = time.monotonic()
    for first in range(0, n, recipe.gen_batch):
        index = order[first : first + recipe.gen_batch]
        rows = [rendered[i] for i in index]
        at = torch.tensor(index, device=device)
        b, longest = len(rows), max(map(len, rows))
        batch_feats.zero_()
        every = torch.arange(b, device=device)
        ids = torch.zeros(b, longest, dtype=torch.long, device=device)
        mask = torch.zeros(b, longest, dtype=torch.long, device=device)
        for i, r in enumerate(rows):  # left padding: every row's last token is in the last column
            ids[i, longest - len(r) :] = torch.tensor(r, device=device)
            mask[i, longest - len(r) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                        output_hidden_states=True, logits_to_keep=1)  # fmt: skip
            cap = _captured(out.hidden_states, recipe.target_layer_ids)
            for i, r in enumerate(rows):
                tokens[index[i], : len(r)] = ids[i, longest - len(r) :]
                batch_feats[i, : len(r)] = cap[i, longest - len(r) :]
            nxt = out.logits[:, -1].argmax(-1)
            past, last = out.past_key_values, pos[:, -1]
            lens = torch.tensor([len(r) for r in rows], device=device)
            for step in range(recipe.gen_tokens):
                tokens[at, lens + step] = nxt
                if step == recipe.gen_tokens - 1:
                    break
                mask = torch.cat((mask, torch.ones(b, 1, dtype=mask.dtype, device=device)), 1)
                last = last + 1
                out = model(
                    input_ids=nxt[:, None], attention_mask=mask, position_ids=last[:, None],
                    past_key_values=past, use_cache=True, output_hidden_states=True,
                )  # fmt: skip
                cap = _captured(out.hidden_states, recipe.target_layer_ids)
                batch_feats[every, lens + step] = cap[:, 0]
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
        lengths[at] = lens + recipe.gen_tokens
        feats[torch.tensor(index)] = staging[:b].copy_(batch_feats[:b])
        log(f"generated {min(first + b, n)}/{n} continuations ({time.monotonic() - start:.0f} s)")
    return Data(tokens, feats, lengths, prompt_lengths, time.monotonic() - start)


def on_device(data: Data) -> Data:
    """``data`` with its hidden states moved to the device of its tokens: for training, once
    the target is gone from the GPU."""
    data.feats = data.feats.to(data.tokens.device)
    return data
