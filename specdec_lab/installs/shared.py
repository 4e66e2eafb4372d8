"""What the wheelhouse and its probe share: their errors and log, pip run for the runner's Python
and platform (``pip``, ``pip_report``: the tests replace ``pip`` here), and files written
whole (JSON plans, manifests, start sets, the install's wrapper) and hashed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_specdec.core.modelfile import sha256_of

sha256 = sha256_of  # one file hashing routine for the package and the wheelhouse

Entry = dict[str, Any]


class UsageError(Exception):
    """Bad input: the message names the value and the fix (exit 2)."""


class ProbeError(Exception):
    """A step cannot go on: the message says why (pip's output, for a pip failure)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_env(isolated: bool = True) -> dict[str, str]:
    """Environment for pip; ``isolated`` drops the machine's pip configuration (constraints,
    find-links, extra indexes): only the index given, and PIP_CERT, count."""
    if not isolated:
        return dict(os.environ)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_python(minor: str) -> str:
    """A python of the runner's X.Y (python3.X on PATH, or pyenv's): pip evaluates dependency
    markers for the interpreter it runs under, whatever --python-version says."""
    code = "import sys; print('%d.%d' % sys.version_info[:2])"
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{minor}.*/bin/python")))
    for python in filter(None, [shutil.which(f"python{minor}"), *pyenv]):
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
        if done.stdout.strip() == minor:
            return python
    log(f"no python{minor} found: pip's markers follow {sys.executable} (pass --pip-python)")
    return sys.executable


def tag_args(python_version: str, platforms: list[str]) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    return args + [a for p in platforms for a in ("--platform", p)]


def pip(python: str, args: list[str], index: str) -> subprocess.CompletedProcess[str]:
    cmd = [python, "-m", "pip", *args, "--index-url", index]
    return subprocess.run(cmd, env=pip_env(), capture_output=True, text=True, check=False)


def pip_report(python: str, args: list[str], index: str) -> Entry:
    """``pip install --dry-run --report`` (metadata by range requests: fast-deps)."""
    with tempfile.TemporaryDirectory(prefix="sglang-pip-") as tmp:
        dry = ["install", "--dry-run", "--ignore-installed", "--target", f"{tmp}/t"]
        dry += ["--use-feature=fast-deps", "--report", f"{tmp}/report.json", *args]
        done = pip(python, dry, index)
        if done.returncode:
            raise ProbeError(done.stdout + done.stderr)
        report: Entry = json.loads(Path(tmp, "report.json").read_text())
        return report


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write through a temporary file in the same folder, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Entry) -> None:
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def load_json(path: Path, what: str, fix: str) -> Entry:
    try:
        data: Entry = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{what} {path} not found: {fix}") from None
    except ValueError as exc:
        raise UsageError(f"{what} {path} is not JSON ({exc}): {fix}") from None
    return data


class CheckFailed(Exception):
    """A check failed (exit 1)."""
