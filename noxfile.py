"""The test suite against three installs, each in a fresh virtualenv (docs/installs.md):

    nox -s locked    constraints.txt: what ./scripts/setup and .ci/run install
    nox -s newest    the newest release of every dependency, as a user installing today gets
    nox -s oldest    the lower bounds of pyproject.toml (specdec_lab/installs/lowest.py)

Each session runs ./scripts/setup --engine first (the llama-server build and the models, cached
under ~/.cache/pytest-specdec), then the README's test command, ``pytest``; arguments after
``--`` go to pytest (``nox -s newest -- tests/test_engine_llamacpp.py -k xdist``). The nightly
workflow nightly-compat.yml runs ``newest`` and ``oldest``, so that a new release of pytest or
pytest-xdist that breaks the suite shows there before a user meets it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from specdec_lab.installs.lowest import lowest  # noqa: E402

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["locked"]


def _engine_and_tests(session: nox.Session) -> None:
    session.run("python", "-m", "pip", "list", "--disable-pip-version-check")
    python = str(Path(session.bin) / "python")
    session.run("./scripts/setup", "--engine", env={"PYTHON": python}, external=True)
    session.run("pytest", *session.posargs)


@nox.session
def locked(session: nox.Session) -> None:
    """The pinned install of constraints.txt."""
    session.install("-c", "constraints.txt", "-e", ".[dev]")
    _engine_and_tests(session)


@nox.session
def newest(session: nox.Session) -> None:
    """The newest release of every dependency, resolved today."""
    session.install("--upgrade", "--upgrade-strategy", "eager", "-e", ".[dev]")
    _engine_and_tests(session)


@nox.session
def oldest(session: nox.Session) -> None:
    """Every dependency at the lower bound pyproject.toml gives it."""
    pins = Path(session.create_tmp()) / "lowest.txt"
    pins.write_text("\n".join(lowest(ROOT / "pyproject.toml", ["dev"])) + "\n")
    session.install("-c", str(pins), "-e", ".[dev]")
    _engine_and_tests(session)
