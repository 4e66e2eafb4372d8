"""Unit tests of the GPU modules against a fake NVML (no GPU needed)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_nvml import FakeNvml

from pytest_specdec.gpu.hygiene import (
    ClockLock,
    ClockLockError,
    HygienePolicy,
    cooldown,
    idle_temperature,
    invalid_reasons,
    session_median_sm_clock,
)
from pytest_specdec.gpu.nvml import (
    LOCKED_SM_CLOCKS,
    GpuSelectionError,
    GpuUnavailable,
    NvmlLoader,
    assign_gpus,
    cuda_to_nvml_indices,
    cuda_visible_devices,
    fingerprints,
    parse_cuda_visible_devices,
    parse_gpu_list,
    port_range,
    probe,
    xdist_worker_index,
)
from pytest_specdec.gpu.pci import pci_locality
from pytest_specdec.gpu.readings import REASON_NAMES, Sample, decode_reasons
from pytest_specdec.gpu.telemetry import (
    RunTelemetry,
    TelemetrySampler,
    TelemetryWindow,
    summarize_device,
)

STEP_NS = 100_000_000  # 0.1 s between scripted samples


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float = 0.1) -> None:
        self.ns += int(seconds * 1e9)


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml(n_gpus=2)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def scripted_window(
    sampler: TelemetrySampler, clock: FakeClock, fake: FakeNvml, steps: list[dict[str, int]]
) -> TelemetryWindow:
    """Open a window (one sample), apply each step to GPU 0 and sample, then close it."""
    with sampler.window() as window:
        for step in steps:
            clock.advance()
            for key, value in step.items():
                setattr(fake.gpus[0], key, value)
            sampler.sample_once()
        clock.advance()
    return window


# ---------------------------------------------------------------------------- sampling


def test_sampler_records_a_scripted_run(fake: FakeNvml, clock: FakeClock) -> None:
    sampler = TelemetrySampler([0], nvml=fake, clock_ns=clock)
    fake.gpus[0].counters_ns = {74: 5_000_000_000}
    steps = [
        dict(temp_c=50 + k, sm_mhz=1455 + 5 * k, power_mw=680_000 + 1000 * k, util_gpu=99,
             energy_mj=1_000_000 + 69_000 * (k + 1), reasons=0x4, pstate=0)
        for k in range(10)
    ]  # fmt: skip
    # the power-cap counter runs for the whole run: 100 ms per 100 ms step
    steps = [dict(s, mem_temp_c=60) for s in steps]
    with sampler.window() as w:
        for k, step in enumerate(steps):
            clock.advance()
            fake.gpus[0].counters_ns = {74: 5_000_000_000 + STEP_NS * (k + 1)}
            for key, value in step.items():
                setattr(fake.gpus[0], key, value)
            sampler.sample_once()
        clock.advance()
    run = w.summary(output_tokens=256)
    (dev,) = run.devices

    assert dev.samples == 12  # window open + 10 steps + window close
    assert run.duration_s == pytest.approx(1.1)
    assert dev.gpu_temp_c is not None and dev.gpu_temp_c.min == 35 and dev.gpu_temp_c.max == 59
    assert dev.mem_temp_c is not None and dev.mem_temp_c.max == 60
    assert dev.sm_clock_mhz is not None and dev.sm_clock_mhz.max == 1500
    assert dev.power_w is not None and dev.power_w.max == pytest.approx(689.0)
    assert dev.energy_source == "counter"
    assert dev.energy_j == pytest.approx(690.0)  # 10 x 69 J from the counter
    assert dev.energy_per_token_j == pytest.approx(690.0 / 256)
    assert run.energy_per_token_j == pytest.approx(690.0 / 256)
    assert dev.util_gpu_median_pct == 99
    assert dev.pstates == (0,)
    assert dev.reasons_or == 0x5
    assert dev.reasons_seen == ("gpu_idle", "sw_power_cap")
    assert dev.reason_fractions == {"gpu_idle": pytest.approx(1 / 12), "sw_power_cap": 11 / 12}
    assert dev.reason_runs == ((0x1, 1), (0x4, 11))
    assert dev.throttle_ns["sw_power_cap"] == 10 * STEP_NS
    assert dev.throttle_fractions["sw_power_cap"] == pytest.approx(10 / 11)
    assert dev.lost_at_s is None and not run.telemetry_lost
    assert invalid_reasons(run, session_median_sm_clock=None) == []


def test_summary_is_json_ready_without_nan(fake: FakeNvml, clock: FakeClock) -> None:
    fake.gpus[0].unsupported |= {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"}
    w = scripted_window(TelemetrySampler([0, 1], nvml=fake, clock_ns=clock), clock, fake, [{}])
    record = w.summary(output_tokens=None).to_dict()
    text = json.dumps(record, allow_nan=False)  # raises on NaN or infinity
    assert record["devices"][0]["energy_j"] is None  # unmeasured: null, never zero
    assert record["energy_j"] is None and record["energy_per_token_j"] is None
    assert record["devices"][1]["energy_j"] is not None
    assert '"telemetry_lost": false' in text


def test_energy_integrates_power_when_the_counter_is_missing(
    fake: FakeNvml, clock: FakeClock
) -> None:
    fake.gpus[0].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    fake.gpus[0].power_mw = 500_000
    w = scripted_window(TelemetrySampler([0], nvml=fake, clock_ns=clock), clock, fake, [{}] * 9)
    dev = w.summary(output_tokens=100).devices[0]
    assert dev.energy_source == "integrated_power"
    assert dev.energy_j == pytest.approx(500.0)  # 500 W for 1.0 s
    assert dev.energy_per_token_j == pytest.approx(5.0)


def test_unsupported_readings_are_null_and_fallbacks_are_used(
    fake: FakeNvml, clock: FakeClock
) -> None:
    gpu = fake.gpus[0]
    gpu.unsupported |= {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetUtilizationRates"}
    gpu.fail["nvmlDeviceGetCurrentClocksEventReasons"] = FakeNvml.NVML_ERROR_FUNCTION_NOT_FOUND
    gpu.unsupported_fields |= {82, 269, 270, 271}  # no memory temp, no thermal counters
    gpu.violation_ns = {FakeNvml.NVML_PERF_POLICY_THERMAL: 7}
    sampler = TelemetrySampler([0], nvml=fake, clock_ns=clock)
    window = scripted_window(sampler, clock, fake, [{"temp_c": 44, "reasons": 0x4}])
    dev = window.summary().devices[0]
    assert dev.gpu_temp_c is not None and dev.gpu_temp_c.max == 44  # from nvmlDeviceGetTemperature
    assert dev.reasons_or == 0x5  # from the older ...ClocksThrottleReasons call
    assert dev.mem_temp_c is None and dev.util_gpu_median_pct is None
    assert set(dev.throttle_ns) == {"sw_power_cap", "sync_boost"} | {
        "violation_power",  # the older per-policy counters stand in for the thermal fields
        "violation_thermal",
    }


def test_binding_without_event_reasons_call_uses_throttle_reasons(clock: FakeClock) -> None:
    class OldBinding(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

    old = OldBinding()
    old.gpus[0].reasons = 0x40
    dev = scripted_window(TelemetrySampler([0], nvml=old, clock_ns=clock), clock, old, [])
    assert dev.summary().devices[0].reasons_seen == ("hw_thermal_slowdown",)


def test_implausible_throttle_counter_is_ignored_with_a_note(
    fake: FakeNvml, clock: FakeClock
) -> None:
    sampler = TelemetrySampler([0], nvml=fake, clock_ns=clock)
    dev = scripted_window(sampler, clock, fake, [{"counters_ns": {270: 10**12}}]).summary()
    (device,) = dev.devices
    assert "hw_thermal_slowdown" not in device.throttle_ns
    assert any("hw_thermal_slowdown" in n and "implausible" in n for n in device.notes)


def test_lost_telemetry_keeps_samples_and_says_when(fake: FakeNvml, clock: FakeClock) -> None:
    sampler = TelemetrySampler([0, 1], nvml=fake, clock_ns=clock)
    with sampler.window() as w:
        for _ in range(3):
            clock.advance()
            sampler.sample_once()
        fake.gpus[0].fail["nvmlDeviceGetPowerUsage"] = FakeNvml.NVML_ERROR_GPU_IS_LOST
        clock.advance()
        sampler.sample_once()  # GPU 0 fails here, 0.4 s into the run
        del fake.gpus[0].fail["nvmlDeviceGetPowerUsage"]
        for _ in range(2):
            clock.advance()
            sampler.sample_once()  # GPU 0 is not asked again; GPU 1 goes on
        clock.advance()
    run = w.summary(output_tokens=10)
    lost, healthy = run.devices
    assert run.telemetry_lost
    assert lost.samples == 4 and lost.lost_at_s == pytest.approx(0.4)
    assert lost.lost_reason is not None and "GPU is lost" in lost.lost_reason
    assert healthy.samples == 8 and healthy.lost_at_s is None
    assert run.to_dict()["devices"][0]["lost_at_s"] == pytest.approx(0.4)


def test_summary_needs_a_closed_window(fake: FakeNvml, clock: FakeClock) -> None:
    sampler = TelemetrySampler([0], nvml=fake, clock_ns=clock)
    with sampler.window() as w, pytest.raises(RuntimeError, match="after the with block"):
        w.summary()


def test_background_thread_samples_at_the_configured_rate(fake: FakeNvml) -> None:
    with TelemetrySampler([0], nvml=fake, hz=50) as sampler:
        with sampler.window() as w:
            time.sleep(0.5)
        dev = w.summary().devices[0]
    assert 15 <= dev.samples <= 30  # ~25 ticks + the two bracket samples
    assert sampler._thread is None


def test_sampler_rejects_a_bad_rate(fake: FakeNvml) -> None:
    with pytest.raises(ValueError, match=r"hz=0 is outside 0.1..1000"):
        TelemetrySampler([0], nvml=fake, hz=0)


def test_reason_decoding() -> None:
    assert decode_reasons(0) == []
    assert decode_reasons(0x1 | 0x4 | 0x200) == ["gpu_idle", "sw_power_cap", "0x200"]
    assert decode_reasons(0x1FF) == list(REASON_NAMES.values())
    assert REASON_NAMES[0x80] == "hw_power_brake_slowdown"


# ---------------------------------------------------------------------------- invalidation


def make_run(bits: list[int], sm_mhz: float = 1500.0, throttle: float = 0.0) -> RunTelemetry:
    samples = [
        Sample(t_ns=i * STEP_NS, sm_clock_mhz=sm_mhz, reasons=b, power_w=690.0)
        for i, b in enumerate(bits)
    ]
    dev = summarize_device(0, samples, start_ns=0)
    if throttle:
        dev = dataclasses.replace(dev, throttle_fractions={"hw_thermal_slowdown": throttle})
    return RunTelemetry("", 10.0, 100, (dev,), None, None, sm_mhz, sm_mhz)


def test_thermal_bits_in_two_percent_of_samples_invalidate() -> None:
    reasons = invalid_reasons(make_run([0x4] * 98 + [0x24] * 2), 1500.0)
    assert reasons == ["GPU 0: sw_thermal_slowdown in 2.0% of 100 samples (limit 1.0%)"]


def test_power_cap_in_every_sample_is_valid() -> None:
    assert invalid_reasons(make_run([0x4] * 100), 1500.0) == []


def test_one_percent_is_still_valid_and_each_bad_bit_counts() -> None:
    assert invalid_reasons(make_run([0x4] * 99 + [0x40]), 1500.0) == []
    for bit in (0x8, 0x40, 0x80):
        assert len(invalid_reasons(make_run([0x4] * 95 + [bit] * 5), 1500.0)) == 1


def test_clock_below_ninety_percent_of_session_median_invalidates() -> None:
    (reason,) = invalid_reasons(make_run([0x4] * 10, sm_mhz=1275.0), 1500.0)
    assert "85.0% of the session median 1500 MHz (limit 90%)" in reason
    assert invalid_reasons(make_run([0x4] * 10, sm_mhz=1350.0), 1500.0) == []


def test_throttle_counter_catches_events_between_samples() -> None:
    (reason,) = invalid_reasons(make_run([0x4] * 10, throttle=0.02), 1500.0)
    assert "hw_thermal_slowdown for 2.0% of the run" in reason


def test_policy_thresholds_are_validated() -> None:
    with pytest.raises(ValueError, match=r"min_clock_ratio = 1.5 is outside the valid range"):
        HygienePolicy(min_clock_ratio=1.5)
    with pytest.raises(ValueError, match="sw_power_cap"):
        HygienePolicy(invalidating_bits=0x4 | 0x40)
    loose = HygienePolicy(max_throttle_fraction=0.05)
    assert invalid_reasons(make_run([0x4] * 98 + [0x24] * 2), 1500.0, loose) == []


def test_session_median_clock() -> None:
    runs = [make_run([0x4], sm_mhz=m) for m in (1400.0, 1500.0, 1450.0)]
    assert session_median_sm_clock([*runs, None]) == 1450.0
    assert session_median_sm_clock([None]) is None


# ---------------------------------------------------------------------------- cooldown


class FakeTime:
    def __init__(self, fake: FakeNvml, temps: list[int]) -> None:
        self.now = 0.0
        self.fake = fake
        self.temps = iter(temps)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.fake.gpus[0].temp_c = next(self.temps, self.fake.gpus[0].temp_c)


def test_cooldown_waits_until_near_idle(fake: FakeNvml) -> None:
    fake.gpus[0].temp_c = 60
    t = FakeTime(fake, [50, 45, 39])
    result = cooldown([0], 35.0, clock=t.clock, sleep=t.sleep, nvml=fake)
    assert result.reached and result.waited_s == 3.0
    assert (result.start_temp_c, result.end_temp_c, result.target_temp_c) == (60.0, 39.0, 40.0)
    assert "no thermal slowdown bits" in result.reason


def test_cooldown_gives_up_at_the_cap(fake: FakeNvml) -> None:
    fake.gpus[0].temp_c = 70
    t = FakeTime(fake, [])
    result = cooldown([0], 35.0, cap_s=120.0, poll_s=7.0, clock=t.clock, sleep=t.sleep, nvml=fake)
    assert not result.reached and result.waited_s == 120.0
    assert result.reason == "still 70 °C > target 40 °C after 120 s"


def test_cooldown_waits_for_thermal_bits_to_clear(fake: FakeNvml) -> None:
    fake.gpus[1].reasons = 0x20
    t = FakeTime(fake, [])
    result = cooldown([0, 1], None, cap_s=3.0, clock=t.clock, sleep=t.sleep, nvml=fake)
    assert not result.reached and "thermal slowdown bits 0x20 still set" in result.reason
    assert idle_temperature([0, 1], nvml=fake) == 35.0


def test_cooldown_reports_an_nvml_failure(fake: FakeNvml) -> None:
    fake.gpus[0].fail["nvmlDeviceGetPowerUsage"] = FakeNvml.NVML_ERROR_GPU_IS_LOST
    t = FakeTime(fake, [])
    lost = cooldown([0], 35.0, clock=t.clock, sleep=t.sleep, nvml=fake)
    assert not lost.reached and lost.end_temp_c is None
    assert lost.reason == "NVML failed while waiting: GPU is lost"


# ---------------------------------------------------------------------------- clock lock


def test_clock_lock_resets_on_exception(fake: FakeNvml) -> None:
    with pytest.raises(KeyError), ClockLock([0, 1], 1500, nvml=fake) as lock:
        assert fake.gpus[0].locked_mhz == (1500, 1500)
        assert set(lock.state.values()) == {1500}
        assert fingerprints([0], nvml=fake)[0].locked_sm_clock_mhz == 1500
        raise KeyError("engine crashed")
    assert fake.calls == [("lock", 0), ("lock", 1), ("reset", 0), ("reset", 1)]
    assert all(g.locked_mhz is None for g in fake.gpus) and not LOCKED_SM_CLOCKS
    assert lock.reset() == [] and fake.calls.count(("reset", 0)) == 1  # idempotent


def test_clock_lock_without_root_says_so_and_undoes_partial_locks(fake: FakeNvml) -> None:
    fake.gpus[1].fail["nvmlDeviceSetGpuLockedClocks"] = FakeNvml.NVML_ERROR_NO_PERMISSION
    needs_root = pytest.raises(ClockLockError, match=r"clock lock needs root: .*GPU 1 at 1500 MHz")
    with needs_root, ClockLock([0, 1], 1500, nvml=fake):
        pytest.fail("the lock must not be entered")
    assert fake.calls == [("lock", 0), ("reset", 0)] and not LOCKED_SM_CLOCKS


def test_clock_lock_rejects_a_bad_clock(fake: FakeNvml) -> None:
    with pytest.raises(ValueError, match=r"sm_mhz=0 must be a positive whole MHz"):
        ClockLock([0], 0, nvml=fake)


# ---------------------------------------------------------------------------- selection


def test_workers_get_their_own_gpus() -> None:
    assert [assign_gpus(w, 4, [0, 1, 2, 3]) for w in range(4)] == [[0], [1], [2], [3]]
    assert assign_gpus(1, 2, [4, 5, 6, 7], per_worker=2) == [6, 7]
    with pytest.raises(GpuSelectionError, match=r"3 xdist workers .* only 2 .* -n 2 or fewer"):
        assign_gpus(0, 3, [0, 1])
    with pytest.raises(GpuSelectionError, match=r"outside 0\.\.1"):
        assign_gpus(2, 2, [0, 1])
    assert xdist_worker_index("gw3") == 3 and xdist_worker_index(None) == 0
    with pytest.raises(ValueError, match="'worker7' is not of the form 'gw<N>'"):
        xdist_worker_index("worker7")


def test_gpu_list_parsing() -> None:
    assert parse_gpu_list("0, 1,3") == [0, 1, 3]
    with pytest.raises(ValueError, match=r"GPU list '0,x': 'x' is not a GPU index; use comma"):
        parse_gpu_list("0,x")
    with pytest.raises(ValueError, match="names GPU 1 twice"):
        parse_gpu_list("1,1")
    with pytest.raises(ValueError, match="is empty"):
        parse_gpu_list(" ")


def test_cuda_visible_devices_map_to_nvml_indices(fake: FakeNvml) -> None:
    uuid1 = fake.gpus[1].uuid
    assert cuda_to_nvml_indices(None, nvml=fake) == [0, 1]
    assert cuda_to_nvml_indices("1,0", nvml=fake) == [1, 0]
    assert cuda_to_nvml_indices(uuid1[:12], nvml=fake) == [1]  # a unique prefix, as in CUDA
    assert cuda_to_nvml_indices(f"MIG-{uuid1[4:]}", nvml=fake) == [1]
    assert cuda_to_nvml_indices("-1", nvml=fake) == [] == cuda_to_nvml_indices("", nvml=fake)
    assert parse_cuda_visible_devices("0,bogus,1") == ["0"]  # CUDA stops at a bad entry
    with pytest.raises(GpuSelectionError, match="GPU 5 does not exist"):
        cuda_to_nvml_indices("5", nvml=fake)
    with pytest.raises(GpuSelectionError, match="is ambiguous"):
        cuda_to_nvml_indices("GPU-", nvml=fake)
    with pytest.raises(GpuSelectionError, match="MIG device 'MIG-nope' not found"):
        cuda_to_nvml_indices("MIG-nope", nvml=fake)


def test_index_order_needs_pci_order_on_mixed_gpus(fake: FakeNvml) -> None:
    fake.gpus[1].name = "NVIDIA L4"
    with pytest.raises(GpuSelectionError, match="set CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        cuda_to_nvml_indices("1", nvml=fake)
    assert cuda_to_nvml_indices("1", device_order="PCI_BUS_ID", nvml=fake) == [1]
    assert cuda_to_nvml_indices(fake.gpus[1].uuid, nvml=fake) == [1]


def test_cuda_visible_devices_value_and_port_ranges() -> None:
    assert cuda_visible_devices([0, "GPU-abc"]) == "0,GPU-abc"
    with pytest.raises(GpuSelectionError, match="cannot build CUDA_VISIBLE_DEVICES"):
        cuda_visible_devices([])
    assert port_range(0) == range(30000, 30100)
    assert port_range(3, base=40000, span=10) == range(40030, 40040)
    with pytest.raises(ValueError, match="pass 65535"):
        port_range(400)


def test_fingerprint_reads_identity_and_settings(fake: FakeNvml) -> None:
    fake.gpus[1].unsupported.add("nvmlDeviceGetEccMode")
    first, second = (f.to_dict() for f in fingerprints([0, 1], nvml=fake))
    assert first["name"] == "NVIDIA H200" and first["uuid"].startswith("GPU-")
    assert first["pci_bus_id"] == "00000000:18:00.0"
    assert first["driver_version"] == "570.86.15" and first["cuda_driver_version"] == "12.8"
    assert first["power_limit_w"] == 700.0 and first["memory_total_mib"] == 143_771
    assert first["ecc_enabled"] is True and second["ecc_enabled"] is None
    assert first["locked_sm_clock_mhz"] is None
    assert {"numa_node", "local_cpus"} <= set(first)  # sysfs's say, None on a machine without it


def test_the_gpus_numa_node_and_local_cpus_from_sysfs(tmp_path: Path) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:9a:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    (device / "local_cpulist").write_text("48-95,144-191\n")
    assert pci_locality("00000000:9A:00.0", tmp_path) == (1, "48-95,144-191")
    (device / "numa_node").write_text("-1\n")  # the platform gave no node (a VM, one socket)
    assert pci_locality("00000000:9A:00.0", tmp_path) == (None, "48-95,144-191")
    (device / "numa_node").write_text("x\n")
    (device / "local_cpulist").unlink()
    assert pci_locality("00000000:9A:00.0", tmp_path) == (None, None)
    assert pci_locality("00000000:18:00.0", tmp_path) == (None, None)  # no such device


# ---------------------------------------------------------------------------- no NVML


@pytest.fixture
def loaders() -> Iterator[list[NvmlLoader]]:
    made: list[NvmlLoader] = []
    yield made
    for loader in made:
        loader.shutdown()


def test_no_pynvml_module_is_reported_not_raised(loaders: list[NvmlLoader]) -> None:
    def missing() -> object:
        raise ImportError("No module named 'pynvml'")

    loaders.append(NvmlLoader(missing))
    available, reason = probe(loaders[0])
    assert not available and "install nvidia-ml-py" in reason
    with pytest.raises(GpuUnavailable, match="install nvidia-ml-py"):
        loaders[0].load()


def test_nvml_init_failure_and_no_devices(loaders: list[NvmlLoader]) -> None:
    no_driver = FakeNvml(init_error=9)
    loaders.append(NvmlLoader(lambda: no_driver))
    assert probe(loaders[0]) == (False, "NVML init failed: Driver Not Loaded")
    empty = FakeNvml(n_gpus=0)
    loaders.append(NvmlLoader(lambda: empty))
    assert probe(loaders[1]) == (False, "NVML initialised but reports no GPU devices")
    assert empty.shutdowns == 1


def test_nvml_is_initialised_once_and_shut_down(loaders: list[NvmlLoader]) -> None:
    fake = FakeNvml()
    calls: list[int] = []

    def importer() -> FakeNvml:
        calls.append(1)
        return fake

    loaders.append(NvmlLoader(importer))
    assert loaders[0].load() is fake and loaders[0].load() is fake
    assert probe(loaders[0]) == (True, "NVML sees 1 GPU(s), driver 570.86.15")
    assert fake.inits == 1 and len(calls) == 1
    loaders[0].shutdown()
    loaders[0].shutdown()
    assert fake.shutdowns == 1


def test_unchanged_energy_counter_falls_back_to_integrated_power() -> None:
    """A short run can see no counter update while the GPU draws 150 W: never report 0 J."""
    from pytest_specdec.gpu.readings import Sample
    from pytest_specdec.gpu.telemetry import summarize_device

    samples = [Sample(t_ns=k * 100_000_000, power_w=150.0, energy_mj=5_000) for k in range(5)]
    dev = summarize_device(0, samples, start_ns=0, output_tokens=100)
    assert dev.energy_source == "integrated_power"
    assert dev.energy_j == pytest.approx(60.0)  # 150 W over 0.4 s
    assert dev.energy_per_token_j == pytest.approx(0.6)
