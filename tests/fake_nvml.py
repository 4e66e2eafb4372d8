"""A fake ``pynvml`` module for tests: GPUs whose readings the test sets step by step.

Handles are the :class:`FakeGpu` objects themselves. Set a reading with
``fake.gpus[0].sm_mhz = 1500``; make a call fail with
``fake.gpus[0].fail["nvmlDeviceGetPowerUsage"] = FakeNvml.NVML_ERROR_GPU_IS_LOST``; make it
unsupported with ``fake.gpus[0].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

_ERROR_TEXT = {
    3: "Not Supported",
    4: "Insufficient Permissions",
    9: "Driver Not Loaded",
    13: "Function Not Found",
    15: "GPU is lost",
}


class NVMLError(Exception):
    """Like pynvml's: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML error {self.value}")


@dataclass
class FakeGpu:
    """One fake GPU; every attribute is what the matching NVML call returns next."""

    index: int
    name: str = "NVIDIA H200"
    uuid: str = ""
    pci_bus_id: str = ""
    temp_c: int = 35
    mem_temp_c: int = 40
    sm_mhz: int = 420
    mem_mhz: int = 2619
    power_mw: int = 105_000
    energy_mj: int = 1_000_000
    util_gpu: int = 0
    util_mem: int = 0
    pstate: int = 0
    reasons: int = 0x1
    counters_ns: dict[int, int] = field(default_factory=dict)  # field id -> cumulative ns
    violation_ns: dict[int, int] = field(default_factory=dict)  # perf policy -> ns
    unsupported: set[str] = field(default_factory=set)  # call names answering NOT_SUPPORTED
    unsupported_fields: set[int] = field(default_factory=set)
    fail: dict[str, int] = field(default_factory=dict)  # call name -> error code raised
    locked_mhz: tuple[int, int] | None = None
    parent: FakeGpu | None = None  # set on MIG handles

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08x}-aaaa-bbbb-cccc-{self.index:012x}"
        self.pci_bus_id = self.pci_bus_id or f"00000000:{0x18 + self.index:02X}:00.0"


class FakeNvml:
    """Stands in for the ``pynvml`` module (only the calls the GPU modules make)."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST = 76
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271

    def __init__(self, n_gpus: int = 1, init_error: int | None = None) -> None:
        self.gpus = [FakeGpu(i) for i in range(n_gpus)]
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0
        self.calls: list[tuple[str, int]] = []  # (call name, GPU index) of clock-setting calls

    def _call(self, name: str, gpu: FakeGpu) -> None:
        if name in gpu.fail:
            raise NVMLError(gpu.fail[name])
        if name in gpu.unsupported:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    # --- library and system
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    # --- identity
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        for gpu in self.gpus:
            if uuid == f"MIG-{gpu.uuid[4:]}":
                return FakeGpu(index=-1, uuid=uuid, parent=gpu)
        raise NVMLError(6)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig: FakeGpu) -> FakeGpu:
        if mig.parent is None:
            raise NVMLError(2)
        return mig.parent

    def nvmlDeviceGetIndex(self, gpu: FakeGpu) -> int:
        return gpu.index

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> Any:
        return SimpleNamespace(busId=gpu.pci_bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:
        return SimpleNamespace(total=143_771 * 2**20, free=0, used=0)

    def nvmlDeviceGetEccMode(self, gpu: FakeGpu) -> list[int]:
        self._call("nvmlDeviceGetEccMode", gpu)
        return [1, 1]

    def nvmlDeviceGetPowerManagementLimit(self, gpu: FakeGpu) -> int:
        return 700_000

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        self._call("nvmlDeviceGetMaxClockInfo", gpu)
        return 1980 if clock == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMemoryBusWidth(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetMemoryBusWidth", gpu)
        return 6144

    def nvmlDeviceGetApplicationsClock(self, gpu: FakeGpu, clock: int) -> int:
        self._call("nvmlDeviceGetApplicationsClock", gpu)
        return 1980 if clock == self.NVML_CLOCK_SM else 3201

    # --- readings
    def nvmlDeviceGetTemperatureV(self, gpu: FakeGpu, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperatureV", gpu)
        return gpu.temp_c

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature", gpu)
        return gpu.temp_c

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        self._call("nvmlDeviceGetClockInfo", gpu)
        return gpu.sm_mhz if clock == self.NVML_CLOCK_SM else gpu.mem_mhz

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetPowerUsage", gpu)
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption", gpu)
        return gpu.energy_mj

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        self._call("nvmlDeviceGetUtilizationRates", gpu)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetPerformanceState(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetPerformanceState", gpu)
        return gpu.pstate

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons", gpu)
        return gpu.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons", gpu)
        return gpu.reasons

    def nvmlDeviceGetViolationStatus(self, gpu: FakeGpu, policy: int) -> Any:
        self._call("nvmlDeviceGetViolationStatus", gpu)
        return SimpleNamespace(referenceTime=0, violationTime=gpu.violation_ns.get(policy, 0))

    def nvmlDeviceGetFieldValues(self, gpu: FakeGpu, field_ids: list[int]) -> list[Any]:
        self._call("nvmlDeviceGetFieldValues", gpu)
        out = []
        for fid in field_ids:
            if fid in gpu.unsupported_fields:
                out.append(SimpleNamespace(fieldId=fid, nvmlReturn=3, valueType=3, value=None))
            elif fid == self.NVML_FI_DEV_MEMORY_TEMP:
                value = SimpleNamespace(uiVal=gpu.mem_temp_c)
                out.append(SimpleNamespace(fieldId=fid, nvmlReturn=0, valueType=1, value=value))
            else:
                value = SimpleNamespace(ullVal=gpu.counters_ns.get(fid, 0))
                out.append(SimpleNamespace(fieldId=fid, nvmlReturn=0, valueType=3, value=value))
        return out

    # --- clocks
    def nvmlDeviceSetGpuLockedClocks(self, gpu: FakeGpu, low: int, high: int) -> None:
        self._call("nvmlDeviceSetGpuLockedClocks", gpu)
        self.calls.append(("lock", gpu.index))
        gpu.locked_mhz = (low, high)

    def nvmlDeviceResetGpuLockedClocks(self, gpu: FakeGpu) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks", gpu)
        self.calls.append(("reset", gpu.index))
        gpu.locked_mhz = None
