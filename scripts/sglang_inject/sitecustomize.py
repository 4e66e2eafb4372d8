"""A kernel-side slowdown of known size in SGLang's target verify pass: specdec_lab/inject.py.

Python imports the first ``sitecustomize`` on its path at start, so this folder on the
engine's ``PYTHONPATH`` runs the slowdown in every Python process of the engine:

    PYTHONPATH=$PWD/scripts/sglang_inject SGLANG_SPECDEC_INJECT_VERIFY_CYCLES=2600000 \\
        pytest suites --specdec-suite-file suites/specdec-gpu.toml --spec-config standalone-d16

The lab's module is loaded from this checkout (the repository root is on the path only while
it is imported) and does nothing without ``SGLANG_SPECDEC_INJECT_VERIFY_CYCLES``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
sys.path.insert(0, _ROOT)
try:
    from specdec_lab import inject
finally:
    sys.path.remove(_ROOT)

inject.install("scripts/sglang_inject/sitecustomize.py")
