"""How the xdist controller spreads tests over workers: every test of a config on one worker.

A config's tests share one server per session and one verdict that reads all of its runs, so
they must run in one process. The plugin answers xdist's ``pytest_xdist_make_scheduler`` for
``--dist load`` (what plain ``-n N`` uses), ``loadgroup`` and ``worksteal`` with
:class:`ConfigScheduling`: xdist's scope scheduler, whose scope for a test of a config is the
config's group as the test's worker read it from the test's parameters (``core/workers.py``),
never parsed from the test id. A test of no config is a scope of its own, or under
``loadgroup`` the ``xdist_group`` that xdist could append to its id. ``each``, ``loadscope``
and ``loadfile`` stay xdist's own (the last two never split a test module). Whatever ran, the
controller checks at the end that no config ran on two workers (``mark_split_configs``).
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling, LoadScopeScheduling

from pytest_specdec.core.workers import WorkerLedger, group_of

TAKEN_OVER = ("load", "loadgroup", "worksteal")  # --dist modes this scheduler replaces


class ConfigScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scope scheduler with one scope per config group."""

    def __init__(self, config: pytest.Config, log: Any, ledger: WorkerLedger) -> None:
        super().__init__(config, log)
        self.ledger = ledger
        self.loadgroup = config.getvalue("dist") == "loadgroup"

    def _split_scope(self, nodeid: str) -> str:
        group = self.ledger.groups.get(nodeid)
        if group is not None:
            return f"specdec config {group}"
        if self.loadgroup and group_of(nodeid) is not None:
            return str(LoadGroupScheduling._split_scope(self, nodeid))
        return nodeid


def make_scheduler(config: pytest.Config, log: Any, ledger: WorkerLedger) -> Any:
    """The scheduler for this run's ``--dist`` mode, or None to leave it to xdist."""
    if config.getvalue("dist") not in TAKEN_OVER:
        return None
    return ConfigScheduling(config, log, ledger)
