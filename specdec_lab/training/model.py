"""The drafter in plain torch: SGLang's ``DFlashDraftModel``, its weights and forward (the
training way, every anchor's block in one masked pass, and the server's way, ``draft_one``),
the dtype it computes in, and its weights written in the layout SGLang reads. torch is
imported by the callers and passed in, so that this module imports without it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from specdec_lab.drafters import layout


def compute_dtype(device_type: str) -> str:
    """The dtype the drafter's forward passes compute in, in training and evaluation (the
    weights and the optimizer are float32 either way): bfloat16 autocast on a GPU, the
    recipe's; float32 on a CPU, where bfloat16 is fast only with native support (AVX512-BF16,
    AMX) and otherwise falls back to torch's reference GEMM (the tests' 40-step recipe trained
    in 1082 s there on a 2-core AMD EPYC without it, in 98 s in float32: docs/dflash-drafter.md).
    Recorded in the sidecar (``training.compute_dtype``)."""
    return "float32" if device_type == "cpu" else "bfloat16"


def autocast(torch: Any, device_type: str) -> Any:
    """The context the drafter's forward passes run in on ``device_type`` (``compute_dtype``)."""
    if compute_dtype(device_type) == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16)


def build_modules(torch: Any) -> Any:
    """The drafter's modules (torch is imported by the caller: the module imports without it)."""
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, dim: int, eps: float) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x: Any) -> Any:
            x32 = x.float()
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
            return x32.to(x.dtype) * self.weight.to(x.dtype)

    def rope(x: Any, pos: Any, theta: float) -> Any:
        """Rotary embedding, NeoX layout (halves), x: [..., T, heads, d], pos: [..., T]."""
        d = x.shape[-1]
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        ang = pos.float()[..., None] * inv  # [..., T, d/2]
        cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
        x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)

    class Attention(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, hidden: int, heads: int, kv: int, head_dim: int, eps: float) -> None:
            super().__init__()
            self.heads, self.kv, self.head_dim = heads, kv, head_dim
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
            self.q_norm = RMSNorm(head_dim, eps)
            self.k_norm = RMSNorm(head_dim, eps)

        def context_kv(self, ctx: Any, pos: Any, theta: float) -> tuple[Any, Any]:
            """Keys and values of context entries, as the server materializes them."""
            shape = (*ctx.shape[:-1], self.kv, self.head_dim)
            k = rope(self.k_norm(self.k_proj(ctx).view(shape)), pos, theta)
            return k, self.v_proj(ctx).view(shape)

        def forward(self, x: Any, pos: Any, ctx_k: Any, ctx_v: Any, mask: Any, theta: float) -> Any:
            """x: [B, Q, H] block entries; ctx_k/v: [B, T, kv, d]; mask: [B, Q, T + Q] bool."""
            b, q_len, _ = x.shape
            q = self.q_norm(self.q_proj(x).view(b, q_len, self.heads, self.head_dim))
            k, v = self.context_kv(x, pos, theta)
            q = rope(q, pos, theta)
            keys = torch.cat((ctx_k, k), 1).transpose(1, 2)  # [B, kv, T + Q, d]
            values = torch.cat((ctx_v, v), 1).transpose(1, 2)
            group = self.heads // self.kv
            keys = keys.repeat_interleave(group, 1)
            values = values.repeat_interleave(group, 1)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), keys, values, attn_mask=mask[:, None], scale=self.head_dim**-0.5
            )
            return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))

    class MLP(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, hidden: int, ffn: int) -> None:
            super().__init__()
            self.gate_proj = nn.Linear(hidden, ffn, bias=False)
            self.up_proj = nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x: Any) -> Any:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__()
            hidden, eps = config["hidden_size"], float(config["rms_norm_eps"])
            self.input_layernorm = RMSNorm(hidden, eps)
            self.self_attn = Attention(
                hidden, config["num_attention_heads"], config["num_key_value_heads"],
                config["head_dim"], eps,
            )  # fmt: skip
            self.post_attention_layernorm = RMSNorm(hidden, eps)
            self.mlp = MLP(hidden, config["intermediate_size"])

    class Drafter(nn.Module):  # type: ignore[misc, name-defined]
        """DFlashDraftModel's weights and forward; the embedding and head are the target's."""

        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__()
            hidden, eps = config["hidden_size"], float(config["rms_norm_eps"])
            ids = config["dflash_config"]["target_layer_ids"]
            self.theta = rope_theta(config)
            self.fc = nn.Linear(len(ids) * hidden, hidden, bias=False)
            self.hidden_norm = RMSNorm(hidden, eps)
            self.layers = nn.ModuleList(Layer(config) for _ in range(config["num_hidden_layers"]))
            self.norm = RMSNorm(hidden, eps)

        def forward(self, feats: Any, ctx_pos: Any, block: Any, block_pos: Any, mask: Any) -> Any:
            """Hidden states of block entries [B, Q, H] over context features [B, T, K*H]."""
            ctx = self.hidden_norm(self.fc(feats.to(self.fc.weight.dtype)))
            h = block
            for layer in self.layers:
                attn = layer.self_attn
                ctx_k, ctx_v = attn.context_kv(ctx, ctx_pos, self.theta)
                h = h + attn(layer.input_layernorm(h), block_pos, ctx_k, ctx_v, mask, self.theta)
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return self.norm(h)

        def draft_one(self, feats: Any, block: Any, n: int) -> Any:
            """One block the server's way: the n context entries' keys and values first (as
            materialized in its cache), then the block alone attending to them and to itself.
            feats: [n, K*H], block: [S, H]; returns [S, H]."""
            ctx = self.hidden_norm(self.fc(feats[:n].to(self.fc.weight.dtype)))
            ctx_pos = torch.arange(n, device=feats.device)
            pos = torch.arange(n, n + block.shape[0], device=feats.device)
            everything = torch.ones(1, block.shape[0], n + block.shape[0], dtype=torch.bool,
                                    device=feats.device)  # fmt: skip
            h = block[None]
            for layer in self.layers:
                attn = layer.self_attn
                ctx_k, ctx_v = attn.context_kv(ctx[None], ctx_pos[None], self.theta)
                h = h + attn(
                    layer.input_layernorm(h), pos[None], ctx_k, ctx_v, everything, self.theta
                )
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return self.norm(h)[0]

    return Drafter


def rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or {}
    return float(config.get("rope_theta") or params.get("rope_theta") or 10000.0)


def write_drafter(
    out: Path, drafter: Any, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]
) -> str:
    """config.json and model.safetensors (float16), in the order and shapes SGLang reads."""
    import numpy as np

    state = {k: v.detach().float().cpu().numpy().astype(np.float16)
             for k, v in drafter.state_dict().items()}  # fmt: skip
    if {k: tuple(v.shape) for k, v in state.items()} != dict(shapes):
        raise SystemExit(
            "make-dflash-drafter: the trained weights do not have the names and shapes SGLang "
            f"reads: got {sorted(state)}, want {sorted(shapes)}"
        )
    return layout.write_weights(out, config, {name: state[name] for name in shapes})
