"""Engine servers in Docker containers, through the ``docker`` SDK (``--specdec-launcher docker``).

Mirrors the subprocess launcher: :func:`start_container` returns a :class:`ContainerProcess`
that ``launch.wait_ready`` polls like an ``EngineProcess``; :func:`stop_container` stops and
removes it.

* The argv runs inside the image (``argv[0]`` is the binary *in the image*); the environment
  is ``extra_env`` plus the spec's env, nothing from the host.
* Bridge networking publishes the port on a loopback address only, and the engine listens on
  the container's own interfaces (``--host 0.0.0.0`` in its network namespace). Host
  networking publishes nothing and keeps the argv.
* A daemon thread follows the container's output into the log file.
* Labels ``pytest-specdec=1`` and ``pytest-specdec.session=<pid>``: teardown removes the
  container, an ``atexit`` hook what teardown missed, :func:`remove_orphans` what a killed
  session left.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.engines.launch import LaunchError, log_tail

LABEL = "pytest-specdec"
SESSION_LABEL = "pytest-specdec.session"
NETWORK_MODES = ("bridge", "host")
BUILD_HINT = "build it with ./scripts/build-engine-image (the llama.cpp CPU image)"
DAEMON_HINT = "start it with ./scripts/start-dockerd (or `sudo systemctl start docker`)"
_SHM_SIZE = re.compile(r"^[0-9]+[bkmg]?$", re.IGNORECASE)
_LIVE: dict[str, Any] = {}  # container id -> container, for the atexit hook
_CLIENT: list[Any] = []


class DockerLaunchError(LaunchError):
    """A Docker setting, image or daemon problem; the message names the value and the fix."""


@dataclass
class DockerSettings:
    image: str
    gpus: list[str] | None = None  # device ids ("0", "1" or GPU UUIDs), or ["all"]
    shm_size: str = "16g"
    volumes: dict[str, str] = field(default_factory=dict)  # host path -> container path (ro)
    network: str = "bridge"  # "bridge" (port published on loopback) or "host"
    extra_env: dict[str, str] = field(default_factory=dict)
    init: bool = True  # docker-init as PID 1: forwards SIGTERM, reaps the engine's children

    def __post_init__(self) -> None:
        if not self.image.strip():
            raise DockerLaunchError("docker image is empty: pass an image reference")
        if self.network not in NETWORK_MODES:
            raise DockerLaunchError(
                f"docker network mode {self.network!r} is not supported: "
                f"use one of {', '.join(NETWORK_MODES)}"
            )
        if not _SHM_SIZE.match(self.shm_size):
            raise DockerLaunchError(
                f"docker shm_size {self.shm_size!r} is not a size: use e.g. '16g' or '512m'"
            )
        if self.gpus is not None and (not self.gpus or not all(g.strip() for g in self.gpus)):
            raise DockerLaunchError(
                f"docker gpus {self.gpus!r}: give device ids such as ['0', '1'], or ['all']"
            )
        relative = [p for pair in self.volumes.items() for p in pair if not os.path.isabs(p)]
        if relative:
            raise DockerLaunchError(
                f"docker volumes {self.volumes!r}: {relative[0]!r} is not absolute; "
                "give absolute host and container paths"
            )


def _docker() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise DockerLaunchError(
            "the docker launcher needs the Docker SDK: pip install 'pytest-specdec[docker]'"
        ) from exc
    return docker


def docker_client() -> Any:
    """One client per process, checked with a ping; a clear error when no daemon answers."""
    if _CLIENT:
        return _CLIENT[0]
    docker = _docker()
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    socket_path = where.removeprefix("unix://") if where.startswith("unix://") else None
    if socket_path is not None:
        _probe_socket(where, socket_path)
    client = None
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as exc:
        if client is not None:
            client.close()
        raise DockerLaunchError(
            f"docker daemon not reachable at {where}: {exc}; {DAEMON_HINT}"
        ) from exc
    _CLIENT.append(client)
    return client


def _probe_socket(where: str, socket_path: str) -> None:
    """Connect to the daemon's socket once, closing it on every path.

    The SDK leaves the socket of a refused connection open; probing first turns the common
    "socket file but no daemon" case into a clear error without leaking a descriptor.
    """
    if not os.path.exists(socket_path):
        raise DockerLaunchError(
            f"docker daemon not reachable at {where}: {socket_path} does not exist; {DAEMON_HINT}"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5.0)
        try:
            probe.connect(socket_path)
        except OSError as exc:
            raise DockerLaunchError(
                f"docker daemon not reachable at {where}: {exc.strerror or exc}; {DAEMON_HINT}"
            ) from exc


def device_requests(gpus: list[str] | None) -> list[Any]:
    """``--gpus``: one DeviceRequest for the listed device ids (``["all"]`` → every GPU)."""
    if not gpus:
        return []
    types = _docker().types
    if gpus == ["all"]:
        return [types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [types.DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


def publish_address(host: str) -> str:
    """The loopback address the port is published on; anything else is refused."""
    address = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise DockerLaunchError(
            f"host {host!r}: the docker launcher publishes the engine port on a loopback address "
            "only (never on every interface); give the run a loopback host such as 127.0.0.1"
        )
    return address


def container_argv(argv: list[str], network: str) -> list[str]:
    """Under bridge networking the engine must listen on the container's own interfaces."""
    if network != "bridge":
        return list(argv)
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--host" and i + 1 < len(out):
            out[i + 1] = "0.0.0.0"
        elif arg.startswith("--host="):
            out[i] = "--host=0.0.0.0"
    return out


def container_config(
    spec: LaunchSpec, settings: DockerSettings, host: str, port: int, name: str
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create`` (pure: no daemon needed).

    A host ``CUDA_VISIBLE_DEVICES`` (a worker's GPU pin) becomes the device request when
    ``gpus`` is unset, and is left out of the container: inside, the requested GPUs are
    numbered from 0, so host indices there would hide them.
    """
    env = {**settings.extra_env, **spec.env}
    pinned = env.pop("CUDA_VISIBLE_DEVICES", None)
    gpus = settings.gpus
    if gpus is None and pinned:
        gpus = [g.strip() for g in pinned.split(",") if g.strip()] or None
    config: dict[str, Any] = {
        "image": settings.image,
        "command": container_argv(spec.argv, settings.network),
        "name": name,
        "environment": env,
        "labels": {LABEL: "1", SESSION_LABEL: str(os.getpid())},
        "shm_size": settings.shm_size,
        "volumes": {h: {"bind": c, "mode": "ro"} for h, c in settings.volumes.items()},
        "network_mode": settings.network,
        "device_requests": device_requests(gpus),
        "init": settings.init,
        "detach": True,
    }
    if settings.network == "bridge":
        config["ports"] = {f"{port}/tcp": (publish_address(host), port)}
    return config


@dataclass
class ContainerProcess:
    """A running engine container; duck-compatible with ``launch.EngineProcess``."""

    argv: list[str]
    log_path: Path
    container: Any
    started_ns: int
    returncode: int | None = None
    _log_thread: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        return str(self.container.name)

    def exited(self) -> int | None:
        """The exit code once the container has exited, else None."""
        if self.returncode is not None:
            return self.returncode
        errors = _docker().errors
        try:
            self.container.reload()
        except errors.NotFound:
            self.returncode = -1  # removed behind our back: treat as dead
            return self.returncode
        except (errors.DockerException, OSError) as exc:  # OSError: requests' connection errors
            raise DockerLaunchError(
                f"docker daemon stopped answering about container {self.name}: {exc}; {DAEMON_HINT}"
            ) from exc
        state = self.container.attrs.get("State", {})
        if state.get("Status") in ("exited", "dead"):
            self.returncode = int(state.get("ExitCode", -1))
        return self.returncode

    def failure(self, what: str) -> LaunchError:
        """The error with the log tail; an exited container is removed (nothing will reuse it)."""
        if self.returncode is not None:
            stop_container(self, grace_s=0)  # drains the log stream first
        return LaunchError(
            f"{what}\n--- engine log {self.log_path} (container {self.name}, tail) ---\n"
            f"{log_tail(self.log_path)}"
        )

    def stop(self, grace_s: float = 10.0) -> int | None:
        return stop_container(self, grace_s)


def _follow_logs(container: Any, log_path: Path) -> None:
    with log_path.open("ab") as log, contextlib.suppress(Exception):
        for chunk in container.logs(stream=True, follow=True):
            log.write(chunk)
            log.flush()


def _check_image(client: Any, image: str) -> None:
    try:
        client.images.get(image)
    except _docker().errors.ImageNotFound:
        raise DockerLaunchError(
            f"docker image {image!r} not found locally; {BUILD_HINT}, or `docker pull {image}` "
            "where a registry is reachable (the launcher never pulls)"
        ) from None


def _clear_name(client: Any, name: str) -> None:
    """A leftover container of ours with this name is removed; someone else's is an error."""
    try:
        old = client.containers.get(name)
    except _docker().errors.NotFound:
        return
    if old.labels.get(LABEL) != "1":
        raise DockerLaunchError(
            f"a container named {name!r} exists and is not ours: remove it (docker rm -f {name})"
        )
    old.remove(force=True)


def start_container(
    spec: LaunchSpec,
    settings: DockerSettings,
    host: str,
    port: int,
    log_path: Path,
    name: str,
    client: Any = None,
) -> ContainerProcess:
    """Create and start the engine container; its output goes to ``log_path``."""
    client = client if client is not None else docker_client()
    errors = _docker().errors
    config = container_config(spec, settings, host, port, name)
    for host_path in settings.volumes:
        if not os.path.exists(host_path):
            raise DockerLaunchError(f"docker volume host path {host_path!r} does not exist")
    _check_image(client, settings.image)
    _clear_name(client, name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        container = client.containers.create(**config)
    except errors.APIError as exc:
        raise LaunchError(f"cannot create container {name} from {settings.image}: {exc}") from None
    _LIVE[container.id] = container
    proc = ContainerProcess(config["command"], log_path, container, time.perf_counter_ns())
    try:
        container.start()
    except errors.APIError as exc:
        stop_container(proc, grace_s=0)
        raise LaunchError(
            f"cannot start {spec.argv[0]} in container {name} ({settings.image}): {exc}"
        ) from None
    proc._log_thread = threading.Thread(
        target=_follow_logs, args=(container, log_path), name=f"logs-{name}", daemon=True
    )
    proc._log_thread.start()
    return proc


def stop_container(proc: ContainerProcess, grace_s: float = 10.0) -> int | None:
    """Stop (SIGTERM, SIGKILL after ``grace_s``), then remove: always, also after a crash."""
    errors = _docker().errors
    container = proc.container
    with contextlib.suppress(errors.DockerException, OSError):
        container.stop(timeout=int(grace_s))
    if proc._log_thread is not None:
        proc._log_thread.join(5)  # the stream ends with the container: the log is complete
    with contextlib.suppress(errors.DockerException, OSError):
        container.reload()
        proc.returncode = int(container.attrs.get("State", {}).get("ExitCode", -1))
    with contextlib.suppress(errors.NotFound):
        container.remove(force=True)  # another error propagates; the atexit hook retries
    _LIVE.pop(container.id, None)
    return proc.returncode


def remove_leftovers(label: str | None = None, client: Any = None) -> list[str]:
    """Force-remove containers matching ``label`` (default: this session's); their names.

    ``remove_leftovers("pytest-specdec=1")`` removes every session's, running ones included.
    """
    client = client if client is not None else docker_client()
    label = label or f"{SESSION_LABEL}={os.getpid()}"
    removed = []
    for container in client.containers.list(all=True, filters={"label": label}):
        with contextlib.suppress(_docker().errors.NotFound):
            container.remove(force=True)
            removed.append(str(container.name))
        _LIVE.pop(container.id, None)
    return removed


def remove_orphans(client: Any = None) -> list[str]:
    """Remove containers of sessions whose process no longer runs on this host (killed runs)."""
    client = client if client is not None else docker_client()
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        pid = container.labels.get(SESSION_LABEL, "")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(_docker().errors.NotFound):
                container.remove(force=True)
                removed.append(str(container.name))
    return removed


def _remove_live() -> None:
    for container in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            container.remove(force=True)
    _LIVE.clear()


atexit.register(_remove_live)
