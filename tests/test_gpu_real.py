"""The GPU modules against a real NVIDIA GPU through NVML; skipped (with the reason) elsewhere.

The load test needs PyTorch with CUDA. The clock-lock test changes GPU clocks, so it runs
only as root and when SPECDEC_TEST_CLOCK_LOCK=1 says that is wanted.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any

import pytest

from pytest_specdec.gpu.hygiene import (
    ClockLock,
    ClockLockError,
    cooldown,
    idle_temperature,
    invalid_reasons,
)
from pytest_specdec.gpu.nvml import (
    LOCKED_SM_CLOCKS,
    cuda_to_nvml_indices,
    fingerprints,
)
from pytest_specdec.gpu.telemetry import DeviceTelemetry, TelemetrySampler

pytestmark = pytest.mark.gpu

LOAD_S = 10.0


@pytest.fixture(scope="module")
def torch_cuda(nvml: Any) -> tuple[Any, int]:
    """PyTorch and the NVML index of the GPU it calls cuda:0."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a heavy import may warn; not what is tested here
            import torch
    except ImportError as exc:
        pytest.skip(f"the load test needs PyTorch with CUDA: {exc}")
    if not torch.cuda.is_available():
        pytest.skip(f"the load test needs PyTorch with CUDA; torch {torch.__version__} has none")
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    order = os.environ.get("CUDA_DEVICE_ORDER")
    index = cuda_to_nvml_indices(cuda_visible, device_order=order, nvml=nvml)[0]
    torch_uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    if torch_uuid is not None:  # the mapping must agree with CUDA's own answer
        assert fingerprints([index], nvml=nvml)[0].uuid == f"GPU-{torch_uuid}"
    return torch, index


def report(label: str, dev: DeviceTelemetry) -> str:
    keys = ("samples", "gpu_temp_c", "mem_temp_c", "sm_clock_mhz", "power_w", "energy_j")
    more = ("reasons_seen", "reason_fractions", "throttle_fractions", "pstates", "notes")
    record = {k: getattr(dev, k) for k in (*keys, *more)}
    return f"{label}: " + json.dumps(record, default=lambda o: o.__dict__)


def test_fingerprints_of_every_gpu(nvml: Any) -> None:
    found = fingerprints(range(int(nvml.nvmlDeviceGetCount())), nvml=nvml)
    for fp in found:
        print(fp.to_dict())
        assert fp.name and fp.uuid.startswith("GPU-") and ":" in fp.pci_bus_id
        assert fp.driver_version and fp.memory_total_mib and fp.memory_total_mib > 1024
        assert fp.power_limit_w is not None and fp.power_limit_w > 0
        assert cuda_to_nvml_indices(fp.uuid, nvml=nvml) == [fp.index]


def test_idle_window_reads_every_basic_value(nvml: Any) -> None:
    with TelemetrySampler([0], nvml=nvml) as sampler, sampler.window() as w:
        time.sleep(1.0)
    run = w.summary(output_tokens=None)
    (dev,) = run.devices
    print(report("idle", dev))
    assert 8 <= dev.samples <= 14  # 10 Hz for 1 s plus the two bracket samples
    assert dev.gpu_temp_c is not None and 0 < dev.gpu_temp_c.median < 110
    assert dev.sm_clock_mhz is not None and dev.power_w is not None and dev.power_w.min > 0
    assert dev.reason_samples == dev.samples and not run.telemetry_lost
    json.dumps(run.to_dict(), allow_nan=False)


def matmul_load(torch: Any, seconds: float) -> int:
    """Keep the GPU busy with bf16 matrix products for ``seconds``; returns how many ran."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    done = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a = (a @ b) * 1e-3  # rescale so values stay finite
        torch.cuda.synchronize()
        done += 20
    return done


def test_load_is_visible_in_telemetry(torch_cuda: tuple[Any, int], nvml: Any) -> None:
    torch, index = torch_cuda
    with TelemetrySampler([index], nvml=nvml) as sampler:
        with sampler.window() as idle_w:
            time.sleep(2.0)
        with sampler.window() as load_w:
            products = matmul_load(torch, LOAD_S)
    idle = idle_w.summary().devices[0]
    run = load_w.summary(output_tokens=products)
    load = run.devices[0]
    print(report("idle", idle))
    print(report("load", load), "invalid:", invalid_reasons(run, None), "products:", products)

    assert idle.sm_clock_mhz and load.sm_clock_mhz and idle.power_w and load.power_w
    assert load.sm_clock_mhz.max > idle.sm_clock_mhz.median
    assert load.power_w.max > idle.power_w.median
    assert load.reason_samples >= 0.8 * LOAD_S * sampler.hz  # reason bits read in every tick
    assert load.reason_runs  # the raw bits are kept
    assert idle.gpu_temp_c is not None and load.gpu_temp_c is not None
    assert load.gpu_temp_c.max >= idle.gpu_temp_c.min
    assert load.energy_j is not None and load.energy_j > 0 and run.energy_per_token_j
    assert load.util_gpu_median_pct is not None and load.util_gpu_median_pct > 50
    assert load.lost_at_s is None
    for name, share in load.throttle_fractions.items():
        assert 0 <= share <= 1, name
    counted = load.throttle_fractions.get("sw_power_cap")
    sampled = load.reason_fractions.get("sw_power_cap", 0.0)
    if counted is not None and sampled > 0.5:  # the counter (ns) agrees with the sampled bits
        assert abs(counted - sampled) < 0.25, (counted, sampled)
    json.dumps(run.to_dict(), allow_nan=False)


def test_cooldown_right_after_measuring_idle(nvml: Any) -> None:
    idle = idle_temperature([0], nvml=nvml)
    result = cooldown([0], idle, cap_s=10.0, poll_s=0.5, nvml=nvml)
    print(result.to_dict())
    assert idle is not None and result.start_temp_c is not None
    assert result.reached, result.reason


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="runs as root: the lock would succeed"
)
def test_clock_lock_without_root_is_refused_clearly(nvml: Any) -> None:
    with (
        pytest.raises(ClockLockError, match="clock lock needs root"),
        ClockLock([0], 1410, nvml=nvml),
    ):
        pytest.fail("a non-root process locked the clocks")
    assert not LOCKED_SM_CLOCKS


@pytest.mark.skipif(
    os.environ.get("SPECDEC_TEST_CLOCK_LOCK") != "1"
    or not hasattr(os, "geteuid")
    or os.geteuid() != 0,
    reason="changes GPU clocks: run as root with SPECDEC_TEST_CLOCK_LOCK=1",
)
def test_clock_lock_sets_and_always_resets(nvml: Any) -> None:
    mhz = min(1410, fingerprints([0], nvml=nvml)[0].max_sm_clock_mhz or 1410)
    with pytest.raises(RuntimeError, match="planned"), ClockLock([0], mhz, nvml=nvml) as lock:
        assert list(lock.state.values()) == [mhz]
        assert fingerprints([0], nvml=nvml)[0].locked_sm_clock_mhz == mhz
        raise RuntimeError("planned failure inside the lock")
    assert not LOCKED_SM_CLOCKS and fingerprints([0], nvml=nvml)[0].locked_sm_clock_mhz is None
