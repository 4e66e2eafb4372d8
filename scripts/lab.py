"""Run a command of the lab (``specdec_lab/``) from a plain checkout, with nothing installed.

    python3 scripts/lab.py MODULE [ARGS...]     is    python3 -m MODULE [ARGS...]

with the repository root first on this interpreter's import path, so that ``specdec_lab`` and
the ``pytest_specdec.core`` it reads are this checkout's. The wrappers beside this file run
their commands through it, under whatever interpreter they are given (``PYTHON``,
``SPECDEC_SGLANG_PYTHON``: a GPU runner's, which has no pytest-specdec installed). The root is
not put on ``PYTHONPATH``: the processes a command starts (pip, a virtualenv's python) see the
environment they were given.
"""

import runpy
import sys
from pathlib import Path

if len(sys.argv) < 2:
    sys.exit("usage: python3 scripts/lab.py MODULE [ARGS...]")
sys.path[0] = str(Path(__file__).resolve().parent.parent)  # in place of scripts/
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
