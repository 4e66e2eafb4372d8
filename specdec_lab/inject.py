"""A kernel-side slowdown of known size in SGLang's target verify pass, and nowhere else.

Put ``scripts/sglang_inject`` on the engine's ``PYTHONPATH`` (its ``sitecustomize.py`` loads this
module and calls :func:`install`) and set ``SGLANG_SPECDEC_INJECT_VERIFY_CYCLES`` to a number of
GPU clock cycles: every forward of a ``LlamaForCausalLM`` in ``TARGET_VERIFY``
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

A slowdown that shows only under load: ``SGLANG_SPECDEC_INJECT_MIN_BATCH=N`` spins only in
verify forwards of N requests or more, and ``SGLANG_SPECDEC_INJECT_PER_REQUEST=1`` makes the
cycles a cost per request of the batch (a verify kernel that got slower per token verified).
SGLang captures one CUDA graph per batch size, with ``forward_batch.batch_size`` the graph's
size: a batch of 3 replays the 4-request graph (no spin below a threshold of 5), a batch of 5
the next captured size. With ``--cuda-graph-bs-decode 1 2 4 8 16 32 64``, a threshold of 5
leaves 1 and 4 clients untouched and slows 16 and 64 (suites/specdec-gpu-load.toml):

    PYTHONPATH=$PWD/scripts/sglang_inject SGLANG_SPECDEC_INJECT_VERIFY_CYCLES=700000 \\
        SGLANG_SPECDEC_INJECT_MIN_BATCH=5 SGLANG_SPECDEC_INJECT_PER_REQUEST=1 \\
        pytest suites/test_concurrency.py --specdec-suite-file suites/specdec-gpu-load.toml \\
        --spec-config standalone-d16

Without the cycles variable :func:`install` does nothing. It runs in every Python process of the
engine that sees the folder (Python imports the first ``sitecustomize`` on its path), so this
module imports nothing but the standard library.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

VARIABLE = "SGLANG_SPECDEC_INJECT_VERIFY_CYCLES"
MIN_BATCH = "SGLANG_SPECDEC_INJECT_MIN_BATCH"
PER_REQUEST = "SGLANG_SPECDEC_INJECT_PER_REQUEST"
MODULE = "sglang.srt.models.llama"


@dataclass(frozen=True)
class Injection:
    """How long to spin after a target verify forward: ``cycles`` (per request of the batch
    with ``per_request``), for batches of ``min_batch`` requests or more."""

    cycles: int
    min_batch: int = 1
    per_request: bool = False

    def spin(self, batch_size: int) -> int:
        if batch_size < self.min_batch:
            return 0
        return self.cycles * batch_size if self.per_request else self.cycles


def _positive(name: str, fix: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: give a positive {fix}")
    return value


def injection() -> Injection | None:
    """The slowdown the environment asks for, or None (nothing injected)."""
    cycles = _positive(VARIABLE, "number of GPU clock cycles")
    if cycles is None:
        return None
    min_batch = _positive(MIN_BATCH, "number of requests") or 1
    flag = os.environ.get(PER_REQUEST, "").strip()
    if flag not in ("", "0", "1"):
        raise ValueError(f"{PER_REQUEST}={flag!r}: give 1 (cycles per request) or 0")
    return Injection(cycles, min_batch, flag == "1")


def patch(module: ModuleType, inject: Injection) -> None:
    """Wrap ``module.LlamaForCausalLM.forward``: after a TARGET_VERIFY forward, spin."""
    cls = module.LlamaForCausalLM
    original = cls.forward

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        batch = kwargs["forward_batch"] if "forward_batch" in kwargs else args[2]
        if batch.forward_mode.is_target_verify():
            spin = inject.spin(int(getattr(batch, "batch_size", 1)))
            if spin:
                import torch  # type: ignore[import-not-found,unused-ignore]

                torch.cuda._sleep(spin)
        return out

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    cls.forward = forward


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``sglang.srt.models.llama`` the normal way and patches it once executed."""

    def __init__(self, inject: Injection) -> None:
        self.inject = inject

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
            patch(module, self.inject)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(where: str) -> None:
    """Patch ``sglang.srt.models.llama`` when it is imported, as the environment asks; a bad
    value stops the process with the reason, named after ``where`` (the file that calls this),
    so that the engine never runs unpatched."""
    try:
        inject = injection()
    except ValueError as exc:
        raise SystemExit(f"{where}: {exc}") from None
    if inject is not None:
        sys.meta_path.insert(0, PatchOnImport(inject))
