"""GPU hygiene inside the runner, against a fake NVML and a MockTransport server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fake_nvml import FakeNvml

import pytest_specdec.gpu.nvml as gpu_module
from pytest_specdec.core.configs import Registry, preset_configs
from pytest_specdec.core.suitefile import SuiteSettings
from pytest_specdec.core.workloads import load_workload
from pytest_specdec.driver.runner import Runner, RunSettings
from pytest_specdec.gpu.monitor import GpuMonitor, GpuRequired, GpuSettings
from pytest_specdec.gpu.nvml import NvmlLoader
from pytest_specdec.report.summary import summarize
from pytest_specdec.report.table import table_rows

HW_THERMAL = 0x40


def _chat_stream(tokens: int) -> bytes:
    events = [{"choices": [{"delta": {"content": "tok "}}]} for _ in range(tokens)]
    events.append({"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 9}})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return body.encode()


def _server(on_chat: Callable[[int], None]) -> httpx.MockTransport:
    count = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if request.url.path in ("/metrics", "/v1/models"):
            return httpx.Response(404)
        count[0] += 1
        on_chat(count[0])
        return httpx.Response(200, content=_chat_stream(8))

    return httpx.MockTransport(handler)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    nvml = FakeNvml(n_gpus=1)
    monkeypatch.setattr(gpu_module, "_DEFAULT_LOADER", NvmlLoader(lambda: nvml))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return nvml


def _runner(
    tmp_path: Path, transport: httpx.MockTransport, gpu: GpuMonitor, runs: int = 3
) -> Runner:
    options = RunSettings(
        server_url="http://test", engine="llamacpp", runs=runs, warmup=False,
        results_path=tmp_path / "r.json", config_names=("baseline",),
    )  # fmt: skip
    registry = Registry(preset_configs())
    return Runner(options, registry, SuiteSettings(), load_workload("seed"), transport, gpu=gpu)


def test_thermal_throttled_run_is_marked_invalid_and_rerun(tmp_path: Path, fake: FakeNvml) -> None:
    dev = fake.gpus[0]

    def on_chat(n: int) -> None:  # the second request runs while the GPU thermally throttles
        dev.sm_mhz, dev.power_mw, dev.temp_c = 1980, 650_000, 56
        dev.reasons = HW_THERMAL if n == 2 else 0x4

    gpu = GpuMonitor(GpuSettings(cooldown=False, hz=50), None, 1)
    runner = _runner(tmp_path, _server(on_chat), gpu)
    try:
        server = runner.boot(runner.configs[0])
        runs = runner.measure(server, runner.workload.prompts[0])
    finally:
        runner.close()
    # The throttle seen during request 2 is still set when run 3's window opens, so runs 2
    # and 3 are both invalid; both are rerun, and three valid runs remain.
    assert [bool(r.invalid) for r in runs] == [False, True, True, False, False]
    assert runs[1].invalid and "hw_thermal_slowdown" in runs[1].invalid[0]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["gpu"]["devices"][0]["name"] == "NVIDIA H200"
    tele = data["configs"][0]["runs"][0]["gpu"]
    device = tele["devices"][0]
    assert device["gpu_temp_c"]["max"] == 56 and device["sm_clock_mhz"]["max"] == 1980
    assert "sw_power_cap" in device["reasons_seen"]  # power capping is recorded, not invalid
    assert data["configs"][0]["runs"][0]["invalid"] is None
    cell = summarize([r for r in runs if r.phase == "measure"])
    assert (cell.n, cell.invalid, cell.failed) == (3, 2, 0)
    assert table_rows([runner.records[runner.configs[0].name]], [runs[0].prompt])[1][1].endswith(
        " (2 invalid)"
    )


def test_reruns_are_bounded(tmp_path: Path, fake: FakeNvml) -> None:
    def on_chat(n: int) -> None:
        fake.gpus[0].reasons = HW_THERMAL

    gpu = GpuMonitor(GpuSettings(cooldown=False, hz=50), None, 1)
    runner = _runner(tmp_path, _server(on_chat), gpu, runs=2)
    try:
        runs = runner.measure(runner.boot(runner.configs[0]), runner.workload.prompts[0])
    finally:
        runner.close()
    assert len(runs) == 2 + 2  # at most max_reruns (2) extra runs, then the record stands
    assert all(r.invalid for r in runs)
    cell = summarize([r for r in runs if r.phase == "measure"])
    assert (cell.n, cell.invalid, cell.failed, cell.mean) == (0, 4, 0, None)
    assert table_rows([runner.records[runner.configs[0].name]], [runs[0].prompt])[1][1] == (
        "(4 invalid)"
    )


def test_engine_gets_this_workers_gpu_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_two = FakeNvml(n_gpus=2)
    monkeypatch.setattr(gpu_module, "_DEFAULT_LOADER", NvmlLoader(lambda: fake_two))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    session = GpuMonitor(GpuSettings(cooldown=False), "gw1", 2)
    try:
        assert session.devices == [1]
        assert session.engine_env() == {
            "CUDA_VISIBLE_DEVICES": fake_two.gpus[1].uuid or "GPU-1"
        } or (session.engine_env()["CUDA_VISIBLE_DEVICES"].startswith("GPU-"))
    finally:
        session.close()


def test_no_gpu_means_null_telemetry_not_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_module, "_DEFAULT_LOADER", NvmlLoader(lambda: FakeNvml(init_error=9)))
    gpu = GpuMonitor(GpuSettings(), None, 1)
    runner = _runner(tmp_path, _server(lambda n: None), gpu, runs=1)
    try:
        runs = runner.measure(runner.boot(runner.configs[0]), runner.workload.prompts[0])
    finally:
        runner.close()
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["gpu"] is None and runs[0].gpu is None and runs[0].tok_per_s
    assert data["notes"] == [f"no GPU telemetry: {gpu.reason}"]
    with pytest.raises(GpuRequired, match="--specdec-require-gpu: no usable NVIDIA GPU"):
        GpuMonitor(GpuSettings(require=True), None, 1)
