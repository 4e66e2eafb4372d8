"""The training chart: an SVG of the loss and the accept length by step, from a drafter's
sidecar (``make-dflash-drafter chart SIDECAR.json OUT.svg``).
"""

from __future__ import annotations

from typing import Any


def chart(sidecar: dict[str, Any]) -> str:
    """An SVG of the training loss and the accept length by step: on held-out continuations
    and, where measured, on the suite's own prompts."""
    training = sidecar["training"]
    workload = sidecar.get("recipe", {}).get("eval_workload") or "workload"
    accept = [("held-out continuations", training["accept_length"], "#d62728")]
    if training.get("workload_accept_length"):
        accept.append((f"the {workload} prompts", training["workload_accept_length"], "#2ca02c"))
    panels = [("training loss (weighted cross-entropy)",
               [("loss", training["loss"], "#1f77b4")]),
              ("accept length (tokens per verify step)", accept)]  # fmt: skip
    w, h, pad = 640, 220, 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h + 30}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{2 * h + 30}" fill="white"/>']  # fmt: skip
    last = max(float(training["steps_done"]), 1.0)
    for i, (title, series) in enumerate(panels):
        top = i * h + 20
        ys = [float(p[1]) for _, points, _ in series for p in points]
        lo, hi = min([*ys, 0.0]), max(ys) * 1.05 or 1.0
        x0, x1, y0, y1 = pad, w - 20, top + h - 40, top + 20

        def px(step: float, value: float) -> tuple[float, float]:
            return (x0 + (x1 - x0) * step / last, y0 - (y0 - y1) * (value - lo) / (hi - lo))  # noqa: B023

        parts += [
            f'<text x="{x0}" y="{top + 12}" font-weight="bold">{title}</text>',
            f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>',
            f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="black"/>',
            f'<text x="{x0 - 5}" y="{y0}" text-anchor="end">{lo:.2f}</text>',
            f'<text x="{x0 - 5}" y="{y1 + 4}" text-anchor="end">{hi:.2f}</text>',
            f'<text x="{x1}" y="{y0 + 15}" text-anchor="end">step {int(last)}</text>',
            f'<text x="{x0}" y="{y0 + 15}">0</text>',
        ]
        if i == 1 and training.get("kept_step") is not None:  # the step whose weights were kept
            kx = px(float(training["kept_step"]), lo)[0]
            parts.append(f'<line x1="{kx:.1f}" y1="{y0}" x2="{kx:.1f}" y2="{y1}" '
                         'stroke="grey" stroke-dasharray="4 3"/>')  # fmt: skip
        for j, (name, points, colour) in enumerate(series):
            coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(p[0], p[1]) for p in points))
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>'
            )
            if len(series) > 1:
                parts.append(f'<text x="{x1}" y="{y1 + 14 * (j + 1)}" text-anchor="end" '
                             f'fill="{colour}">{name}</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
