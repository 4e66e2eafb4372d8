"""GPU telemetry: a background NVML sampler (readings from readings.py) and the per-run
summary.

Usage around one measured run::

    with TelemetrySampler([0]) as sampler:          # starts a 10 Hz thread
        with sampler.window() as w:
            run_the_requests()
        telemetry = w.summary(output_tokens=n_tokens)   # RunTelemetry
        record["gpu"] = telemetry.to_dict()

The sampler reads only while a window is open, and reads once when a window opens and
once when it closes, so even a short run has two samples. Timestamps come from
``time.perf_counter_ns``; wall-clock time is kept for display only. If NVML fails for a
device mid-run, its samples so far are kept, sampling of that device stops, and the
summary says when and why (``lost_at_s``, ``lost_reason``); the run itself goes on.
"""

from __future__ import annotations

import datetime as dt
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from pytest_specdec.gpu.nvml import load_nvml
from pytest_specdec.gpu.readings import DeviceReader, Sample, decode_reasons, reason_name


@dataclass(frozen=True)
class Spread:
    """Minimum, median, mean and maximum of one reading over a run."""

    min: float
    median: float
    mean: float
    max: float


def spread(values: Sequence[float | None]) -> Spread | None:
    """Spread of the known values; None when no sample had the reading."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return Spread(min(known), statistics.median(known), statistics.fmean(known), max(known))


@dataclass(frozen=True)
class DeviceTelemetry:
    """Telemetry of one GPU over one run. None: not measured (never a stand-in zero)."""

    index: int
    samples: int
    span_s: float | None
    gpu_temp_c: Spread | None
    mem_temp_c: Spread | None
    sm_clock_mhz: Spread | None
    mem_clock_mhz: Spread | None
    power_w: Spread | None
    energy_j: float | None
    energy_source: str | None  # "counter" or "integrated_power"
    energy_per_token_j: float | None
    util_gpu_median_pct: float | None
    util_mem_median_pct: float | None
    pstates: tuple[int, ...]
    reasons_or: int | None
    reasons_seen: tuple[str, ...]
    reason_samples: int
    reason_fractions: dict[str, float]  # share of samples with the bit set, by reason name
    reason_runs: tuple[tuple[int, int], ...]  # raw bits in sample order, as (bits, repeats)
    throttle_ns: dict[str, int]  # cumulative throttle-time counter deltas
    throttle_fractions: dict[str, float]  # those deltas as a share of the time they span
    lost_at_s: float | None
    lost_reason: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunTelemetry:
    """Telemetry of one measured run over every sampled GPU."""

    started_wall: str  # ISO-8601 local time, for display only
    duration_s: float
    output_tokens: int | None
    devices: tuple[DeviceTelemetry, ...]
    energy_j: float | None
    energy_per_token_j: float | None
    median_sm_clock_mhz: float | None  # over the samples of all devices
    mean_sm_clock_mhz: float | None

    @property
    def telemetry_lost(self) -> bool:
        return any(d.lost_at_s is not None for d in self.devices)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["telemetry_lost"] = self.telemetry_lost
        return out


def _energy(samples: Sequence[Sample]) -> tuple[float | None, str | None]:
    counted = [s.energy_mj for s in samples if s.energy_mj is not None]
    # The driver updates the energy counter coarsely: a short run can see no change at all
    # while the GPU draws 150 W. A zero delta is "not measured", never 0 J.
    if len(counted) >= 2 and counted[-1] > counted[0]:
        return (counted[-1] - counted[0]) / 1000.0, "counter"
    powered = [(s.t_ns, s.power_w) for s in samples if s.power_w is not None]
    if len(powered) < 2:
        return None, None
    joules = sum(
        (t1 - t0) / 1e9 * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(powered)
    )
    return joules, "integrated_power"


def _per_token(joules: float | None, tokens: int | None) -> float | None:
    return None if joules is None or tokens is None or tokens <= 0 else joules / tokens


def _reasons(
    samples: Sequence[Sample],
) -> tuple[int | None, int, dict[str, float], list[list[int]]]:
    bits = [s.reasons for s in samples if s.reasons is not None]
    union = 0
    runs: list[list[int]] = []
    for b in bits:
        union |= b
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    fractions = {
        reason_name(1 << i): sum(1 for b in bits if b >> i & 1) / len(bits)
        for i in range(union.bit_length())
        if union >> i & 1
    }
    return (union if bits else None), len(bits), fractions, runs


def _counters(samples: Sequence[Sample]) -> tuple[dict[str, int], dict[str, float], list[str]]:
    deltas: dict[str, int] = {}
    fractions: dict[str, float] = {}
    notes: list[str] = []
    for name in sorted({k for s in samples for k in s.counters_ns}):
        seen = [(s.t_ns, s.counters_ns[name]) for s in samples if name in s.counters_ns]
        (t0, c0), (t1, c1) = seen[0], seen[-1]
        if t1 <= t0:
            continue
        if not 0 <= c1 - c0 <= (t1 - t0) * 1.05:
            notes.append(
                f"throttle counter {name} moved {c1 - c0} ns in {t1 - t0} ns: implausible, ignored"
            )
            continue
        deltas[name] = c1 - c0
        fractions[name] = min(1.0, (c1 - c0) / (t1 - t0))
    return deltas, fractions, notes


def summarize_device(
    index: int,
    samples: Sequence[Sample],
    *,
    start_ns: int,
    output_tokens: int | None = None,
    lost: tuple[int, str] | None = None,
) -> DeviceTelemetry:
    """Summarise one device's samples of a window that opened at ``start_ns``."""
    energy_j, source = _energy(samples)
    union, n_reasons, fractions, runs = _reasons(samples)
    deltas, throttle, notes = _counters(samples)
    gpu_util = spread([s.util_gpu_pct for s in samples])
    mem_util = spread([s.util_mem_pct for s in samples])
    return DeviceTelemetry(
        index=index,
        samples=len(samples),
        span_s=(samples[-1].t_ns - samples[0].t_ns) / 1e9 if samples else None,
        gpu_temp_c=spread([s.gpu_temp_c for s in samples]),
        mem_temp_c=spread([s.mem_temp_c for s in samples]),
        sm_clock_mhz=spread([s.sm_clock_mhz for s in samples]),
        mem_clock_mhz=spread([s.mem_clock_mhz for s in samples]),
        power_w=spread([s.power_w for s in samples]),
        energy_j=energy_j,
        energy_source=source,
        energy_per_token_j=_per_token(energy_j, output_tokens),
        util_gpu_median_pct=None if gpu_util is None else gpu_util.median,
        util_mem_median_pct=None if mem_util is None else mem_util.median,
        pstates=tuple(sorted({s.pstate for s in samples if s.pstate is not None})),
        reasons_or=union,
        reasons_seen=tuple(decode_reasons(union or 0)),
        reason_samples=n_reasons,
        reason_fractions=fractions,
        reason_runs=tuple((b, n) for b, n in runs),
        throttle_ns=deltas,
        throttle_fractions=throttle,
        lost_at_s=None if lost is None else max(0, lost[0] - start_ns) / 1e9,
        lost_reason=None if lost is None else lost[1],
        notes=tuple(notes),
    )


class TelemetryWindow:
    """The samples of one run; :meth:`summary` turns them into a :class:`RunTelemetry`."""

    def __init__(self, indices: Sequence[int], start_ns: int) -> None:
        self.start_ns = start_ns
        self.started_wall = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        self.end_ns: int | None = None
        self.samples: dict[int, list[Sample]] = {i: [] for i in indices}
        self.lost: dict[int, tuple[int, str]] = {}

    def summary(self, output_tokens: int | None = None) -> RunTelemetry:
        """Summarise the closed window; ``output_tokens`` gives energy per token (else None)."""
        if self.end_ns is None:
            raise RuntimeError("summary() needs a closed window: call it after the with block")
        devices = tuple(
            summarize_device(
                i, s, start_ns=self.start_ns, output_tokens=output_tokens, lost=self.lost.get(i)
            )
            for i, s in self.samples.items()
        )
        energies = [d.energy_j for d in devices]
        total = None if None in energies or not energies else sum(e or 0.0 for e in energies)
        clocks = spread([s.sm_clock_mhz for ss in self.samples.values() for s in ss])
        return RunTelemetry(
            started_wall=self.started_wall,
            duration_s=(self.end_ns - self.start_ns) / 1e9,
            output_tokens=output_tokens,
            devices=devices,
            energy_j=total,
            energy_per_token_j=_per_token(total, output_tokens),
            median_sm_clock_mhz=None if clocks is None else clocks.median,
            mean_sm_clock_mhz=None if clocks is None else clocks.mean,
        )


class TelemetrySampler:
    """Samples the given GPUs (NVML indices) at ``hz`` while a window is open."""

    def __init__(
        self,
        devices: Sequence[int],
        *,
        nvml: Any | None = None,
        hz: float = 10.0,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if not 0.1 <= hz <= 1000:
            raise ValueError(f"telemetry rate hz={hz!r} is outside 0.1..1000 samples per second")
        nv = load_nvml() if nvml is None else nvml
        self.hz = hz
        self._clock_ns = clock_ns
        self._readers = [DeviceReader(nv, i) for i in devices]
        self._lost: dict[int, tuple[int, str]] = {}
        self._windows: list[TelemetryWindow] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> TelemetrySampler:
        """Start the background thread (idempotent)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="specdec-gpu", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        period = 1e9 / self.hz
        due = time.perf_counter_ns() + period
        while not self._stop.wait(max(0.0, (due - time.perf_counter_ns()) / 1e9)):
            self.sample_once()
            due = max(due + period, time.perf_counter_ns())

    def sample_once(self) -> None:
        """Read every device that is still answering into every open window. Never raises."""
        with self._lock:
            if not self._windows:
                return
            for reader in self._readers:
                if reader.index in self._lost:
                    continue
                t_ns = self._clock_ns()
                try:
                    sample = reader.read(t_ns)
                except Exception as exc:  # any failure: keep what we have, stop this device
                    self._lost[reader.index] = (t_ns, f"{type(exc).__name__}: {exc}")
                    continue
                for window in self._windows:
                    window.samples[reader.index].append(sample)

    @contextmanager
    def window(self) -> Iterator[TelemetryWindow]:
        """Collect samples for the duration of the ``with`` block (one measured run)."""
        w = TelemetryWindow([r.index for r in self._readers], self._clock_ns())
        with self._lock:
            self._windows.append(w)
        self.sample_once()
        try:
            yield w
        finally:
            self.sample_once()
            with self._lock:
                self._windows.remove(w)
                w.end_ns = self._clock_ns()
                w.lost = dict(self._lost)
