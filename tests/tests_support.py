"""Helpers shared by the test modules (imported by name: tests/ is on sys.path)."""

from __future__ import annotations

import os

import pytest

from pytest_specdec.core.modelfile import cache_root

CACHE = cache_root()  # read before pytester points HOME at its temporary folder


def missing(what: str, fix: str = "./scripts/setup") -> None:
    """Skip with the reason; under CI a missing engine is a failure, never a silent skip."""
    message = f"{what}; run {fix}"
    if os.environ.get("CI"):
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message)
