"""One NVML reading of one device: temperature, clocks, power, energy counter, throttle
("clock event") reasons and violation counters, read field by field so that a field the
driver does not support is left empty instead of failing the reading."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specdec.gpu.nvml import call_optional, is_unsupported, nvml_error

# NVML clock-event ("throttle") reason bits and the names recorded for them.
REASON_NAMES: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THERMAL_BITS = 0x20 | 0x40

# Cumulative throttle-time counters (nanoseconds), read as NVML field values by constant name.
_COUNTER_FIELDS = {
    "sw_power_cap": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
    "sync_boost": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST",
    "sw_thermal_slowdown": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
    "hw_thermal_slowdown": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
    "hw_power_brake_slowdown": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
}
_THERMAL_COUNTERS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
# Older drivers: violation time per performance policy (nanoseconds), when the fields are missing.
_VIOLATION_POLICIES = {
    "violation_power": "NVML_PERF_POLICY_POWER",
    "violation_thermal": "NVML_PERF_POLICY_THERMAL",
}
_MEM_TEMP_FIELD = "NVML_FI_DEV_MEMORY_TEMP"
_VALUE_ATTRS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def reason_name(bit: int) -> str:
    """Recorded name of one reason bit; an unknown bit is kept as hex (``"0x200"``)."""
    return REASON_NAMES.get(bit, hex(bit))


def decode_reasons(bits: int) -> list[str]:
    """Names of the bits set in ``bits``, lowest bit first."""
    return [reason_name(1 << i) for i in range(bits.bit_length()) if bits >> i & 1]


@dataclass(frozen=True)
class Sample:
    """One reading of one device. None: the device or driver does not report it."""

    t_ns: int
    gpu_temp_c: float | None = None
    mem_temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    pstate: int | None = None
    reasons: int | None = None
    counters_ns: dict[str, int] = field(default_factory=dict)


def _num(value: Any | None) -> float | None:
    return None if value is None else float(value)


class DeviceReader:
    """Reads one device, learning which readings it lacks so it does not ask again."""

    def __init__(self, nvml: Any, index: int) -> None:
        self.nvml = nvml
        self.index = index
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self._unsupported: set[str] = set()
        names = {"mem_temp": _MEM_TEMP_FIELD, **_COUNTER_FIELDS}
        self._fields = {k: getattr(nvml, c) for k, c in names.items() if hasattr(nvml, c)}

    def _get(self, key: str, calls: Sequence[str], *args: Any) -> Any | None:
        """The first of ``calls`` that the binding and device support, or None."""
        for name in calls:
            if f"{key}:{name}" in self._unsupported:
                continue
            value = call_optional(self.nvml, name, self.handle, *args)
            if value is not None:
                return value
            self._unsupported.add(f"{key}:{name}")
        return None

    def read(self, t_ns: int) -> Sample:
        """One sample; raises the NVML error when a reading fails (not merely unsupported)."""
        nv = self.nvml
        sm_id, mem_id = getattr(nv, "NVML_CLOCK_SM", 1), getattr(nv, "NVML_CLOCK_MEM", 2)
        temp_calls = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")
        reason_calls = (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        )
        util = self._get("util", ("nvmlDeviceGetUtilizationRates",))
        power = self._get("power", ("nvmlDeviceGetPowerUsage",))
        energy = self._get("energy", ("nvmlDeviceGetTotalEnergyConsumption",))
        pstate = self._get("pstate", ("nvmlDeviceGetPerformanceState",))
        reasons = self._get("reasons", reason_calls)
        fields = self._read_fields()
        return Sample(
            t_ns=t_ns,
            gpu_temp_c=_num(self._get("temp", temp_calls, getattr(nv, "NVML_TEMPERATURE_GPU", 0))),
            mem_temp_c=_num(fields.pop("mem_temp", None)),
            sm_clock_mhz=_num(self._get("sm", ("nvmlDeviceGetClockInfo",), sm_id)),
            mem_clock_mhz=_num(self._get("mem", ("nvmlDeviceGetClockInfo",), mem_id)),
            power_w=None if power is None else int(power) / 1000.0,
            energy_mj=None if energy is None else int(energy),
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            pstate=None if pstate is None else int(pstate),
            reasons=None if reasons is None else int(reasons),
            counters_ns={k: int(v) for k, v in fields.items()} | self._read_violations(),
        )

    def _read_fields(self) -> dict[str, Any]:
        if not self._fields:
            return {}
        names = list(self._fields)
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, list(self._fields.values()))
        except nvml_error(self.nvml) as exc:
            if not is_unsupported(self.nvml, exc):
                raise
            self._fields.clear()
            return {}
        out: dict[str, Any] = {}
        for name, value in zip(names, values, strict=True):
            if value.nvmlReturn == 0:
                out[name] = getattr(value.value, _VALUE_ATTRS.get(value.valueType, "ullVal"))
            elif is_unsupported(self.nvml, int(value.nvmlReturn)):
                del self._fields[name]
        return out

    def _read_violations(self) -> dict[str, int]:
        if any(k in self._fields for k in _THERMAL_COUNTERS):
            return {}
        out: dict[str, int] = {}
        for name, policy in _VIOLATION_POLICIES.items():
            if hasattr(self.nvml, policy):
                status = self._get(
                    name, ("nvmlDeviceGetViolationStatus",), getattr(self.nvml, policy)
                )
                if status is not None:
                    out[name] = int(status.violationTime)
        return out
