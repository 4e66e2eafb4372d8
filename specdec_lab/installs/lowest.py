"""The oldest releases pyproject.toml says it supports, as a pip constraints file.

Every requirement of ``[project.dependencies]`` and of the named extras that has a lower bound
(``>=X``, ``~=X`` or ``==X``) is pinned to that bound; one whose environment marker excludes
this interpreter is left out. ``nox -s oldest`` installs with the result, so a lower bound
that is no longer true (an API the code uses that the bound lacks, a release with no wheel
for this Python) fails there and not on a user's machine.

    python -m specdec_lab.cli.lowest_constraints [--pyproject PATH] [--extra dev] > low.txt
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

LOWER = (">=", "~=", "==")


class BoundError(ValueError):
    """A requirement without a lower bound: the oldest install cannot be named."""


def lower_bound(requirement: Requirement) -> str:
    """The lowest version ``requirement`` admits; a requirement without one is an error."""
    bounds = [s.version for s in requirement.specifier if s.operator in LOWER]
    if not bounds:
        raise BoundError(
            f"{requirement}: no lower bound (>=, ~= or ==); give one in pyproject.toml, e.g. "
            f"{requirement.name}>=X.Y, so that the oldest supported release can be tested"
        )
    return max(bounds, key=Version)


def lowest(pyproject: Path, extras: Iterable[str] = ()) -> list[str]:
    """``name==version`` for every requirement of the project and ``extras`` that applies
    to this interpreter, sorted by name."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise BoundError(
                f"extra {extra!r} is not in {pyproject}; known: {', '.join(sorted(optional))}"
            )
        found += optional[extra]
    pins: dict[str, str] = {}
    for text in found:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        pins[requirement.name.lower()] = lower_bound(requirement)
    return [f"{name}=={version}" for name, version in sorted(pins.items())]
