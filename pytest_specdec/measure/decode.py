"""The decode score: how fast a config decodes, from TPOT, over the prompts that decode.

A run's output tok/s (tokens ÷ wall time) mixes prefill with decoding; for a prompt whose answer
ends after a handful of tokens it measures time to first token. So beside the end-to-end suite
score each config gets a decode score:

* per prompt, decode tok/s = 1 / median TPOT over its usable measured runs (no error, not ruled
  out by GPU hygiene), TPOT = (wall - TTFT) / (output tokens - 1);
* a prompt whose median output ends before half of the tokens it asked for (``max_tokens`` of
  its runs) is *short*: named, with its length, and left out;
* the decode score is the geometric mean of the other prompts' decode tok/s.

Works on the dicts of a results document. Imports nothing else from the package.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def _usable(run: Mapping[str, Any], prompt: str) -> bool:
    return (
        run.get("phase") == "measure"
        and run.get("prompt") == prompt
        and run.get("error") is None
        and not run.get("invalid")
    )


def decode_summary(config: Mapping[str, Any], prompts: Sequence[str]) -> dict[str, Any]:
    """``{"tok_per_s", "prompts": {prompt: decode tok/s}, "short": {prompt: {"tokens",
    "max_tokens"}}, "reason"}`` for one config record of a results document."""
    per_prompt: dict[str, float] = {}
    short: dict[str, dict[str, float]] = {}
    for prompt in prompts:
        runs = [r for r in config.get("runs") or [] if _usable(r, prompt)]
        tokens = [float(r["output_tokens"]) for r in runs if r.get("output_tokens")]
        asked = [int(r["max_tokens"]) for r in runs if r.get("max_tokens")]
        if tokens and asked and statistics.median(tokens) < min(asked) / 2:
            short[prompt] = {"tokens": statistics.median(tokens), "max_tokens": min(asked)}
            continue
        tpots = [float(r["tpot_s"]) for r in runs if r.get("tpot_s")]
        if tpots:
            per_prompt[prompt] = 1.0 / statistics.median(tpots)
    score = None
    reason = None
    if per_prompt:
        score = math.exp(statistics.fmean(math.log(v) for v in per_prompt.values()))
    elif short:
        reason = "every prompt's output ended before half of its max_tokens"
    else:
        reason = "no measured run with a TPOT"
    return {"tok_per_s": score, "prompts": per_prompt, "short": short, "reason": reason}


def short_lines(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per config with short prompts: which, and how long their outputs were."""
    out = []
    for name, summary in summaries.items():
        short = summary.get("short") or {}
        if short:
            listed = ", ".join(
                f"{p} {s['tokens']:g} of {s['max_tokens']} tokens" for p, s in short.items()
            )
            out.append(
                f"{name}: short outputs, left out of the decode score (they end before half "
                f"of max_tokens; --specdec-ignore-eos decodes them in full): {listed}"
            )
    return out
