"""A kernel-side slowdown of known size in SGLang's target verify pass, and nowhere else.

Put this folder on the engine's ``PYTHONPATH`` and set ``SGLANG_SPECDEC_INJECT_VERIFY_CYCLES``
to a number of GPU clock cycles: every forward of a ``LlamaForCausalLM`` in ``TARGET_VERIFY``
mode (the target verifying a draft) then ends with ``torch.cuda._sleep(cycles)``, a kernel that
spins for that many cycles on the same stream. Applied when ``sglang.srt.models.llama`` is
imported, before SGLang captures its CUDA graphs, so the spin is captured into the target's
verify graph; the draft model (also a ``LlamaForCausalLM`` under STANDALONE) runs in ``DECODE``
and ``DRAFT_EXTEND_V2`` modes and is never slowed, so accept length stays what it was: a
regression on the kernel side. At an SM clock of 1980 MHz, 2,600,000 cycles are about 1.3 ms,
about 5% of a standalone-d16 verify step of the 7.4B memory-bound target on an H200
(docs/statistics.md). The variable's ``SGLANG_`` prefix makes the suite record it with the
engine's environment, so a verdict names it as a changed engine variable.

    PYTHONPATH=$PWD/scripts/sglang_inject SGLANG_SPECDEC_INJECT_VERIFY_CYCLES=2600000 \\
        pytest suites --specdec-suite-file suites/specdec-gpu.toml --spec-config standalone-d16

Without the variable this module does nothing. It is imported by every Python process of the
engine that sees the folder (Python imports the first ``sitecustomize`` on its path).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

VARIABLE = "SGLANG_SPECDEC_INJECT_VERIFY_CYCLES"
MODULE = "sglang.srt.models.llama"


def cycles() -> int | None:
    """The cycles to spin after each target verify forward, or None (nothing injected)."""
    raw = os.environ.get(VARIABLE, "").strip()
    if not raw:
        return None
    value = int(raw)
    if value <= 0:
        raise ValueError(f"{VARIABLE}={raw!r}: give a positive number of GPU clock cycles")
    return value


def patch(module: ModuleType, spin: int) -> None:
    """Wrap ``module.LlamaForCausalLM.forward``: after a TARGET_VERIFY forward, spin."""
    cls = module.LlamaForCausalLM
    original = cls.forward

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        batch = kwargs["forward_batch"] if "forward_batch" in kwargs else args[2]
        if batch.forward_mode.is_target_verify():
            import torch  # type: ignore[import-not-found,unused-ignore]

            torch.cuda._sleep(spin)
        return out

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    cls.forward = forward


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``sglang.srt.models.llama`` the normal way and patches it once executed."""

    def __init__(self, spin: int) -> None:
        self.spin = spin

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            patch(module, self.spin)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


try:
    _SPIN = cycles()
except ValueError as exc:  # stop the engine's start with the reason, never run it unpatched
    raise SystemExit(f"scripts/sglang_inject/sitecustomize.py: {exc}") from None
if _SPIN is not None:
    sys.meta_path.insert(0, _PatchOnImport(_SPIN))
