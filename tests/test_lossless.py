"""Lossless comparison: units, positions, context and policy (pure)."""

from __future__ import annotations

import pytest

from pytest_specdec.measure.lossless import (
    DIVERGED,
    DIVERGED_LATE,
    IDENTICAL,
    GreedyOutput,
    compare,
    first_divergence,
)


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # a shorter output differs where it ends
    assert first_divergence("abc", "abd") == 2


def test_tokens_are_compared_when_both_sides_have_them() -> None:
    ref = GreedyOutput("hello world", [1, 2, 3, 4, 5, 6, 7, 8])
    out = GreedyOutput("hello there", [1, 2, 3, 4, 9, 9, 9, 9])
    result = compare("cfg", "p", ref, out, fail_before=32)
    assert (result.unit, result.outcome, result.position) == ("token", DIVERGED, 4)
    assert result.failed and "at token 4 (policy: fail before 32)" in result.message
    assert result.reference_context == "1 2 3 4 5 6 7 8" and result.output_context.startswith(
        "1 2 3 4 9"
    )


def test_late_divergence_is_a_warning_and_text_is_the_fallback() -> None:
    ref, out = GreedyOutput("a" * 50 + "x"), GreedyOutput("a" * 50 + "y")
    result = compare("cfg", "p", ref, out, fail_before=32)
    assert (result.unit, result.outcome, result.position, result.failed) == (
        "char",
        DIVERGED_LATE,
        50,
        False,
    )
    assert "warning" in result.message


@pytest.mark.parametrize("fail_before", [0, 5])
def test_identical_never_fails(fail_before: int) -> None:
    same = GreedyOutput("x", [1, 2])
    result = compare("cfg", "p", same, same, fail_before)
    assert result.outcome == IDENTICAL and result.position is None and not result.failed
    assert "identical" in result.message
