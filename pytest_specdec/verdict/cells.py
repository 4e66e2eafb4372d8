"""What a stored baseline cell must hold: the checks that keep a damaged value out of the
verdicts (a bad value is named with its place, and the file is refused, not read)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def cell_problems(cell: Any) -> list[str]:
    """The fields a stored summary cell lacks (all of them where it is not an object), or
    holds a value of the wrong kind: ``n`` a count of 1 or more, ``mean_log`` a finite number,
    ``sd_log`` a finite number of 0 or more, ``runs`` a list of n tok/s above 0."""
    fields = ("n", "mean_log", "sd_log", "runs")
    if not isinstance(cell, dict):
        return list(fields)
    bad = [f for f in fields if f not in cell]
    checks: dict[str, Callable[[Any], bool]] = {
        "n": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "mean_log": _finite,
        "sd_log": lambda v: _finite(v) and v >= 0,
        "runs": lambda v: (
            isinstance(v, list)
            and all(_finite(x) and x > 0 for x in v)
            and (not isinstance(cell.get("n"), int) or len(v) in (0, cell["n"]))
        ),
    }
    return bad + [f"a valid {f} (got {cell[f]!r})" for f in fields
                  if f in cell and not checks[f](cell[f])]  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def levels_problem(levels: Any, where: str) -> str | None:
    """What is wrong with a session's load-level cells (None: nothing, or none stored: a
    session that measured no load levels)."""
    if levels is None:
        return None
    if not isinstance(levels, dict):
        return f"{where}.levels must be an object of client counts"
    for name, cell in levels.items():
        if not str(name).isdigit():
            return f"{where}.levels: {name!r} is not a client count"
        if missing := cell_problems(cell):
            return f"{where}.levels.{name} lacks {', '.join(missing)}"
        phases = cell.get("phase_s")
        if phases is not None and not (
            isinstance(phases, dict)
            and all(_finite(v) and v >= 0 for v in phases.values())
        ):  # fmt: skip
            return (
                f"{where}.levels.{name}.phase_s must map each forward phase to its GPU seconds "
                f"per round (finite numbers >= 0), got {phases!r}; fix or remove it"
            )
        client = cell.get("client_cpu_s")
        if client is not None and not (_finite(client) and client > 0):
            return (
                f"{where}.levels.{name}.client_cpu_s must be the load client's CPU seconds per "
                f"round (a finite number > 0), got {client!r}; fix or remove it"
            )
    return None
