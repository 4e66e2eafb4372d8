"""The Docker launcher: settings and container specs without a daemon, and real containers.

The ``docker``-marked tests start a daemon with ``scripts/start-dockerd``, build the CPU
llama.cpp image with ``scripts/build-engine-image`` and boot ``llama-server`` in a container
with the real model mounted read-only. Where no daemon can start on the machine they are
skipped with the reason (also under CI: that is a property of the machine, not a missing
setup step); a missing engine, model or SDK fails under CI.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests_support import missing

from pytest_specdec.engines import container
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.engines.container import (
    LABEL,
    SESSION_LABEL,
    ContainerProcess,
    DockerLaunchError,
    DockerSettings,
    container_config,
    device_requests,
    start_container,
    stop_container,
)
from pytest_specdec.engines.launch import LaunchError, free_port, wait_ready

REPO = Path(__file__).resolve().parent.parent
SDK_FIX = "pip install 'pytest-specdec[docker]'"


def _sdk() -> Any:
    try:
        import docker
    except ImportError:
        missing("the docker SDK is not installed", SDK_FIX)
    return docker


def _spec(port: int, *extra: str) -> LaunchSpec:
    argv = ["llama-server", "--host", "127.0.0.1", "--port", str(port), *extra]
    return LaunchSpec(argv=argv, env={"LLAMA_ARG_THREADS": "1"})


# --- without a daemon ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"network": "overlay"},
            "network mode 'overlay' is not supported: use one of bridge, host",
        ),
        ({"shm_size": "lots"}, "shm_size 'lots' is not a size"),
        ({"volumes": {"models": "/models"}}, "'models' is not absolute; give absolute host and"),
        ({"volumes": {"/models": "models"}}, "'models' is not absolute; give absolute host and"),
        ({"gpus": []}, "give device ids such as ['0', '1'], or ['all']"),
        ({"image": " "}, "docker image is empty"),
    ],
)
def test_settings_validation_names_value_and_fix(kwargs: dict[str, Any], expected: str) -> None:
    fields: dict[str, Any] = {"image": "img:1", **kwargs}
    with pytest.raises(DockerLaunchError) as info:
        DockerSettings(**fields)
    assert expected in str(info.value)
    assert isinstance(info.value, LaunchError)  # the runner's boot error handling catches it


def test_device_request_for_gpu_ids() -> None:
    docker = _sdk()
    (request,) = device_requests(["0"])
    assert isinstance(request, docker.types.DeviceRequest)
    assert request["DeviceIDs"] == ["0"]
    assert request["Capabilities"] == [["gpu"]]
    assert request["Driver"] == "" and request["Count"] == 0
    (every,) = device_requests(["all"])
    assert every["Count"] == -1 and every["DeviceIDs"] == []
    assert device_requests(None) == []


def test_bridge_config_publishes_on_loopback_only() -> None:
    _sdk()
    settings = DockerSettings(
        image="img:1",
        gpus=["1"],
        volumes={"/data/models": "/models"},
        extra_env={"HF_HOME": "/hf", "LLAMA_ARG_THREADS": "8"},
    )
    config = container_config(_spec(8123), settings, "127.0.0.1", 8123, "specdec-x")
    assert config["ports"] == {"8123/tcp": ("127.0.0.1", 8123)}
    assert config["network_mode"] == "bridge"
    # inside its own network namespace the engine listens on the container's interfaces
    assert config["command"] == ["llama-server", "--host", "0.0.0.0", "--port", "8123"]
    assert config["environment"] == {"HF_HOME": "/hf", "LLAMA_ARG_THREADS": "1"}  # spec wins
    assert config["volumes"] == {"/data/models": {"bind": "/models", "mode": "ro"}}
    assert config["labels"] == {LABEL: "1", SESSION_LABEL: str(os.getpid())}
    assert config["shm_size"] == "16g" and config["init"] is True
    assert config["device_requests"][0]["DeviceIDs"] == ["1"]


def test_host_network_publishes_nothing_and_keeps_argv() -> None:
    settings = DockerSettings(image="img:1", network="host")
    config = container_config(_spec(8123), settings, "127.0.0.1", 8123, "specdec-x")
    assert "ports" not in config
    assert config["command"] == _spec(8123).argv
    assert config["device_requests"] == []


def test_worker_gpu_pin_becomes_the_device_request() -> None:
    _sdk()
    spec = LaunchSpec(argv=["python3", "-m", "sglang.launch_server"], env={})
    pinned = LaunchSpec(argv=spec.argv, env={"CUDA_VISIBLE_DEVICES": "2,3", "X": "1"})
    config = container_config(pinned, DockerSettings(image="img:1"), "127.0.0.1", 1, "x")
    assert config["device_requests"][0]["DeviceIDs"] == ["2", "3"]
    assert config["environment"] == {"X": "1"}  # inside, the two GPUs are numbered 0 and 1
    explicit = DockerSettings(image="img:1", gpus=["5"])
    config = container_config(pinned, explicit, "127.0.0.1", 1, "x")
    assert config["device_requests"][0]["DeviceIDs"] == ["5"]
    assert "CUDA_VISIBLE_DEVICES" not in config["environment"]
    none = LaunchSpec(argv=spec.argv, env={"CUDA_VISIBLE_DEVICES": ""})
    config = container_config(none, DockerSettings(image="img:1"), "127.0.0.1", 1, "x")
    assert config["device_requests"] == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.org"])
def test_publishing_beyond_loopback_is_refused(host: str) -> None:
    with pytest.raises(DockerLaunchError) as info:
        container_config(_spec(8123), DockerSettings(image="img:1"), host, 8123, "x")
    assert f"host {host!r}" in str(info.value)
    assert "loopback address only" in str(info.value)
    assert "give the run a loopback host such as 127.0.0.1" in str(info.value)


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)
    with pytest.raises(DockerLaunchError, match=r"pip install 'pytest-specdec\[docker\]'"):
        device_requests(["0"])


def test_unreachable_daemon_says_how_to_start_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _sdk()
    monkeypatch.setattr(container, "_CLIENT", [])
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(DockerLaunchError) as info:
        container.docker_client()
    message = str(info.value)
    assert f"docker daemon not reachable at unix://{tmp_path}/no-daemon.sock" in message
    assert "./scripts/start-dockerd" in message


def test_socket_without_a_daemon_is_refused_without_leaking(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _sdk()
    monkeypatch.setattr(container, "_CLIENT", [])
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(path))  # a socket file nobody listens on: connect is refused
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    with pytest.raises(DockerLaunchError) as info:
        container.docker_client()
    gc.collect()  # a leaked socket would be reported against this test
    assert f"docker daemon not reachable at unix://{path}: Connection refused" in str(info.value)


# --- with a daemon ---------------------------------------------------------------------------


def _script(name: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "scripts" / name)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture(scope="session")
def docker_client() -> Any:
    _sdk()
    try:
        done = _script("start-dockerd", 300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no docker daemon on this machine: scripts/start-dockerd: {exc}")
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        pytest.skip(f"no docker daemon on this machine: scripts/start-dockerd: {reason[0]}")
    return container.docker_client()


@pytest.fixture(scope="session")
def engine_image(docker_client: Any, llama_server: Path, models: dict[str, Path]) -> str:
    done = _script("build-engine-image", 300)
    assert done.returncode == 0, f"scripts/build-engine-image failed:\n{done.stderr}"
    image = done.stdout.strip().splitlines()[-1]
    assert image.startswith("pytest-specdec/llamacpp-cpu:")
    return image


@pytest.fixture
def containers(docker_client: Any) -> Iterator[Callable[[], list[Any]]]:
    """This session's containers; none may be left when a test ends."""

    def ours() -> list[Any]:
        label = f"{SESSION_LABEL}={os.getpid()}"
        return list(docker_client.containers.list(all=True, filters={"label": label}))

    yield ours
    assert ours() == []


def _healthy(url: str) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            resp = httpx.get(f"{url}/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200 and resp.json().get("status") == "ok"

    return probe


def test_a_container_mounts_model_files_folders_and_model_folders(tmp_path: Path) -> None:
    """A GGUF file's folder, and a model folder itself (SGLang and vLLM are given one), are
    mounted at their own paths; a hub id mounts nothing."""
    from pytest_specdec.driver.boot import model_volumes

    gguf = tmp_path / "ggufs" / "target.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    folder = tmp_path / "drafter-hf"
    folder.mkdir()
    assert model_volumes((str(gguf), str(folder))) == {
        str(gguf.parent): str(gguf.parent), str(folder): str(folder)}  # fmt: skip
    assert model_volumes(("Qwen/Qwen3-8B", None)) == {}


@pytest.mark.docker
@pytest.mark.parametrize("network", ["bridge", "host"])
def test_llama_server_in_container_serves_a_chat_completion(
    network: str,
    engine_image: str,
    models: dict[str, Path],
    containers: Callable[[], list[Any]],
    tmp_path: Path,
) -> None:
    target = models["target"]
    folder = str(target.parent)
    settings = DockerSettings(engine_image, volumes={folder: folder}, network=network)
    port = free_port()
    # one thread: two OpenMP threads in a container's CPU group crawl on a busy 2-core host
    spec = _spec(port, "-m", str(target), "-np", "1", "-c", "2048")
    log_path = tmp_path / "engine.log"
    proc = start_container(spec, settings, "127.0.0.1", port, log_path, f"specdec-test-{port}")
    try:
        url = f"http://127.0.0.1:{port}"
        boot_s = wait_ready(proc, _healthy(url), timeout_s=60)  # type: ignore[arg-type]
        assert 0 < boot_s < 60
        (running,) = containers()
        assert running.labels[LABEL] == "1"
        ports = running.attrs["NetworkSettings"]["Ports"]
        if network == "bridge":
            assert ports[f"{port}/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
        else:
            assert not ports
        payload = {
            "messages": [{"role": "user", "content": "Name three colours."}],
            "max_tokens": 16,
            "temperature": 0.0,
        }
        resp = httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=120.0)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["usage"]["completion_tokens"] > 0
        assert body["choices"][0]["message"]["content"]
        assert body["timings"]["predicted_per_second"] > 0
    finally:
        code = stop_container(proc)
    assert code == 0  # docker-init forwarded SIGTERM and llama-server shut down cleanly
    assert proc.exited() == 0
    log = log_path.read_text()
    assert f"loading model '{target}'" in log  # the read-only volume at the same path
    assert "n_threads = 1" in log  # the spec's environment reached the engine
    assert containers() == []


@pytest.mark.docker
def test_engine_that_exits_at_once_fails_fast_with_its_error(
    engine_image: str, containers: Callable[[], list[Any]], tmp_path: Path
) -> None:
    port = free_port()
    log_path = tmp_path / "engine.log"
    settings = DockerSettings(engine_image)
    spec = _spec(port, "--no-such-flag")
    proc = start_container(spec, settings, "127.0.0.1", port, log_path, f"specdec-test-{port}")
    started = time.monotonic()
    try:
        with pytest.raises(LaunchError) as info:
            wait_ready(proc, _healthy(f"http://127.0.0.1:{port}"), timeout_s=60)  # type: ignore[arg-type]
        assert time.monotonic() - started < 15
        message = str(info.value)
        assert "engine exited with code 1 before it was ready: llama-server" in message
        assert "invalid argument: --no-such-flag" in message
        assert containers() == []  # removed once its failure was reported
    finally:
        stop_container(proc)


@pytest.mark.docker
def test_missing_image_names_the_build_script(
    docker_client: Any, containers: Callable[[], list[Any]], tmp_path: Path
) -> None:
    settings = DockerSettings("pytest-specdec/no-such-image:0")
    with pytest.raises(DockerLaunchError) as info:
        start_container(_spec(1), settings, "127.0.0.1", 1, tmp_path / "x.log", "specdec-none")
    message = str(info.value)
    assert "docker image 'pytest-specdec/no-such-image:0' not found locally" in message
    assert "./scripts/build-engine-image" in message


@pytest.mark.docker
def test_leftovers_are_removed_by_label(
    engine_image: str, docker_client: Any, containers: Callable[[], list[Any]], tmp_path: Path
) -> None:
    spec = LaunchSpec(argv=["llama-server", "--version"], env={})
    settings = DockerSettings(engine_image, network="host")
    proc = start_container(spec, settings, "127.0.0.1", 1, tmp_path / "v.log", "specdec-leftover")
    assert isinstance(proc, ContainerProcess)
    assert [c.name for c in containers()] == ["specdec-leftover"]
    assert container.remove_leftovers() == ["specdec-leftover"]
    assert containers() == []
    assert stop_container(proc) is None  # idempotent; the exit code was never read


_CHILD = """
import os, signal, sys
from pathlib import Path
from pytest_specdec.engines.container import DockerSettings, start_container
from pytest_specdec.engines.base import LaunchSpec

image, log, name, end = sys.argv[1:]
spec = LaunchSpec(argv=["llama-server", "--version"], env={})
proc = start_container(spec, DockerSettings(image, network="host"), "127.0.0.1", 1, Path(log), name)
print(proc.container.id, flush=True)
if end == "kill":
    os.kill(os.getpid(), signal.SIGKILL)  # no teardown, no atexit
"""


@pytest.mark.docker
@pytest.mark.parametrize("end", ["exit", "kill"])
def test_containers_of_a_session_without_teardown_are_removed(
    end: str, engine_image: str, docker_client: Any, tmp_path: Path
) -> None:
    name = f"specdec-child-{end}-{os.getpid()}"
    argv = [sys.executable, "-c", _CHILD, engine_image, str(tmp_path / "c.log"), name, end]
    child = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == (0 if end == "exit" else -9), child.stderr
    cid = child.stdout.strip()

    def left() -> list[Any]:
        return list(docker_client.containers.list(all=True, filters={"id": cid}))

    if end == "exit":
        assert left() == []  # the atexit hook removed it
    else:
        assert [c.name for c in left()] == [name]  # a killed session leaves its container
        assert name in container.remove_orphans()
        assert left() == []


@pytest.mark.docker
@pytest.mark.engine
def test_plugin_boots_the_engine_in_a_container(
    suite_project: pytest.Pytester, engine_image: str, containers: Callable[[], list[Any]]
) -> None:
    out = suite_project.path / "r.json"
    result = suite_project.runpytest_subprocess(
        "suites/test_throughput.py", "--specdec-launcher", "docker",
        "--specdec-docker-image", engine_image,
        "--spec-config", "baseline", "--specdec-runs", "1", "--specdec-max-tokens", "8",
        "--specdec-no-warmup", "--specdec-results", str(out), "-k", "haiku",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    import json

    cfg = json.loads(out.read_text())["configs"][0]
    assert cfg["engine_version"] == f"image {engine_image}"
    (run,) = [r for r in cfg["runs"] if r["phase"] == "measure"]
    assert run["ok"] and run["output_tokens"] > 0
    assert containers() == []  # removed on teardown
