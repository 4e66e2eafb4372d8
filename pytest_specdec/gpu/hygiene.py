"""GPU hygiene: which runs to invalidate, the cooldown gate, and the optional clock lock.

Power capping (reason 0x4) is normal under load: it is recorded, never a reason to drop a
run. Thermal slowdown (0x20, 0x40), HW slowdown (0x8) and HW power brake (0x80) are: a run
is invalid when they cover more than ``max_throttle_fraction`` of its samples, or of its
duration by the driver's cumulative throttle-time counters (which also catch events that
fall between samples), or when its median SM clock is below ``min_clock_ratio`` of the
session median.
"""

from __future__ import annotations

import atexit
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specdec.gpu.nvml import LOCKED_SM_CLOCKS, as_text, load_nvml, nvml_error
from pytest_specdec.gpu.readings import THERMAL_BITS, DeviceReader, reason_name
from pytest_specdec.gpu.telemetry import RunTelemetry

SW_POWER_CAP = 0x4
DEFAULT_INVALIDATING_BITS = 0x8 | 0x20 | 0x40 | 0x80
# Throttle-time counters (see telemetry.py) that count against a run.
INVALIDATING_COUNTERS = (
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "violation_thermal",
)


@dataclass(frozen=True)
class HygienePolicy:
    """Thresholds of the GPU hygiene rules; each is an option of the plugin."""

    max_throttle_fraction: float = 0.01
    min_clock_ratio: float = 0.90
    invalidating_bits: int = DEFAULT_INVALIDATING_BITS
    max_reruns: int = 2
    cooldown_margin_c: float = 5.0
    cooldown_cap_s: float = 120.0

    def __post_init__(self) -> None:
        ranges: dict[str, tuple[float, float]] = {
            "max_throttle_fraction": (0.0, 1.0),
            "min_clock_ratio": (0.0, 1.0),
            "invalidating_bits": (1, 2**64 - 1),
            "max_reruns": (0, 10),
            "cooldown_margin_c": (0.0, 50.0),
            "cooldown_cap_s": (0.0, 3600.0),
        }
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            low, high = ranges[f.name]
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not low <= value <= high:
                raise ValueError(
                    f"HygienePolicy.{f.name} = {value!r} is outside the valid range {low}..{high}"
                )
        if self.invalidating_bits & SW_POWER_CAP:
            raise ValueError(
                f"HygienePolicy.invalidating_bits = {self.invalidating_bits:#x} includes 0x4 "
                "(sw_power_cap); power capping is normal under load and never invalidates a run"
            )


def invalid_reasons(
    run: RunTelemetry,
    session_median_sm_clock: float | None,
    policy: HygienePolicy | None = None,
) -> list[str]:
    """Why ``run`` must not count (empty: it is valid). Each reason names value and limit."""
    p = policy or HygienePolicy()
    limit = f"limit {p.max_throttle_fraction:.1%}"
    out: list[str] = []
    for dev in run.devices:
        bits = p.invalidating_bits
        for bit in (1 << i for i in range(bits.bit_length()) if bits >> i & 1):
            share = dev.reason_fractions.get(reason_name(bit), 0.0)
            if share > p.max_throttle_fraction:
                out.append(
                    f"GPU {dev.index}: {reason_name(bit)} in {share:.1%} of "
                    f"{dev.reason_samples} samples ({limit})"
                )
        for name in INVALIDATING_COUNTERS:
            share = dev.throttle_fractions.get(name, 0.0)
            if share > p.max_throttle_fraction:
                out.append(
                    f"GPU {dev.index}: {name} for {share:.1%} of the run by the driver's "
                    f"throttle-time counter ({limit})"
                )
    median = run.median_sm_clock_mhz
    if session_median_sm_clock and median is not None:
        ratio = median / session_median_sm_clock
        if ratio < p.min_clock_ratio:
            out.append(
                f"median SM clock {median:.0f} MHz is {ratio:.1%} of the session median "
                f"{session_median_sm_clock:.0f} MHz (limit {p.min_clock_ratio:.0%})"
            )
    return out


def session_median_sm_clock(runs: Sequence[RunTelemetry | None]) -> float | None:
    """Median over runs of each run's median SM clock; None when no run has one."""
    medians = [r.median_sm_clock_mhz for r in runs if r is not None]
    known = [m for m in medians if m is not None]
    return statistics.median(known) if known else None


# ---------------------------------------------------------------------------- cooldown


@dataclass(frozen=True)
class CooldownResult:
    """How the wait for a cool, unthrottled GPU went."""

    waited_s: float
    start_temp_c: float | None
    end_temp_c: float | None
    target_temp_c: float | None
    reached: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _state(readers: Sequence[DeviceReader]) -> tuple[float | None, int]:
    """Hottest GPU temperature (None if unreadable) and the OR of the reason bits."""
    samples = [r.read(time.perf_counter_ns()) for r in readers]
    temps = [s.gpu_temp_c for s in samples if s.gpu_temp_c is not None]
    bits = 0
    for s in samples:
        bits |= s.reasons or 0
    return (max(temps) if temps else None), bits


def idle_temperature(devices: Sequence[int], nvml: Any | None = None) -> float | None:
    """The hottest of the devices now; measure it at session start for :func:`cooldown`."""
    nv = load_nvml() if nvml is None else nvml
    return _state([DeviceReader(nv, i) for i in devices])[0]


def cooldown(
    devices: Sequence[int],
    idle_temp_c: float | None,
    margin_c: float = 5.0,
    cap_s: float = 120.0,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    *,
    nvml: Any | None = None,
) -> CooldownResult:
    """Wait until every device is at most ``idle_temp_c + margin_c`` with no thermal bits.

    Gives up after ``cap_s`` seconds (``reached=False``). With ``idle_temp_c=None`` only the
    thermal bits are checked, and the reason says so. An NVML failure ends the wait with
    ``reached=False`` and the error in ``reason``.
    """
    if cap_s < 0 or poll_s <= 0:
        raise ValueError(f"cooldown cap_s={cap_s} must be >= 0 and poll_s={poll_s} > 0")
    nv = load_nvml() if nvml is None else nvml
    readers = [DeviceReader(nv, i) for i in devices]
    target = None if idle_temp_c is None else idle_temp_c + margin_c
    started = clock()
    start_temp: float | None = None
    first = True
    while True:
        try:
            temp, bits = _state(readers)
        except nvml_error(nv) as exc:
            why = f"NVML failed while waiting: {exc}"
            return CooldownResult(clock() - started, start_temp, None, target, False, why)
        start_temp, first = (temp if first else start_temp), False
        waited = clock() - started
        hot = target is not None and temp is not None and temp > target
        thermal = bits & THERMAL_BITS
        if not hot and not thermal:
            about = "no idle temperature given" if target is None else f"target {target:.0f} °C"
            now = "unknown" if temp is None else f"{temp:.0f} °C"
            why = f"at {now} ({about}), no thermal slowdown bits"
            return CooldownResult(waited, start_temp, temp, target, True, why)
        if waited >= cap_s:
            why = (
                f"still {temp:.0f} °C > target {target:.0f} °C"
                if hot and temp is not None and target is not None
                else f"thermal slowdown bits {thermal:#x} still set"
            )
            return CooldownResult(
                waited, start_temp, temp, target, False, f"{why} after {cap_s:g} s"
            )
        sleep(min(poll_s, cap_s - waited))


# ---------------------------------------------------------------------------- clock lock


class ClockLockError(RuntimeError):
    """Locking SM clocks failed; the message says why and what to do."""


class ClockLock:
    """Lock the SM clock of the devices to ``sm_mhz`` (root only); always reset on exit.

    The reset also runs at interpreter exit if the process dies without leaving the block,
    and is idempotent. :attr:`state` is what a baseline key records.
    """

    def __init__(self, devices: Sequence[int], sm_mhz: int, *, nvml: Any | None = None) -> None:
        if isinstance(sm_mhz, bool) or not isinstance(sm_mhz, int) or sm_mhz <= 0:
            raise ValueError(f"clock lock sm_mhz={sm_mhz!r} must be a positive whole MHz")
        self.devices = list(devices)
        self.sm_mhz = sm_mhz
        self._nvml = load_nvml() if nvml is None else nvml
        self._locked: dict[int, tuple[Any, str]] = {}  # index -> (handle, uuid)

    @property
    def state(self) -> dict[str, int | None]:
        """``{uuid: locked MHz}`` for each device locked now."""
        return {uuid: LOCKED_SM_CLOCKS.get(uuid) for _, uuid in self._locked.values()}

    def __enter__(self) -> ClockLock:
        nv = self._nvml
        atexit.register(self.reset)
        try:
            for index in self.devices:
                h = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = as_text(nv.nvmlDeviceGetUUID(h))
                try:
                    nv.nvmlDeviceSetGpuLockedClocks(h, self.sm_mhz, self.sm_mhz)
                except nvml_error(nv) as exc:
                    raise self._explain(index, exc) from exc
                self._locked[index] = (h, uuid)
                LOCKED_SM_CLOCKS[uuid] = self.sm_mhz
        except BaseException:
            self.reset()
            raise
        return self

    def _explain(self, index: int, exc: Exception) -> ClockLockError:
        code = getattr(exc, "value", None)
        if code == getattr(self._nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return ClockLockError(
                f"clock lock needs root: NVML refused to lock GPU {index} at {self.sm_mhz} MHz "
                f"({exc}); run as root or leave the clock lock off"
            )
        return ClockLockError(
            f"cannot lock GPU {index} at {self.sm_mhz} MHz: {exc}; pick a clock the GPU "
            "supports (nvidia-smi -q -d SUPPORTED_CLOCKS) or leave the clock lock off"
        )

    def reset(self) -> list[str]:
        """Reset every clock this lock set; idempotent. Returns the errors it met, if any."""
        locked, self._locked = self._locked, {}
        errors: list[str] = []
        for index, (h, uuid) in locked.items():
            LOCKED_SM_CLOCKS.pop(uuid, None)
            try:
                self._nvml.nvmlDeviceResetGpuLockedClocks(h)
            except nvml_error(self._nvml) as exc:
                errors.append(f"GPU {index}: clock reset failed: {exc}")
        atexit.unregister(self.reset)
        return errors

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        errors = self.reset()
        if errors and exc_type is None:
            raise ClockLockError("; ".join(errors) + "; reset by hand: nvidia-smi -rgc")
