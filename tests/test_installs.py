"""What CI installs is what a user gets: constraints.txt pins every package of the
``.[dev]`` install and agrees with pyproject.toml; the oldest install is pyproject's lower
bounds (specdec_lab/installs/lowest.py); ./scripts/setup and .ci/run install with the pins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from specdec_lab.cli.lowest_constraints import main
from specdec_lab.installs.lowest import BoundError, lowest

REPO = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]


def pins() -> dict[str, str]:
    """constraints.txt as name → version (names normalised as pip does)."""
    found = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[name.lower().replace("_", "-")] = version
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = project["dependencies"] + project["optional-dependencies"]["dev"]
    return [Requirement(t) for t in texts]


def test_the_lock_pins_every_requirement_within_pyprojects_range() -> None:
    locked = pins()
    for req in requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = req.name.lower().replace("_", "-")
        assert name in locked, f"constraints.txt lacks {req.name}: run ./scripts/lock"
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"constraints.txt pins {name}=={locked[name]}, outside pyproject's {req}"
        )
    for name in ("pytest", "pytest-xdist", "execnet", "pluggy", "httpx", "scipy"):
        assert name in locked, f"constraints.txt must pin {name}"


def test_setup_and_ci_install_with_the_lock() -> None:
    setup = (REPO / "scripts" / "setup").read_text(encoding="utf-8")
    assert '-c "$ROOT/constraints.txt" -e "$ROOT[dev]"' in setup
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "./scripts/setup" in ci


def test_the_oldest_install_is_pyprojects_lower_bounds() -> None:
    low = dict(line.split("==") for line in lowest(REPO / "pyproject.toml", ["dev"]))
    assert low["pytest"] == "8.3" and low["pytest-xdist"] == "3.3"
    assert low["scipy"] == "1.11.1"  # a release that was not yanked
    assert low["nvidia-ml-py"] == "12.535.77"  # a real release: ==12.535 would match none
    assert ("tomli" in low) == (sys.version_info < (3, 11))  # markers are evaluated


def test_a_requirement_without_a_lower_bound_is_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["httpx>=0.25", "scipy<2"]\n')
    with pytest.raises(BoundError, match=r"scipy<2: no lower bound .* scipy>=X\.Y"):
        lowest(pyproject)
    with pytest.raises(BoundError, match="extra 'gpu' is not in"):
        lowest(pyproject, ["gpu"])
    assert main(["--pyproject", str(pyproject)]) == 2
    assert "scipy<2: no lower bound" in capsys.readouterr().err
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["a~=1.2", "b>=1,>=1.5,<3"]\n')
    assert lowest(pyproject) == ["a==1.2", "b==1.5"]
