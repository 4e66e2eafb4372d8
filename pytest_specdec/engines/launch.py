"""Server process lifecycle: start an engine subprocess, wait until it is really ready, stop it.

* The engine's output goes to a log file (a pipe nobody reads fills up and hangs the engine).
* The engine runs in its own process group, so teardown kills everything it spawned; on Linux
  it also dies with its parent (``PR_SET_PDEATHSIG``), so a killed pytest leaves no engine behind.
* Every engine carries ``SPECDEC_ENGINE_OF=<lineage>`` in its environment: the lineage of the
  process that started it (a random root, then one PID per process down the chain of pytest
  processes, xdist workers, nested runs). :func:`engines_started_here` finds the engines of
  this process and of the processes it started, never another suite's on the same host.
* Readiness polls the engine's own readiness endpoint and fails fast, with the log tail, when
  the process exits; it gives up after a bounded timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

_LIVE: dict[int, subprocess.Popen[bytes]] = {}
PR_SET_PDEATHSIG = 1
LINEAGE_VARIABLE = "SPECDEC_LINEAGE"  # this process's lineage, inherited by its children
ENGINE_MARKER = "SPECDEC_ENGINE_OF"  # on each engine: the lineage of the process that started it
_LINEAGE: dict[int, str] = {}  # per PID: a forked child makes its own


def lineage() -> str:
    """This process's lineage: the parent's (inherited through the environment) and this PID,
    or a new random root. Exported, so processes started from here extend it."""
    pid = os.getpid()
    if pid not in _LINEAGE:
        parent = os.environ.get(LINEAGE_VARIABLE)
        own = f"{parent}/{pid}" if parent else f"{secrets.token_hex(4)}/{pid}"
        _LINEAGE[pid] = own
        os.environ[LINEAGE_VARIABLE] = own
    return _LINEAGE[pid]


class LaunchError(RuntimeError):
    """The engine did not start or did not become ready; the message carries the log tail."""


HIGHEST_PORT = 65535
LOWEST_PORT = 1024  # below: privileged
PORT_PICKS = 256  # tries before giving up on a port whose derived ports are usable too


def _address(host: str) -> tuple[socket.AddressFamily, str]:
    """The address family and address ``host`` binds as (resolved once: IPv4 or IPv6)."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    except OSError as exc:
        raise LaunchError(f"cannot bind on host {host!r}: {exc}; give a local address") from exc
    return family, str(addr[0])


def _bind(where: tuple[socket.AddressFamily, str], port: int) -> int | None:
    """The port bound (0: one the OS picks), or None where it is taken (or privileged)."""
    family, address = where
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES) and port:
                return None
            raise LaunchError(f"cannot bind on {address} port {port}: {exc}") from exc
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1", offsets: Sequence[int] = ()) -> int:
    """A port free on ``host`` now, such that each ``port + offset`` (ports an engine derives
    from its own, e.g. SGLang's gRPC port at ``--port + 10000``) is a valid port and free too.

    The OS picks first (its ephemeral range, often up to 60999); where that leaves no room
    for the offsets, ports are drawn from the range that does."""
    if any(off < 1 for off in offsets):
        raise ValueError(f"port offsets {list(offsets)}: each must be 1 or more")
    highest = HIGHEST_PORT - max(offsets, default=0)
    if highest < LOWEST_PORT:
        raise ValueError(f"port offsets {list(offsets)} leave no port below {HIGHEST_PORT}")
    where = _address(host)
    draw = random.SystemRandom()
    for attempt in range(PORT_PICKS):
        port = _bind(where, 0 if attempt < 8 else draw.randint(LOWEST_PORT, highest))
        if port is None or port > highest:
            continue
        if all(_bind(where, port + off) is not None for off in offsets):
            return port
    derived = "".join(f", port+{off}" for off in offsets)
    raise LaunchError(
        f"no free port on {host} (port{derived} all free) after {PORT_PICKS} tries; "
        "free some ports or use another host"
    )


def log_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines, plus earlier lines that look like the engine's own error."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    all_lines = text.splitlines()
    tail = all_lines[-lines:]
    errors = [
        ln
        for ln in all_lines[:-lines]
        if any(w in ln.lower() for w in ("error", "invalid", "unknown"))
    ][-5:]
    head = [*errors, "..."] if errors else []
    return "\n".join(head + tail)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _pinned(cpus: tuple[int, ...]) -> None:  # pragma: no cover - runs in the child
    _die_with_parent()
    os.sched_setaffinity(0, cpus)


class ServerProcess(Protocol):
    """A started engine: a local process group or a container."""

    argv: list[str]
    log_path: Path
    started_ns: int

    def exited(self) -> int | None: ...

    def failure(self, what: str) -> LaunchError: ...

    def stop(self, grace_s: float = 10.0) -> int | None: ...


@dataclass
class EngineProcess:
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]
    started_ns: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> int | None:
        return self.process.poll()

    def failure(self, what: str) -> LaunchError:
        return LaunchError(
            f"{what}\n--- engine log {self.log_path} (tail) ---\n{log_tail(self.log_path)}"
        )

    def stop(self, grace_s: float = 10.0) -> int | None:
        return stop_process(self, grace_s)


def exit_seen(
    proc: ServerProcess, grace_s: float, poll_s: float = 0.02,
    sleep: Callable[[float], None] = time.sleep,
) -> int | None:  # fmt: skip
    """``proc``'s exit code, read again for up to ``grace_s`` while it has none: a killed
    engine's sockets close a moment before its exit can be read."""
    deadline = time.monotonic() + grace_s
    while (code := proc.exited()) is None and time.monotonic() < deadline:
        sleep(poll_s)
    return code


def start_process(
    argv: Sequence[str], env: Mapping[str, str], log_path: Path,
    cpus: Sequence[int] | None = None,
) -> EngineProcess:  # fmt: skip
    """Start ``argv`` (a list: never a shell string) with its output in ``log_path``, pinned
    to ``cpus`` (CPU affinity, inherited by every thread it starts) when given."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env, ENGINE_MARKER: lineage()}
    # private (0600): an engine may log what it was given (SGLang its server_args, API key too)
    with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                start_new_session=True,
                preexec_fn=_die_with_parent if cpus is None else partial(_pinned, tuple(cpus)),
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {argv[0]}: {exc}") from exc
    _LIVE[proc.pid] = proc
    return EngineProcess(list(argv), log_path, proc, time.perf_counter_ns())


def wait_ready(
    proc: ServerProcess,
    probe: Callable[[], bool],
    timeout_s: float,
    poll_s: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Poll ``probe`` until True; return seconds waited. Fail fast if the process exits (its
    workers stopped with it: they would hold the machine while the next config boots)."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = proc.exited()
        if code is not None:
            failed = proc.failure(
                f"engine exited with code {code} before it was ready: {' '.join(proc.argv[:1])}"
            )
            proc.stop(0)
            raise failed
        if probe():
            return (time.perf_counter_ns() - proc.started_ns) / 1e9
        if time.monotonic() >= deadline:
            proc.stop()
            raise proc.failure(
                f"engine not ready after {timeout_s:.0f} s (readiness timeout): a model that "
                "loads longer needs more; raise startup_timeout_s in the suite file's "
                "[engines.<engine>] table, or pass --specdec-startup-timeout SECONDS"
            )
        sleep(poll_s)


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _process_dirs() -> list[Path]:
    """``/proc/<pid>`` of every process (none where there is no /proc: not Linux)."""
    try:
        return [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid`` (Linux /proc)."""
    out = []
    for entry in _process_dirs():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def stop_process(proc: EngineProcess, grace_s: float = 10.0, gone_s: float = 15.0) -> int | None:
    """SIGTERM the engine's whole process group, SIGKILL after ``grace_s``, then wait (up to
    ``gone_s``) until no process of the group is left: an engine's workers (SGLang's scheduler
    and detokenizer) outlive its main process by seconds and hold the GPU until they exit."""
    pid = proc.pid
    if proc.process.poll() is None:
        _kill_group(pid, signal.SIGTERM)
        try:
            proc.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            _kill_group(pid, signal.SIGKILL)
            proc.process.wait(5)
    _kill_group(pid, signal.SIGKILL)  # stragglers the engine spawned in its group
    deadline = time.monotonic() + gone_s
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _LIVE.pop(pid, None)
    return proc.process.returncode


def kill_all() -> None:
    """Kill every engine still running (atexit, signals, internal errors)."""
    for pid, proc in list(_LIVE.items()):
        _kill_group(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(5)
        _LIVE.pop(pid, None)


def engines_started_here(needle: str = "", root: str | None = None) -> list[int]:
    """PIDs of live engines started by this process or one it started (``root``: by the
    process of that lineage instead), whose command line contains ``needle``. Found by the
    marker in their environment (Linux /proc), so engines of other runs are never counted."""
    own = root or lineage()
    prefix = f"{ENGINE_MARKER}=".encode()
    pids = []
    for entry in _process_dirs():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            marks = [e[len(prefix) :].decode(errors="replace") for e in environ
                     if e.startswith(prefix)]  # fmt: skip
            if not any(m == own or m.startswith(own + "/") for m in marks):
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):  # gone, or another user's process
            continue
        if state != "Z" and any(needle in arg for arg in argv):
            pids.append(int(entry.name))
    return pids


atexit.register(kill_all)
