"""The ``specdec`` command: configs, lint, doctor, baselines, results reports, history, init.

May import every layer; the pytest face (:mod:`pytest_specdec.plugin`) never imports it.
"""

from pytest_specdec.cli.main import main

__all__ = ["main"]
