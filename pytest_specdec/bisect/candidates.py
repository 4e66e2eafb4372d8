"""The candidates file of ``specdec bisect``: one ``[[candidate]]`` table per engine build,
oldest first, and the good and bad endpoints chosen among them.

::

    [[candidate]]
    name = "b4500"                                   # unique; letters, digits, . _ -
    server = "/opt/llama/b4500/bin/llama-server"     # llama-server, SGLang's Python, or an image
    env = { GGML_SCHED_MAX_COPIES = "1" }            # optional
    args = ["--threads-batch", "2"]                  # optional, appended to every boot
    ref = "4500.0.0"                                 # optional: built by --build-cmd when
                                                     # server is not given

Every error names the file, the candidate and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specdec.core.configs import ConfigError, read_toml

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
KEYS = {"name", "server", "env", "args", "ref"}
EXAMPLE = '[[candidate]]\nname = "b4500"\nserver = "/path/to/llama-server"'


class BisectError(ValueError):
    """Bad input or an endpoint that cannot be measured: the message names the value and
    the fix. The command prints it and exits 2."""


@dataclass(frozen=True)
class Candidate:
    """One engine build to measure: its executable (or a ref to build), env and extra args."""

    name: str
    index: int
    server: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    ref: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "server": self.server, "env": dict(self.env),
                "args": list(self.args), "ref": self.ref}  # fmt: skip


def _where(path: Path, index: int, name: object = None) -> str:
    label = f" ({name})" if isinstance(name, str) else ""
    return f"{path}: candidate #{index + 1}{label}"


def _string(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise BisectError(
            f'{where}: {key} = {value!r} must be a non-empty string, e.g. {key} = "…"'
        )
    return value


def _candidate(table: object, index: int, path: Path) -> Candidate:
    where = _where(path, index)
    if not isinstance(table, dict):
        raise BisectError(f"{where}: is {table!r}, not a table; write it as {EXAMPLE!r}")
    where = _where(path, index, table.get("name"))
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise BisectError(f"{where}: unknown key(s) {unknown}; valid: {sorted(KEYS)}")
    name = _string(table, "name", where)
    if name is None or not NAME.fullmatch(name):
        raise BisectError(
            f"{where}: name = {name!r}: give every candidate a name of letters, digits, '.', "
            "'_' or '-' (it names its logs and its row in the table)"
        )
    server, ref = _string(table, "server", where), _string(table, "ref", where)
    if server is None and ref is None:
        raise BisectError(
            f"{where}: no server: give server = the engine executable (llama-server's path, "
            "the Python that has SGLang, or the image with --launcher docker), or ref = a "
            "build to make with --build-cmd"
        )
    env, args = table.get("env", {}), table.get("args", [])
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise BisectError(f'{where}: env = {env!r} must map NAME = "value" (strings)')
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise BisectError(f'{where}: args = {args!r} must be a list of strings, e.g. ["-t", "2"]')
    return Candidate(name, index, server, dict(env), tuple(args), ref)


def load_candidates(path: Path) -> list[Candidate]:
    """The candidates of ``path`` in file order (oldest first); at least two, names unique."""
    try:
        doc = read_toml(path)
    except ConfigError as exc:
        raise BisectError(f"--candidates {path}: {exc}") from None
    tables = doc.get("candidate", [])
    extra = sorted(set(doc) - {"candidate"})
    if extra:
        raise BisectError(f"{path}: unknown top-level key(s) {extra}; only [[candidate]] tables")
    if not isinstance(tables, list) or not tables:
        why = "the file is empty" if "candidate" not in doc else (
            f"candidate = {tables!r} is not a list of [[candidate]] tables")  # fmt: skip
        raise BisectError(
            f"{path}: no candidates ({why}); add one [[candidate]] table per "
            f"build, oldest first, e.g.\n{EXAMPLE}"
        )
    found = [_candidate(t, i, path) for i, t in enumerate(tables)]
    if len(found) < 2:
        raise BisectError(
            f"{path}: only one candidate ({found[0].name}); a bisect needs a good and a bad "
            "build: add at least one more [[candidate]] table"
        )
    seen: dict[str, int] = {}
    for c in found:
        if c.name in seen:
            raise BisectError(
                f"{path}: candidates #{seen[c.name] + 1} and #{c.index + 1} are both named "
                f"{c.name!r}; give every candidate a unique name"
            )
        seen[c.name] = c.index
    return found


def endpoints(
    candidates: Sequence[Candidate], good: str | None, bad: str | None
) -> tuple[int, int]:
    """Indices of the good and bad endpoints: the first and last unless named."""
    names = [c.name for c in candidates]

    def index(value: str | None, flag: str, default: int) -> int:
        if value is None:
            return default
        if value not in names:
            raise BisectError(
                f"{flag} {value!r} is not a candidate; choose one of {', '.join(names)}"
            )
        return names.index(value)

    lo, hi = index(good, "--good", 0), index(bad, "--bad", len(names) - 1)
    if lo >= hi:
        raise BisectError(
            f"--good {names[lo]} (#{lo + 1}) must come before --bad {names[hi]} (#{hi + 1}) "
            "in the candidates file, which lists builds oldest first"
        )
    return lo, hi
