"""The training and held-out prompts, drawn from a seed out of ``templates``, and the suite's own
prompts (``pytest_specdec/prompts/*.jsonl`` of this checkout), which are never drawn: a drawn
prompt that shares five words in a row with one of them is drawn again.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable
from pathlib import Path

from specdec_lab.training.templates import CONTENT_SLOT, HELD_OUT_EVERY, KINDS, TEMPLATES

PROMPTS = Path(__file__).resolve().parents[2] / "pytest_specdec" / "prompts"  # the suite's


def _slots(kind: str, split: str) -> dict[str, list[str]]:
    """The slot choices of ``kind`` that prompts of ``split`` draw from."""
    _, slots, _, _ = TEMPLATES[kind]
    content = slots[CONTENT_SLOT[kind]]
    held = split == "held-out"
    kept = [c for i, c in enumerate(content) if (i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1) == held]
    return {**slots, CONTENT_SLOT[kind]: kept}


def capacity(kind: str, split: str = "train") -> int:
    """How many distinct prompts ``kind`` has in ``split``."""
    _, _, clauses, most = TEMPLATES[kind]
    orders = sum(math.perm(len(clauses), k) for k in range(most + 1))
    return math.prod(len(choices) for choices in _slots(kind, split).values()) * orders


def prompt_of(kind: str, rng: random.Random, split: str = "train") -> str:
    """One prompt of ``kind`` in ``split``, drawn from ``rng``."""
    template, _, clauses, most = TEMPLATES[kind]
    slots = _slots(kind, split)
    text = template.format(**{name: rng.choice(choices) for name, choices in slots.items()})
    return " ".join([text, *rng.sample(clauses, rng.randint(0, most))])


def prompts(
    seed: int, count: int, exclude: Iterable[str] = (), split: str = "train"
) -> list[tuple[str, str]]:
    """``count`` distinct (kind, prompt) pairs of ``split``, the kinds in turn; none of
    ``exclude`` nor sharing five words in a row with one. The held-out split's prompts are
    about other things than the training's."""
    per_kind_most = min(capacity(k, split) for k in KINDS) // 2  # rejection draws stay quick
    most = per_kind_most * len(KINDS)
    if -(-count // len(KINDS)) > per_kind_most:
        raise SystemExit(
            f"make-dflash-drafter: --prompts {count} is more than these templates draw from "
            f"comfortably; give --prompts {most} or fewer"
        )
    rng = random.Random(f"{seed}/{split}")
    seen = set(exclude)
    kept_out = set().union(*(word_runs(text) for text in seen if text))
    out: list[tuple[str, str]] = []
    while len(out) < count:
        kind = KINDS[len(out) % len(KINDS)]
        text = prompt_of(kind, rng, split)
        if text not in seen and not word_runs(text) & kept_out:
            seen.add(text)
            out.append((kind, text))
    return out


def word_runs(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """The runs of ``n`` words in ``text`` (lower case, letters and digits): a drawn prompt
    that shares one with an excluded text (the suite's own prompts) is drawn again."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def workload_lines() -> list[str]:
    """The suite's own prompts: the drafter is never trained on them."""
    return [line for f in sorted(PROMPTS.glob("*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]  # fmt: skip


def workload_prompts(name: str) -> dict[str, str]:
    """The prompts of the suite's built-in workload ``name`` (single-turn ones), by id, in the
    workload's order."""
    path = PROMPTS / f"{name}.jsonl"
    if not path.is_file():
        names = ", ".join(sorted(f.stem for f in PROMPTS.glob("*.jsonl")))
        raise SystemExit(
            f"make-dflash-drafter: --eval-workload {name!r} is not a built-in workload; give "
            f"one of {names}, or '' to measure on held-out continuations only"
        )
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
             if line.strip()]  # fmt: skip
    texts = {str(d.get("id", i)): str(d["prompt"]) for i, d in enumerate(lines) if d.get("prompt")}
    if not texts:
        raise SystemExit(f"make-dflash-drafter: --eval-workload {name!r} has no single-turn "
                         "prompts to continue; give seed")  # fmt: skip
    return texts
