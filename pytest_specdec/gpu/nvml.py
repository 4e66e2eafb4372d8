"""NVML access, GPU identity and GPU selection.

This is the base of the GPU modules; it imports only the standard library (and ``pci``, which
reads sysfs) and loads ``pynvml`` (distribution ``nvidia-ml-py``) lazily, so the plugin works on
machines without a GPU. The rest of the GPU story lives next to it:

- ``pci``: where a GPU sits for the host's CPUs (NUMA node, local CPUs);
- ``readings``: one NVML sample of a device;
- ``telemetry``: the background sampler and the per-run telemetry summary;
- ``hygiene``: invalidation rules, the cooldown gate and the optional clock lock;
- ``monitor``: the per-run GPU monitor that puts them together for the driver.

Every function that talks to NVML takes ``nvml=None`` (meaning: the process-wide module
from :func:`load_nvml`); tests pass a fake module instead. Devices are named by their
NVML index, which enumerates GPUs in PCI bus order.
"""

from __future__ import annotations

import atexit
import importlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_specdec.gpu.pci import pci_locality

__all__ = [
    "LOCKED_SM_CLOCKS",
    "GpuFingerprint",
    "GpuSelectionError",
    "GpuUnavailable",
    "NvmlLoader",
    "as_text",
    "assign_gpus",
    "call_optional",
    "cuda_to_nvml_indices",
    "cuda_visible_devices",
    "fingerprint",
    "fingerprints",
    "handle",
    "is_unsupported",
    "load_nvml",
    "nvml_error",
    "parse_cuda_visible_devices",
    "parse_gpu_list",
    "port_range",
    "probe",
    "xdist_worker_index",
]

# NVML return codes that mean "this device or driver cannot answer", as opposed to a failure.
_UNSUPPORTED_CODES = {
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
}


class GpuUnavailable(RuntimeError):
    """NVML cannot be used here; ``reason`` says why (module missing, init failed, no GPU)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GpuSelectionError(ValueError):
    """A GPU list, CUDA_VISIBLE_DEVICES entry or worker assignment cannot be satisfied."""


def _import_pynvml() -> Any:
    return importlib.import_module("pynvml")


class NvmlLoader:
    """Imports and initialises NVML once per process; shuts it down at exit.

    A failure is remembered too, so a machine without a GPU is diagnosed once and every
    later caller gets the same reason without retrying.
    """

    def __init__(self, importer: Callable[[], Any] = _import_pynvml) -> None:
        self._importer = importer
        self._lock = threading.Lock()
        self._module: Any = None
        self._failure: str | None = None

    def load(self) -> Any:
        """Return the initialised NVML module or raise :class:`GpuUnavailable`."""
        with self._lock:
            if self._module is not None:
                return self._module
            if self._failure is not None:
                raise GpuUnavailable(self._failure)
            try:
                self._module = self._initialise()
            except GpuUnavailable as exc:
                self._failure = exc.reason
                raise
            atexit.register(self.shutdown)
            return self._module

    def _initialise(self) -> Any:
        try:
            nvml = self._importer()
        except ImportError as exc:
            raise GpuUnavailable(
                f"module pynvml cannot be imported ({exc}); install nvidia-ml-py"
            ) from exc
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError, or OSError from loading libnvidia-ml
            raise GpuUnavailable(f"NVML init failed: {exc}") from exc
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml_error(nvml) as exc:
            _quiet_shutdown(nvml)
            raise GpuUnavailable(f"NVML device count failed: {exc}") from exc
        if count < 1:
            _quiet_shutdown(nvml)
            raise GpuUnavailable("NVML initialised but reports no GPU devices")
        return nvml

    def shutdown(self) -> None:
        """Shut NVML down if this loader initialised it; safe to call twice."""
        with self._lock:
            module, self._module = self._module, None
        atexit.unregister(self.shutdown)
        if module is not None:
            _quiet_shutdown(module)


def _quiet_shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml_error(nvml):
        pass  # shutting down: nothing useful to do with a failure here


_DEFAULT_LOADER = NvmlLoader()


def load_nvml() -> Any:
    """The process-wide initialised ``pynvml`` module, or raise :class:`GpuUnavailable`."""
    return _DEFAULT_LOADER.load()


def probe(loader: NvmlLoader | None = None) -> tuple[bool, str]:
    """``(available, reason)``; callers record ``gpu: null`` with the reason when unavailable."""
    try:
        nvml = (loader or _DEFAULT_LOADER).load()
        count = int(nvml.nvmlDeviceGetCount())
        driver = call_optional(nvml, "nvmlSystemGetDriverVersion")
    except GpuUnavailable as exc:
        return False, exc.reason
    return True, f"NVML sees {count} GPU(s), driver {as_text(driver) if driver else 'unknown'}"


def _resolve(nvml: Any | None) -> Any:
    return load_nvml() if nvml is None else nvml


def nvml_error(nvml: Any) -> type[Exception]:
    """The NVMLError class of ``nvml`` (for ``except`` clauses)."""
    error: type[Exception] = getattr(nvml, "NVMLError", RuntimeError)
    return error


def is_unsupported(nvml: Any, error: BaseException | int) -> bool:
    """True when an NVML error (or return code) means "cannot answer here", not a failure."""
    code = error if isinstance(error, int) else getattr(error, "value", None)
    return code is not None and code in {getattr(nvml, k, v) for k, v in _UNSUPPORTED_CODES.items()}


def call_optional(nvml: Any, name: str, *args: Any) -> Any | None:
    """Call ``nvml.<name>(*args)``; None when the binding or the device does not support it."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml_error(nvml) as exc:
        if is_unsupported(nvml, exc):
            return None
        raise


def as_text(value: Any) -> str:
    """NVML strings arrive as str or bytes, depending on the binding's version."""
    return value.decode() if isinstance(value, bytes) else str(value)


def handle(index: int, nvml: Any | None = None) -> Any:
    """The NVML handle of the GPU with NVML index ``index``."""
    return _resolve(nvml).nvmlDeviceGetHandleByIndex(index)


# ---------------------------------------------------------------------------- identity

# SM clocks locked by this process (GPU uuid -> MHz); NVML has no call that reads a lock back.
LOCKED_SM_CLOCKS: dict[str, int] = {}


@dataclass(frozen=True)
class GpuFingerprint:
    """What identifies a GPU and its settings for a baseline key. None: NVML could not say."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    driver_version: str | None
    cuda_driver_version: str | None
    memory_total_mib: int | None
    power_limit_w: float | None
    enforced_power_limit_w: float | None
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    memory_bus_width_bits: int | None
    applications_sm_clock_mhz: int | None
    applications_mem_clock_mhz: int | None
    locked_sm_clock_mhz: int | None  # only a lock this process set (see hygiene.ClockLock)
    ecc_enabled: bool | None
    # Where the GPU sits for the host's CPUs (Linux's sysfs for its PCI address): its NUMA node
    # and the CPUs local to it, as the kernel lists them ("0-15"); None where sysfs has no say.
    numa_node: int | None = None
    local_cpus: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _try(nvml: Any, name: str, *args: Any) -> Any | None:
    """Like :func:`call_optional`, but any NVML error reads as unknown (identity is best-effort)."""
    try:
        return call_optional(nvml, name, *args)
    except nvml_error(nvml):
        return None


def _watts(milliwatts: Any | None) -> float | None:
    return None if milliwatts is None else int(milliwatts) / 1000.0


def _cuda_version(raw: Any | None) -> str | None:
    return None if raw is None else f"{int(raw) // 1000}.{int(raw) % 1000 // 10}"


def fingerprint(index: int, nvml: Any | None = None) -> GpuFingerprint:
    """Read the identity and settings of GPU ``index``."""
    nv = _resolve(nvml)
    h = nv.nvmlDeviceGetHandleByIndex(index)
    uuid = as_text(nv.nvmlDeviceGetUUID(h))
    memory = _try(nv, "nvmlDeviceGetMemoryInfo", h)
    ecc = _try(nv, "nvmlDeviceGetEccMode", h)
    app_sm = _try(nv, "nvmlDeviceGetApplicationsClock", h, getattr(nv, "NVML_CLOCK_SM", 1))
    app_mem = _try(nv, "nvmlDeviceGetApplicationsClock", h, getattr(nv, "NVML_CLOCK_MEM", 2))
    max_sm = _try(nv, "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1))
    max_mem = _try(nv, "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_MEM", 2))
    bus = _try(nv, "nvmlDeviceGetMemoryBusWidth", h)
    driver = _try(nv, "nvmlSystemGetDriverVersion")
    bus_id = as_text(nv.nvmlDeviceGetPciInfo(h).busId)
    numa_node, local_cpus = pci_locality(bus_id)
    return GpuFingerprint(
        index=index,
        name=as_text(nv.nvmlDeviceGetName(h)),
        uuid=uuid,
        pci_bus_id=bus_id,
        driver_version=None if driver is None else as_text(driver),
        cuda_driver_version=_cuda_version(_try(nv, "nvmlSystemGetCudaDriverVersion")),
        memory_total_mib=None if memory is None else int(memory.total) // 2**20,
        power_limit_w=_watts(_try(nv, "nvmlDeviceGetPowerManagementLimit", h)),
        enforced_power_limit_w=_watts(_try(nv, "nvmlDeviceGetEnforcedPowerLimit", h)),
        max_sm_clock_mhz=None if max_sm is None else int(max_sm),
        max_memory_clock_mhz=None if max_mem is None else int(max_mem),
        memory_bus_width_bits=None if bus is None else int(bus),
        applications_sm_clock_mhz=None if app_sm is None else int(app_sm),
        applications_mem_clock_mhz=None if app_mem is None else int(app_mem),
        locked_sm_clock_mhz=LOCKED_SM_CLOCKS.get(uuid),
        ecc_enabled=None if ecc is None else bool(ecc[0]),
        numa_node=numa_node,
        local_cpus=local_cpus,
    )


def fingerprints(indices: Sequence[int], nvml: Any | None = None) -> list[GpuFingerprint]:
    """Fingerprints of the GPUs with the given NVML indices, in that order."""
    nv = _resolve(nvml)
    return [fingerprint(i, nv) for i in indices]


# ---------------------------------------------------------------------------- selection

_GPU_LIST_FORM = "comma-separated GPU indices such as '0' or '0,1'"


def parse_gpu_list(value: str) -> list[int]:
    """Parse ``"0,1"`` into ``[0, 1]``; ValueError names the value and the valid form."""
    parts = [p.strip() for p in value.split(",")]
    if not value.strip():
        raise ValueError(f"GPU list {value!r} is empty; use {_GPU_LIST_FORM}")
    out: list[int] = []
    for part in parts:
        if not part.isdigit():
            raise ValueError(
                f"GPU list {value!r}: {part!r} is not a GPU index; use {_GPU_LIST_FORM}"
            )
        if int(part) in out:
            raise ValueError(f"GPU list {value!r} names GPU {part} twice; use {_GPU_LIST_FORM}")
        out.append(int(part))
    return out


def parse_cuda_visible_devices(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES entries as CUDA reads them; None means every GPU is visible.

    Like CUDA, reading stops at the first entry that is not an index, ``GPU-…`` or ``MIG-…``
    (so ``"-1"`` or ``""`` hide every GPU).
    """
    if value is None:
        return None
    entries: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        entries.append(entry)
    return entries


def cuda_to_nvml_indices(
    cuda_visible: str | None, *, device_order: str | None = None, nvml: Any | None = None
) -> list[int]:
    """NVML indices of the GPUs a CUDA process sees, in CUDA ordinal order.

    ``cuda_visible`` and ``device_order`` are the values of CUDA_VISIBLE_DEVICES and
    CUDA_DEVICE_ORDER. NVML enumerates in PCI bus order; CUDA does too with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and by default (FASTEST_FIRST) orders by speed, which
    equals PCI order only when all GPUs are the same model. UUID entries map by UUID (a
    unique prefix is enough, as in CUDA); a MIG entry maps to its parent GPU, whose clocks
    and temperatures it shares.
    """
    nv = _resolve(nvml)
    count = int(nv.nvmlDeviceGetCount())
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [as_text(nv.nvmlDeviceGetUUID(h)) for h in handles]
    entries = parse_cuda_visible_devices(cuda_visible)
    if entries is None:
        entries = [str(i) for i in range(count)]
    where = f"CUDA_VISIBLE_DEVICES={cuda_visible!r}"
    out: list[int] = []
    for entry in entries:
        if entry.isdigit():
            _check_pci_order(nv, handles, device_order, where)
            if int(entry) >= count:
                raise GpuSelectionError(f"{where}: GPU {entry} does not exist (NVML sees {count})")
            index = int(entry)
        elif entry.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(matches) != 1:
                found = "matches no GPU" if not matches else "is ambiguous"
                raise GpuSelectionError(f"{where}: {entry!r} {found}; known UUIDs: {uuids}")
            index = matches[0]
        else:
            index = _mig_parent_index(nv, entry, where)
        if index in out:
            raise GpuSelectionError(f"{where} names GPU {index} twice")
        out.append(index)
    return out


def _check_pci_order(nv: Any, handles: list[Any], order: str | None, where: str) -> None:
    if order == "PCI_BUS_ID":
        return
    names = {as_text(nv.nvmlDeviceGetName(h)) for h in handles}
    if len(names) > 1:
        raise GpuSelectionError(
            f"{where} uses indices, but CUDA_DEVICE_ORDER={order or 'FASTEST_FIRST (default)'} "
            f"orders these different GPU models ({sorted(names)}) by speed, not as NVML does; "
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID or name GPUs by UUID"
        )


def _mig_parent_index(nv: Any, entry: str, where: str) -> int:
    try:
        mig = nv.nvmlDeviceGetHandleByUUID(entry)
        parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return int(nv.nvmlDeviceGetIndex(parent))
    except (nvml_error(nv), AttributeError) as exc:
        raise GpuSelectionError(f"{where}: MIG device {entry!r} not found by NVML: {exc}") from exc


def xdist_worker_index(worker_id: str | None) -> int:
    """pytest-xdist worker id (``"gw3"``) → 3; ``None`` or ``"master"`` (no xdist) → 0."""
    if worker_id is None or worker_id == "master":
        return 0
    if not (worker_id.startswith("gw") and worker_id[2:].isdigit()):
        raise ValueError(f"xdist worker id {worker_id!r} is not of the form 'gw<N>'")
    return int(worker_id[2:])


def assign_gpus(
    worker_index: int, n_workers: int, gpus: list[int], per_worker: int = 1
) -> list[int]:
    """The GPUs owned by one xdist worker: worker k gets ``gpus[k*per_worker:(k+1)*per_worker]``."""
    if per_worker < 1:
        raise GpuSelectionError(f"GPUs per worker is {per_worker}; it must be at least 1")
    if n_workers < 1 or not 0 <= worker_index < n_workers:
        raise GpuSelectionError(
            f"worker index {worker_index} is outside 0..{n_workers - 1} ({n_workers} workers)"
        )
    need = n_workers * per_worker
    if need > len(gpus):
        most = len(gpus) // per_worker
        raise GpuSelectionError(
            f"{n_workers} xdist workers x {per_worker} GPU(s) each need {need} GPUs, but only "
            f"{len(gpus)} are available ({gpus}); run with -n {most} or fewer, or give more GPUs"
        )
    return gpus[worker_index * per_worker : (worker_index + 1) * per_worker]


def cuda_visible_devices(gpus: Sequence[int | str]) -> str:
    """The CUDA_VISIBLE_DEVICES value for these GPU indices or UUIDs (use UUIDs when you can)."""
    items = [str(g).strip() for g in gpus]
    bad = [i for i in items if not (i.isdigit() or i.startswith(("GPU-", "MIG-")))]
    if not items or bad:
        raise GpuSelectionError(
            f"cannot build CUDA_VISIBLE_DEVICES from {list(gpus)!r}: "
            "give indices or GPU-/MIG- UUIDs, at least one"
        )
    return ",".join(items)


def port_range(worker_index: int, base: int = 30000, span: int = 100) -> range:
    """The ports worker ``worker_index`` may use: ``base + k*span`` up to the next worker's."""
    if worker_index < 0 or span < 1 or base < 1024:
        raise ValueError(
            f"port_range(worker_index={worker_index}, base={base}, span={span}): need "
            "worker_index >= 0, span >= 1 and base >= 1024"
        )
    start = base + worker_index * span
    if start + span - 1 > 65535:
        raise ValueError(
            f"ports {start}..{start + span - 1} for worker {worker_index} pass 65535; "
            "lower the base port or the span"
        )
    return range(start, start + span)
