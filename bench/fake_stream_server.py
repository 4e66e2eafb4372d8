"""A fast OpenAI-compatible streaming server for measuring load drivers, not engines.

It answers ``POST /v1/chat/completions`` (and ``/v1/completions``) with ``stream: true`` as SSE,
one token (``"tok "``) per chunk, ``max_tokens`` chunks, then a chunk with ``usage``
(``completion_tokens`` = the number of content chunks sent) and ``data: [DONE]``; without
``stream`` it answers one JSON body. ``GET /v1/models`` and ``GET /health`` answer too.

Pacing: ``--tokens-per-s 0`` sends as fast as the socket takes it (events are written
``--batch`` at a time); ``--tokens-per-s R`` sends token ``i`` (0-based) at ``recv + (i+1)/R``
on absolute deadlines, so the ideal end-to-end time of ``N`` tokens is ``N/R``.

The usage chunk carries ``server_timing`` (``time.perf_counter_ns`` values, CLOCK_MONOTONIC on
Linux and so comparable across processes): ``recv_ns`` (request fully read), ``first_send_ns``
(first content chunk written), ``last_send_ns`` (last content chunk, usage and ``[DONE]``
written together).

    python bench/fake_stream_server.py --port 0 --port-file /tmp/port [--tokens-per-s 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

MODEL = "fake-stream"
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
TOKEN = "tok "
SPIN_S = 0.002


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (``Transfer-Encoding: chunked``)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: Any) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def _token_event(chat: bool, finish: str | None) -> bytes:
    choice: dict[str, Any] = {"index": 0}
    if chat:
        choice["delta"] = {"content": TOKEN}
    else:
        choice["text"] = TOKEN
    choice["finish_reason"] = finish
    kind = "chat.completion.chunk" if chat else "text_completion"
    return _sse(
        {"id": "cmpl-fake", "object": kind, "created": 0, "model": MODEL, "choices": [choice]}
    )


EVENTS = {
    (chat, last): _token_event(chat, "length" if last else None)
    for chat in (True, False)
    for last in (True, False)
}
DONE = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n"
)


def _response(status: str, body: Any, keep_alive: bool) -> bytes:
    data = json.dumps(body).encode()
    conn = b"keep-alive" if keep_alive else b"close"
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: %s\r\n\r\n%s" % (status.encode(), len(data), conn, data)
    )


def _usage(prompt: int, completion: int, timing: dict[str, int], chat: bool) -> bytes:
    kind = "chat.completion.chunk" if chat else "text_completion"
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return _sse(
        {"id": "cmpl-fake", "object": kind, "created": 0, "model": MODEL, "choices": [],
         "usage": usage, "server_timing": timing}
    )  # fmt: skip


class Request:
    __slots__ = ("body", "keep_alive", "method", "path", "recv_ns")

    def __init__(self, method: str, path: str, keep_alive: bool, body: bytes) -> None:
        self.method, self.path, self.keep_alive, self.body = method, path, keep_alive, body
        self.recv_ns = time.perf_counter_ns()


class Connection(asyncio.Protocol):
    """HTTP/1.1 keep-alive, one request at a time per connection (pipelined ones queue)."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.queue: asyncio.Queue[Request | None] = asyncio.Queue()
        self.transport: asyncio.Transport | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.task = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()
        self.queue.put_nowait(None)

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                if len(self.buf) > MAX_HEADER_BYTES:
                    self._fail("431 Request Header Fields Too Large")
                return
            lines = bytes(self.buf[:head_end]).decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                self._fail("400 Bad Request")
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if length > MAX_BODY_BYTES:
                self._fail("413 Content Too Large")
                return
            if len(self.buf) < head_end + 4 + length:
                return
            body = bytes(self.buf[head_end + 4 : head_end + 4 + length])
            del self.buf[: head_end + 4 + length]
            keep_alive = headers.get("connection", "").lower() != "close"
            self.queue.put_nowait(Request(parts[0], parts[1], keep_alive, body))

    def _fail(self, status: str) -> None:
        if self.transport is not None:
            self.transport.write(_response(status, {"error": status}, False))
            self.transport.close()

    async def _write(self, data: bytes) -> bool:
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(data)
        if not self.can_write.is_set():
            await self.can_write.wait()
        return not transport.is_closing()

    async def _serve(self) -> None:
        while (req := await self.queue.get()) is not None:
            if not await self.server.handle(self, req) or not req.keep_alive:
                if self.transport is not None:
                    self.transport.close()
                return


class FakeServer:
    def __init__(self, tokens_per_s: float, batch: int) -> None:
        self.tokens_per_s = tokens_per_s
        self.batch = batch
        self.requests = 0
        self._bodies: dict[tuple[bool, int], list[bytes]] = {}

    def _unpaced_body(self, chat: bool, n: int) -> list[bytes]:
        """The ``n`` content events, joined ``batch`` at a time (built once per length)."""
        key = (chat, n)
        if key not in self._bodies:
            events = [EVENTS[chat, False]] * (n - 1) + [EVENTS[chat, True]]
            self._bodies[key] = [
                b"".join(events[i : i + self.batch]) for i in range(0, n, self.batch)
            ]
        return self._bodies[key]

    async def handle(self, conn: Connection, req: Request) -> bool:
        """Answer one request; False when the connection is gone."""
        self.requests += 1
        path = req.path.split("?", 1)[0]
        if req.method == "GET" and path == "/health":
            return await conn._write(_response("200 OK", {"status": "ok"}, req.keep_alive))
        if req.method == "GET" and path == "/v1/models":
            models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            return await conn._write(_response("200 OK", models, req.keep_alive))
        if path not in ("/v1/chat/completions", "/v1/completions"):
            body = {"error": {"message": f"no route {req.method} {path}"}}
            return await conn._write(_response("404 Not Found", body, req.keep_alive))
        if req.method != "POST":
            body = {"error": {"message": f"{path} takes POST, not {req.method}"}}
            return await conn._write(_response("405 Method Not Allowed", body, req.keep_alive))
        try:
            payload = json.loads(req.body)
            n = int(payload.get("max_tokens") or payload.get("max_completion_tokens") or 16)
        except (ValueError, TypeError, AttributeError) as exc:
            body = {"error": {"message": f"bad request body: {exc}"}}
            return await conn._write(_response("400 Bad Request", body, req.keep_alive))
        if n < 1:
            body = {"error": {"message": f"max_tokens must be >= 1, got {n}"}}
            return await conn._write(_response("400 Bad Request", body, req.keep_alive))
        chat = path == "/v1/chat/completions"
        prompt = max(1, len(req.body) // 4)
        if not payload.get("stream"):
            return await conn._write(_response("200 OK", _complete(chat, n, prompt), True))
        head = SSE_HEAD + (b"\r\n" if req.keep_alive else b"connection: close\r\n\r\n")
        if self.tokens_per_s > 0:
            return await self._paced(conn, req, chat, n, prompt, head)
        return await self._unpaced(conn, req, chat, n, prompt, head)

    async def _unpaced(
        self, conn: Connection, req: Request, chat: bool, n: int, prompt: int, head: bytes
    ) -> bool:
        batches = self._unpaced_body(chat, n)
        first_ns = time.perf_counter_ns()
        if not await conn._write(head + batches[0]):
            return False
        for data in batches[1:]:
            if not await conn._write(data):
                return False
        timing = {"recv_ns": req.recv_ns, "first_send_ns": first_ns}
        timing["last_send_ns"] = time.perf_counter_ns()
        return await conn._write(_usage(prompt, n, timing, chat) + DONE)

    async def _paced(
        self, conn: Connection, req: Request, chat: bool, n: int, prompt: int, head: bytes
    ) -> bool:
        start_s = req.recv_ns / 1e9
        timing = {"recv_ns": req.recv_ns}
        if not await conn._write(head):
            return False
        for i in range(n - 1):
            await _sleep_until(start_s + (i + 1) / self.tokens_per_s, spin=False)
            if i == 0:
                timing["first_send_ns"] = time.perf_counter_ns()
            if not await conn._write(EVENTS[chat, False]):
                return False
        await _sleep_until(start_s + n / self.tokens_per_s, spin=True)
        timing["last_send_ns"] = time.perf_counter_ns()
        timing.setdefault("first_send_ns", timing["last_send_ns"])
        return await conn._write(EVENTS[chat, True] + _usage(prompt, n, timing, chat) + DONE)


async def _sleep_until(due_s: float, spin: bool) -> None:
    """Sleep to ``due_s`` (perf_counter seconds). The loop's timers wake up to 1 ms late;
    with ``spin`` the last 2 ms are spent yielding to the loop, so the time is kept exactly."""
    delay = due_s - time.perf_counter() - (SPIN_S if spin else 0.0)
    if delay > 0:
        await asyncio.sleep(delay)
    while spin and time.perf_counter() < due_s:
        await asyncio.sleep(0)


def _complete(chat: bool, n: int, prompt: int) -> dict[str, Any]:
    text = TOKEN * n
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
    return {"id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion",
            "created": 0, "model": MODEL, "choices": [choice], "usage": usage}  # fmt: skip


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    server = FakeServer(args.tokens_per_s, args.batch)
    listener = await loop.create_server(
        lambda: Connection(server), args.host, args.port, backlog=1024, reuse_address=True
    )
    port = listener.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(f"{port}\n", encoding="utf-8")
        tmp.replace(args.port_file)
    print(f"listening on http://{args.host}:{port} (tokens/s {args.tokens_per_s or 'unpaced'})")
    sys.stdout.flush()
    async with listener:
        await stop.wait()
    print(f"stopped after {server.requests} requests")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected tokens/s >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected tokens/s >= 0 (0 = unpaced), got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default 0)")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument(
        "--tokens-per-s", type=_rate, default=0.0, help="per-request pacing; 0 = unpaced"
    )
    parser.add_argument(
        "--batch", type=_positive_int, default=16, help="events per write when unpaced (16)"
    )
    parser.add_argument("--cpu", type=int, help="pin the server to this CPU core")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu is not None:
        try:
            os.sched_setaffinity(0, {args.cpu})
        except (OSError, ValueError) as exc:
            print(f"--cpu {args.cpu}: cannot pin to that core: {exc}", file=sys.stderr)
            return 2
    try:
        asyncio.run(serve(args))
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
