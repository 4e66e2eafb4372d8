"""The engines: one adapter module each (llamacpp, sglang, vllm, openai) behind the ``Engine``
Protocol of ``base``, how an engine process is started and stopped (``launch``, or a
container: ``container``) and the flag linter (``lint``).

May import :mod:`pytest_specdec.core` and :mod:`pytest_specdec.measure` (the HTTP client);
knows nothing of the GPU layer, verdicts, reports or sessions.
"""

from __future__ import annotations

from pytest_specdec.core.engine_table import ENGINE_TABLE
from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.engines.base import Engine, EngineNotInstalled


def make_engine(name: str, settings: EngineSettings | None = None) -> Engine:
    """The adapter registered as ``name`` (core/engine_table.py), made with ``settings``."""
    engine: Engine = ENGINE_TABLE.factory(name)(settings)
    return engine


__all__ = ["Engine", "EngineNotInstalled", "make_engine"]
