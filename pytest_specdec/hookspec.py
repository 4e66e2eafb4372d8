"""The hooks pytest-specdec calls, for conftest.py files and other pytest plugins.

Implement any of them as a plain function of the same name in a ``conftest.py`` or a plugin
module (pytest matches the arguments by name; take only the ones you need). See
docs/extending.md for a worked example. Engines can also come from a distribution: an
entry point in the group ``pytest_specdec.engines`` (see core/engine_table.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest


def pytest_specdec_engines() -> Mapping[str, Any] | None:
    """Engines to add for this run: ``{name: adapter class}``. The class is called with the
    suite's engine settings (``[engines.NAME]``, or None) and must satisfy the ``Engine``
    Protocol (``pytest_specdec.engines.base``; subclassing ``EngineBase`` gives most of it).
    Called once, at configure time, before configs are resolved; a name that is already
    registered is an error naming both sources."""


def pytest_specdec_hardware(config: pytest.Config) -> Mapping[str, str | int | float] | None:
    """Extra hardware fields (e.g. ``{"nic": "cx7"}``): recorded in the results file under
    ``host.fields`` and made part of every baseline key's ``hardware``, so that results of
    machines that differ in them are never compared. Called once, at configure time; two
    implementations giving one field different values are an error."""


def pytest_specdec_results(config: pytest.Config, document: dict[str, Any]) -> None:
    """The results document just before each write of the results file (after every prompt,
    at the end, and the controller's merged file under xdist). Change it in place; it must
    stay JSON-serialisable. Keep it cheap: it runs at every write."""


def pytest_specdec_judgements(config: pytest.Config, judgements: Sequence[Any]) -> None:
    """The verdicts at the end of the run, after Holm across configs (a list of
    ``pytest_specdec.verdict.judge.Judgement``; ``to_dict()`` gives the JSON form), before the
    gate decides the exit status: e.g. post them to a dashboard. Not called on the xdist
    controller (its workers judge) nor when no config was measured."""


def pytest_specdec_report(config: pytest.Config, document: Mapping[str, Any]) -> list[str] | None:
    """Write an extra report from the final results document (read-only); return the lines
    to add to the terminal summary (e.g. ``["my report: path"]``). Called where the built-in
    reports are written: once per run, by the process that sees every config."""
