"""Fault injection for the reliability tests: a misbehaving server and the engines a test started.

:class:`FaultServer` is a small OpenAI-compatible server on 127.0.0.1 that the plugin measures
with ``--specdec-server-url URL --specdec-engine llamacpp``. Its chat endpoint answers with the
fault it was given (``fault`` may be changed while it runs):

* ``ok`` streams ``tokens`` content events (``token_s`` apart), a usage event and
  ``data: [DONE]`` (the control);
* ``http500`` answers HTTP 500 with a short body;
* ``malformed`` streams one good event, then an event that is not JSON;
* ``shapeless`` streams one good event, then valid JSON of the wrong shape (a choice that is
  a string), which the adapter cannot read;
* ``cut`` streams two events, then closes the connection in the middle of the chunked body;
* ``zero`` streams a usage event with ``completion_tokens: 0`` and ``[DONE]``;
* ``stall`` sends nothing for ``stall_s`` seconds (longer than the client's read timeout).

``/health`` always answers ``{"status": "ok"}`` and ``/metrics`` 404 (no counters), so every
failure comes from the chat request.

:func:`engine_pids` finds the ``llama-server`` processes that belong to a folder (their working
directory or their log file is under it), so that a test on a shared machine looks only at
the engines it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAULTS = ("ok", "http500", "malformed", "shapeless", "cut", "zero", "stall")
CHAT = "/v1/chat/completions"
ENGINE = "llama-server"


def _event(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


def _content(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def _usage(tokens: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 12}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no stderr noise
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path != CHAT:
            self._json(404, {"error": "not found"})
            return
        owner = self.server.owner
        owner.record(self.headers.get("Authorization"))
        fault = owner.fault
        if fault == "http500":
            self._json(500, {"error": "injected failure"})
            return
        if fault == "stall":
            owner.released.wait(owner.stall_s)
            self.close_connection = True
            return
        self._stream(fault, owner)

    def _stream(self, fault: str, owner: FaultServer) -> None:
        tokens = owner.tokens
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if fault == "zero":
            chunks = [_event(_usage(0)), _event("[DONE]")]
        elif fault == "malformed":
            chunks = [_event(_content("Hi")), _event('{"choices": [{"delta": ')]
        elif fault == "shapeless":
            chunks = [_event(_content("Hi")), _event({"choices": ["oops"]}), _event("[DONE]")]
        elif fault == "cut":
            chunks = [_event(_content("Hi")), _event(_content(" there"))]
        else:
            body = [_event(_content(f"tok{i} ")) for i in range(tokens)]
            chunks = [*body, _event(_usage(tokens)), _event("[DONE]")]
        for chunk in chunks:
            if owner.token_s and b'"content"' in chunk:
                time.sleep(owner.token_s)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        if fault == "cut":  # no terminating chunk: the connection just ends
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: FaultServer


class FaultServer:
    """A local chat server that injects ``fault``; use as a context manager."""

    def __init__(
        self, fault: str = "ok", *, tokens: int = 8, stall_s: float = 30.0, token_s: float = 0.0
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
        self.fault = fault
        self.tokens = tokens
        self.stall_s = stall_s
        self.token_s = token_s  # pause before each content event: sets the measured tok/s
        self.released = threading.Event()
        self.chats = 0
        self.auth: list[str | None] = []
        self._lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def record(self, auth: str | None) -> None:
        with self._lock:
            self.chats += 1
            self.auth.append(auth)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.released.set()  # a stalled handler returns at once
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


def _links(pid: int) -> tuple[list[str], list[str]]:
    """The working directory and the stdout/stderr targets of ``pid`` (those readable)."""
    found: dict[str, str] = {}
    for name in ("cwd", "fd/1", "fd/2"):
        with contextlib.suppress(OSError):
            found[name] = os.readlink(f"/proc/{pid}/{name}")
    cwd = [found["cwd"]] if "cwd" in found else []
    return cwd, [v for k, v in found.items() if k != "cwd"]


def engine_pids(root: Path, needle: str = "") -> list[int]:
    """Live ``llama-server`` processes whose working directory or log is under ``root``;
    with ``needle``, only those whose log file name contains it (e.g. ``-baseline-``)."""
    prefix = str(root.resolve())
    found = []
    for pid in _engine_processes():
        cwd, logs = _links(pid)
        if not any(link.startswith(prefix) for link in [*cwd, *logs]):
            continue
        if needle and not any(needle in Path(link).name for link in logs):
            continue
        if _state(pid) not in ("Z", None):  # a zombie is dead, only not yet reaped
            found.append(pid)
    return found


def _engine_processes() -> list[int]:
    """PIDs of every ``llama-server`` process (its executable's name, whatever its path).

    Engines this process started are also found by the marker in their environment
    (:func:`pytest_specdec.engines.launch.engines_started_here`); this finds those started
    by a pytest run in a subprocess too, by their folder."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and Path(cmdline(int(entry.name)).split(" ")[0]).name == ENGINE:
            out.append(int(entry.name))
    return out


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[0]


def parent_pid(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def accepts_connections(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0
