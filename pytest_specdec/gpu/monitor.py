"""GPU hygiene for one pytest process: which GPUs, telemetry per run, cooldown, clock lock.

Built once per runner. Without a GPU (or NVML) it says so once and every record carries
``gpu: null`` — never zeros — unless a GPU is required, which is then an immediate error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specdec.gpu.hygiene import (
    ClockLock,
    HygienePolicy,
    cooldown,
    idle_temperature,
    invalid_reasons,
    session_median_sm_clock,
)
from pytest_specdec.gpu.nvml import (
    GpuSelectionError,
    assign_gpus,
    cuda_to_nvml_indices,
    fingerprints,
    load_nvml,
    probe,
    xdist_worker_index,
)
from pytest_specdec.gpu.telemetry import RunTelemetry, TelemetrySampler


class GpuRequired(RuntimeError):
    """--specdec-require-gpu was given and no usable GPU was found; the message says why."""


@dataclass(frozen=True)
class GpuSettings:
    gpus: tuple[int, ...] | None = None  # NVML indices; None: from CUDA_VISIBLE_DEVICES or all
    require: bool = False
    hz: float = 10.0
    cooldown: bool = True
    lock_sm_mhz: int | None = None
    per_worker: int = 1
    policy: HygienePolicy = field(default_factory=HygienePolicy)


@dataclass
class RunWindow:
    """Telemetry of one run, filled when the window closes."""

    telemetry: RunTelemetry | None = None


class GpuMonitor:
    def __init__(self, settings: GpuSettings, worker_id: str | None, n_workers: int) -> None:
        self.settings = settings
        self.available, self.reason = probe()
        self.devices: list[int] = []
        self._sampler: TelemetrySampler | None = None
        self._lock: ClockLock | None = None
        self.idle_temp_c: float | None = None
        self.runs: list[RunTelemetry] = []
        if not self.available:
            if settings.require:
                raise GpuRequired(
                    f"--specdec-require-gpu: no usable NVIDIA GPU: {self.reason}; check the driver "
                    "(nvidia-smi) and that nvidia-ml-py is installed, or drop the flag"
                )
            return
        self.devices = self._select(worker_id, n_workers)
        self.idle_temp_c = idle_temperature(self.devices)
        self._sampler = TelemetrySampler(self.devices, hz=settings.hz).start()
        if settings.lock_sm_mhz:
            self._lock = ClockLock(self.devices, settings.lock_sm_mhz).__enter__()

    def _select(self, worker_id: str | None, n_workers: int) -> list[int]:
        nvml = load_nvml()
        if self.settings.gpus is not None:
            pool = list(self.settings.gpus)
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            pool = (
                cuda_to_nvml_indices(visible) if visible else list(range(nvml.nvmlDeviceGetCount()))
            )
        if n_workers > 1:
            index = xdist_worker_index(worker_id)
            return assign_gpus(index, n_workers, pool, self.settings.per_worker)
        return pool

    @property
    def uuids(self) -> list[str]:
        return [f.uuid for f in fingerprints(self.devices)]

    def engine_env(self) -> dict[str, str]:
        """CUDA_VISIBLE_DEVICES for an engine on this worker's GPUs (by UUID: order-proof)."""
        if not self.available:
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.uuids)}

    def describe(self) -> dict[str, Any] | None:
        """The results' ``gpu`` field: fingerprints and state, or None without a GPU."""
        if not self.available:
            return None
        devices = [f.to_dict() for f in fingerprints(self.devices)]
        if self._lock is not None:
            for dev in devices:
                dev["locked_sm_clock_mhz"] = self._lock.sm_mhz
        return {"devices": devices, "idle_temp_c": self.idle_temp_c, "sample_hz": self.settings.hz}

    def before_config(self) -> dict[str, Any] | None:
        """The cooldown gate: wait for idle temperature and no thermal bits (capped)."""
        if not self.available or not self.settings.cooldown:
            return None
        p = self.settings.policy
        result = cooldown(
            self.devices, self.idle_temp_c, margin_c=p.cooldown_margin_c, cap_s=p.cooldown_cap_s
        )
        return result.to_dict()

    @contextlib.contextmanager
    def window(self) -> Iterator[RunWindow]:
        out = RunWindow()
        if self._sampler is None:
            yield out
            return
        with self._sampler.window() as win:
            yield out
        out.telemetry = win.summary()
        self.runs.append(out.telemetry)

    def invalid(self, telemetry: RunTelemetry | None, session: Sequence[RunTelemetry]) -> list[str]:
        """Why a run must be rerun (thermal/HW slowdown/power brake, clock sag); [] if valid."""
        if telemetry is None:
            return []
        median = session_median_sm_clock(list(session))
        return invalid_reasons(telemetry, median, self.settings.policy)

    def close(self) -> None:
        if self._lock is not None:
            self._lock.reset()
            self._lock = None
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None


def telemetry_dict(
    telemetry: RunTelemetry | None, output_tokens: int | None
) -> dict[str, Any] | None:
    """A run's telemetry for the results, with energy per output token filled in."""
    if telemetry is None:
        return None
    out = telemetry.to_dict()
    if output_tokens and telemetry.energy_j is not None:
        out["energy_per_token_j"] = telemetry.energy_j / output_tokens
        out["output_tokens"] = output_tokens
    return out


__all__ = ["GpuMonitor", "GpuRequired", "GpuSelectionError", "GpuSettings", "telemetry_dict"]
