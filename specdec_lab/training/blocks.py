"""A batch of draft blocks: anchors drawn in the generated part of each continuation, the
blocks' embeddings, positions, attention mask, labels and weights, and the drafted logits.
"""

from __future__ import annotations

from typing import Any

from specdec_lab.training.data import Data
from specdec_lab.training.recipe import Recipe


def block_inputs(
    torch: Any, data: Data, rows: Any, anchors: Any, recipe: Recipe, embed: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """Block embeddings, positions, attention mask, labels and label weights for ``anchors``
    ([B, A] positions of the bonus token in each row)."""
    s = recipe.block_size
    b, a = anchors.shape
    device = anchors.device
    offs = torch.arange(s, device=device)
    pos = (anchors[:, :, None] + offs).reshape(b, a * s)  # [B, A*S]
    ids = torch.full((b, a, s), recipe.mask_token_id, dtype=torch.long, device=device)
    ids[:, :, 0] = data.tokens[rows].gather(1, anchors)
    block = embed(ids.reshape(b, a * s))
    t = data.tokens.shape[1]
    ctx_ok = torch.arange(t, device=device)[None, None, :] < anchors[:, :, None]  # [B, A, T]
    ctx_ok = ctx_ok[:, :, None, :].expand(b, a, s, t).reshape(b, a * s, t)
    same = torch.eye(a, dtype=torch.bool, device=device)[:, None, :, None]
    same = same.expand(a, s, a, s).reshape(a * s, a * s)[None].expand(b, -1, -1)
    mask = torch.cat((ctx_ok, same), -1)
    label_pos = (anchors[:, :, None] + offs[1:]).clamp(max=t - 1)  # [B, A, S-1]
    labels = data.tokens[rows][torch.arange(b, device=device)[:, None, None], label_pos]
    valid = (anchors[:, :, None] + offs[1:]) < data.lengths[rows][:, None, None]
    weights = torch.exp(-(offs[1:].float() - 1) / recipe.gamma)[None, None] * valid
    return block, pos, mask, labels, weights


def draft_logits(drafter: Any, data: Data, rows: Any, inputs: tuple[Any, ...], head: Any) -> Any:
    import torch

    block, pos, mask, _, _ = inputs
    t = data.tokens.shape[1]
    ctx_pos = torch.arange(t, device=block.device)[None].expand(len(rows), t)
    h = drafter(data.feats[rows], ctx_pos, block, pos, mask)
    b, q, hidden = h.shape
    s = inputs[3].shape[2] + 1
    h = h.view(b, q // s, s, hidden)[:, :, 1:]
    return h @ head.t().to(h.dtype)


def sample_anchors(torch: Any, data: Data, rows: Any, count: int, gen: Any) -> Any:
    """Anchors in the generated part of each row, with at least one token after them."""
    low = data.prompt_lengths[rows]
    high = data.lengths[rows] - 1
    u = torch.rand(len(rows), count, generator=gen, device=low.device)
    return low[:, None] + (u * (high - low)[:, None]).long()
