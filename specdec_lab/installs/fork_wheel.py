"""Build an SGLang fork's python/ package into a wheel, on a machine that reaches PyPI.

    ./scripts/build-sglang-fork-wheel SRC REF OUT [--label ddtree] [--version V]

SRC is a git clone (or a bare mirror) of the fork, REF the branch, tag or commit, e.g.
DB-Guo/sglang-ddtree-dev at feature/ddtree-dev (docs/sglang-wheelhouse.md, "A fork"). The
wheel is named as a local version of its own, ``0.0.0.dev0+<label>.g<commit>`` unless
--version says otherwise, so that it never passes for a release, and it records the commit.

SGLang's python/pyproject.toml also builds a Rust extension, ``sglang.srt.grpc._core`` (the
gRPC front end; setuptools-rust and cargo with crates.io); no module of the Python package
imports it. It is left out: the wheel is pure Python (``py3-none-any``), buildable without a
Rust toolchain, and the script says so. Everything else is the fork's own build, with build
isolation (setuptools and setuptools-scm from PyPI). Prints the wheel's path and sha256.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

RUST_TABLE = re.compile(r"^\[\[tool\.setuptools-rust\.ext-modules\]\]\n(?:(?!\[).*\n?)*", re.M)
RUST_REQUIRE = re.compile(r',?\s*"setuptools-rust[^"]*"')


class BuildError(RuntimeError):
    pass


def git(src: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "-C", str(src), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"git {' '.join(args)} in {src}: {proc.stderr.decode().strip()}")
    return proc.stdout


def without_rust(pyproject: str) -> tuple[str, bool]:
    """The pyproject text with the setuptools-rust extension table and build requirement
    removed; and whether there was one."""
    stripped = RUST_TABLE.sub("", pyproject)
    found = stripped != pyproject
    return RUST_REQUIRE.sub("", stripped), found


def build(src: Path, ref: str, out: Path, label: str, version: str | None) -> Path:
    commit = git(src, "rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()
    version = version or f"0.0.0.dev0+{label}.g{commit[:9]}"
    with tempfile.TemporaryDirectory() as tmp:
        archive = git(src, "archive", "--format=tar", commit, "python")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        root = Path(tmp) / "python"
        if not (root / "pyproject.toml").is_file():
            raise BuildError(f"{src} at {ref} has no python/pyproject.toml: not an SGLang tree")
        text, had_rust = without_rust((root / "pyproject.toml").read_text())
        (root / "pyproject.toml").write_text(text)
        if had_rust:
            print("left out: the Rust extension sglang.srt.grpc._core (gRPC front end)")
        out.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": version}
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
             "-q", "-w", str(out), str(root)], env=env, capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise BuildError(f"pip wheel failed for {src} at {commit[:9]}:\n{tail}")
    name = f"sglang-{version.replace('-', '_')}-py3-none-any.whl"
    wheel = out / name
    if not wheel.is_file():
        raise BuildError(f"pip wheel wrote no {name} in {out}")
    return wheel
