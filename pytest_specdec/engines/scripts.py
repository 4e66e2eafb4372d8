"""Scripts run in an engine's interpreter (``run_script``), and their answers remembered on
disk (``run_script_cached``).

Linting an SGLang command line imports SGLang's argument parser (17-20 s on an H200 runner),
and rendering the prompts imports transformers (13-15 s): each time a config is judged. Both
answers depend only on their inputs: the interpreter, the versions of the packages the script
imports, the script, its arguments and input, and the files it reads (a tokenizer's). So an
answer is kept under ``<cache>/scripts/<sha256 of all that>.json`` and given back while none of
it changed. A failed script is never kept; a file that cannot be read, or a version that cannot
be asked for, runs the script as before. ``SPECDEC_SCRIPT_CACHE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_specdec.core.modelfile import cache_root
from pytest_specdec.core.results import atomic_write_json


class ScriptFailed(RuntimeError):
    """A script run in another interpreter did not finish: why (the exception, or the last
    line it wrote to stderr)."""


def run_script(
    python: str, code: str, args: Sequence[str], stdin: str | None = None, timeout: float = 120.0
) -> Any:
    """Run ``code`` in the interpreter ``python`` (an engine's, e.g. SGLang's) and read the JSON
    of the last line it prints."""
    try:
        proc = subprocess.run(
            [python, "-c", code, *args], input=stdin, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ScriptFailed(str(exc)) from exc
    if proc.returncode != 0:
        raise ScriptFailed((proc.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1])


_VERSIONS = """\
import importlib.metadata as m, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        out[name] = None
print(json.dumps([sys.executable, out]))
"""


def package_versions(python: str, packages: Sequence[str]) -> list[Any] | None:
    """The interpreter ``python`` runs and the versions of ``packages`` it imports (None for a
    missing one); None when it cannot be asked."""
    try:
        found = run_script(python, _VERSIONS, packages, timeout=30)
    except (ScriptFailed, ValueError, IndexError):
        return None
    return found if isinstance(found, list) else None


def file_digests(files: Sequence[Path]) -> dict[str, str] | None:
    """sha256 of each file that exists (a missing one is part of the key as missing); None
    when one cannot be read."""
    out: dict[str, str] = {}
    for path in files:
        try:
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            out[str(path)] = "missing"
        except OSError:
            return None
    return out


# What transformers reads to build a tokenizer and its chat template from a local folder.
TOKENIZER_FILES = (
    "tokenizer_config.json", "tokenizer.json", "tokenizer.model", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt",
    "added_tokens.json", "config.json", "generation_config.json",
)  # fmt: skip


def tokenizer_files(model: str) -> list[Path] | None:
    """The tokenizer files of a local model folder (a missing one counts as missing); None for
    anything else (a hub id, whose files can change unseen): then nothing is reused."""
    folder = Path(model)
    return [folder / name for name in TOKENIZER_FILES] if folder.is_dir() else None


def cache_dir() -> Path:
    return cache_root() / "scripts"


def run_script_cached(
    python: str,
    code: str,
    args: Sequence[str],
    stdin: str | None = None,
    timeout: float = 120.0,
    *,
    packages: Sequence[str],
    files: Sequence[Path] | None = (),
) -> Any:
    """:func:`run_script`, answered from the cache where the same
    interpreter (with the same ``packages`` at the same versions) already ran the same script
    on the same arguments, input and ``files`` (None: inputs that cannot be fingerprinted, so
    the script runs every time). Raises what run_script raises."""
    if files is None or os.environ.get("SPECDEC_SCRIPT_CACHE", "1") == "0":
        return run_script(python, code, args, stdin, timeout)
    versions = package_versions(python, packages)
    digests = file_digests(files)
    if versions is None or digests is None:
        return run_script(python, code, args, stdin, timeout)
    key = hashlib.sha256(
        json.dumps([python, versions, code, list(args), stdin, digests]).encode()
    ).hexdigest()
    path = cache_dir() / f"{key}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))["answer"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    answer = run_script(python, code, args, stdin, timeout)
    with contextlib.suppress(OSError):  # a cache that cannot be written costs time, not the answer
        atomic_write_json(path, {"python": python, "versions": versions, "answer": answer})
    return answer
