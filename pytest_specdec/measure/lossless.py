"""Lossless check: at temperature 0 a speculative config must emit what the target alone emits.

Compares token ids where the engine returns them (llama.cpp ``/completion``), else text.
Policy: a divergence before position ``fail_before`` fails; a later one is reported as a
warning. Why not always fail: batched verification runs other kernels than one-token
decoding, and floating-point near-ties can flip a greedy choice late in a long output
(seen with an F16 target and a Q4 draft at token ~2 on a CPU, and on every speculative
config of a CUDA build). A state leak — a recurrent state shared across tree siblings —
corrupts text early and systematically, which is what the threshold is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

IDENTICAL = "identical"
DIVERGED = "diverged"  # before the threshold: fails
DIVERGED_LATE = "diverged-late"  # at or after it: a warning


@dataclass(frozen=True)
class GreedyOutput:
    text: str
    token_ids: list[int] | None = None


@dataclass(frozen=True)
class LosslessResult:
    config: str
    prompt: str
    unit: str  # "token" or "char"
    outcome: str
    position: int | None  # first divergent position (0-based), None when identical
    reference_length: int
    output_length: int
    reference_context: str
    output_context: str
    fail_before: int
    reference_text: str | None = None  # the contexts as text, where the engine can detokenize
    output_text: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome == DIVERGED

    @property
    def message(self) -> str:
        if self.outcome == IDENTICAL:
            n = f"{self.output_length} {self.unit}s"
            return f"{self.config}/{self.prompt}: identical to the reference ({n})"
        kind = "FAILS" if self.failed else "warning"
        ref, out = self.reference_context, self.output_context
        if self.reference_text is not None and self.output_text is not None:
            ref, out = f"{ref} ({self.reference_text!r})", f"{out} ({self.output_text!r})"
        return (
            f"{self.config}/{self.prompt}: {kind}: output diverges from the non-speculative "
            f"reference at {self.unit} {self.position} (policy: fail before {self.fail_before}); "
            f"reference …{ref}… vs output …{out}…"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["message"] = self.message
        return out


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first difference (a shorter sequence differs where it ends); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):  # noqa: B905 - unequal lengths are the point
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _window(seq: Sequence[Any], at: int, width: int) -> str:
    part = seq[max(0, at - width) : at + width]
    return "".join(part) if isinstance(seq, str) else " ".join(str(t) for t in part)


def compare(
    config: str, prompt: str, reference: GreedyOutput, output: GreedyOutput,
    fail_before: int, context: int = 5,
) -> LosslessResult:  # fmt: skip
    """Token ids when both sides have them, else text (context widened for characters)."""
    ref_seq: Sequence[Any]
    out_seq: Sequence[Any]
    if reference.token_ids is not None and output.token_ids is not None:
        unit, ref_seq, out_seq = "token", reference.token_ids, output.token_ids
    else:
        unit, ref_seq, out_seq, context = "char", reference.text, output.text, context * 6
    at = first_divergence(ref_seq, out_seq)
    outcome = IDENTICAL if at is None else DIVERGED if at < fail_before else DIVERGED_LATE
    return LosslessResult(
        config=config,
        prompt=prompt,
        unit=unit,
        outcome=outcome,
        position=at,
        reference_length=len(ref_seq),
        output_length=len(out_seq),
        reference_context="" if at is None else _window(ref_seq, at, context),
        output_context="" if at is None else _window(out_seq, at, context),
        fail_before=fail_before,
    )
