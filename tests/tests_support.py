"""Helpers shared by the test modules (imported by name: tests/ is on sys.path)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.verdict.stats import (
    DEFAULT_POLICY,
    SessionSummary,
    Verdict,
    VerdictPolicy,
    against_history_sessions,
)

CACHE = cache_root()  # read before pytester points HOME at its temporary folder


def missing(what: str, fix: str = "./scripts/setup") -> None:
    """Skip with the reason; under CI a missing engine is a failure, never a silent skip."""
    message = f"{what}; run {fix}"
    if os.environ.get("CI"):
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message)


def against_history(
    new: Sequence[float], history: Sequence[SessionSummary], policy: VerdictPolicy = DEFAULT_POLICY
) -> Verdict:
    """One new session's runs (tok/s) against K past session summaries: the verdict engine's
    history test with one new session (``against_history_sessions``)."""
    return against_history_sessions([SessionSummary.from_values(new)], history, policy)
