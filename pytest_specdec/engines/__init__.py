"""The engines: one adapter module each (llamacpp, sglang, vllm, openai) behind the ``Engine``
Protocol of ``base``, how an engine process is started and stopped (``launch``, or a
container: ``container``) and the flag linter (``lint``).

May import :mod:`pytest_specdec.core` and :mod:`pytest_specdec.measure` (the HTTP client);
knows nothing of the GPU layer, verdicts, reports or sessions.
"""

from __future__ import annotations

from pytest_specdec.core.suitefile import EngineSettings
from pytest_specdec.engines.base import Engine, EngineNotInstalled
from pytest_specdec.engines.llamacpp import LlamaCppEngine
from pytest_specdec.engines.openai import OpenAIEngine
from pytest_specdec.engines.sglang import SGLangEngine
from pytest_specdec.engines.vllm import VLLMEngine

ENGINE_CLASSES: dict[str, type[LlamaCppEngine | SGLangEngine | VLLMEngine | OpenAIEngine]] = {
    "llamacpp": LlamaCppEngine,
    "sglang": SGLangEngine,
    "vllm": VLLMEngine,
    "openai": OpenAIEngine,
}


def make_engine(name: str, settings: EngineSettings | None = None) -> Engine:
    try:
        cls = ENGINE_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; valid: {', '.join(ENGINE_CLASSES)}") from None
    return cls(settings)


__all__ = ["ENGINE_CLASSES", "Engine", "EngineNotInstalled", "make_engine"]
