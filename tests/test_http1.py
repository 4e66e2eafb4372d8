"""The load driver's HTTP/1.1 transport and SSE splitter, against a real socket server that
sends scripted bytes: every framing, every split, and every way a response can break."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from pytest_specdec.engines.base import chat_has_content
from pytest_specdec.measure.client import ClientSettings, RequestFailed, SseSplitter, stream_sse
from pytest_specdec.measure.http1 import ChunkedDecoder, Http1Transport, _ProtocolError


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


CONTENT = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in ("Hel", "lo", "!")]
USAGE = {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 5}}
STREAM = [*sse(*CONTENT, USAGE, "[DONE]")]
CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@dataclass
class Scripted:
    """A TCP server on 127.0.0.1 that answers every request with ``pieces``, one write each,
    ``gap_s`` apart, then closes (unless ``hold_s``: then it waits that long first)."""

    pieces: Sequence[bytes]
    gap_s: float = 0.01
    hold_s: float = 0.0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            self.requests.append(head + await reader.readexactly(length))
            for piece in self.pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(self.gap_s)
            await asyncio.sleep(self.hold_s)
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client gave up first
        finally:
            writer.close()

    async def run(self, body: Callable[[str], Awaitable[Any]]) -> Any:
        self._handlers: list[asyncio.Task[None]] = []
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            return await body(f"http://127.0.0.1:{self.port}")
        finally:
            server.close()
            for task in self._handlers:
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await server.wait_closed()


def serve(pieces: Sequence[bytes], body: Callable[[str], Awaitable[Any]], **kw: Any) -> Any:
    server = Scripted(pieces, **kw)
    return server, asyncio.run(server.run(body))


def stream(settings: ClientSettings | None = None) -> Callable[[str], Awaitable[Any]]:
    async def body(url: str) -> Any:
        async with (settings or ClientSettings()).build(url) as client:
            assert isinstance(client._transport, Http1Transport)
            return await stream_sse(client, "/v1/chat/completions", {"x": 1}, chat_has_content)

    return body


def texts(outcome: Any) -> list[str]:
    return [e["choices"][0]["delta"]["content"] for e in outcome.events if e["choices"]]


# --- framing ----------------------------------------------------------------------------------


def test_chunked_stream_one_event_per_chunk() -> None:
    _, out = serve([CHUNKED_HEAD, *(chunked(e)[:-5] for e in STREAM), b"0\r\n\r\n"], stream())
    assert out.done and texts(out) == ["Hel", "lo", "!"]
    assert out.events[-1]["usage"]["completion_tokens"] == 3
    assert out.first_token_ns is not None and out.start_ns < out.first_token_ns <= out.end_ns


def test_chunked_stream_cut_byte_by_byte_reads_the_same() -> None:
    wire = CHUNKED_HEAD + chunked(*STREAM)
    _, out = serve([wire[i : i + 1] for i in range(len(wire))], stream(), gap_s=0.0005)
    assert out.done and texts(out) == ["Hel", "lo", "!"]


def test_content_length_and_close_delimited_bodies() -> None:
    body = b"".join(STREAM)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    _, out = serve([head, body[:7], body[7:]], stream())
    assert out.done and texts(out) == ["Hel", "lo", "!"]
    _, out = serve([b"HTTP/1.0 200 OK\r\n\r\n", body], stream())
    assert out.done and texts(out) == ["Hel", "lo", "!"]


def test_interim_responses_are_skipped() -> None:
    _, out = serve([b"HTTP/1.1 100 Continue\r\n\r\n", CHUNKED_HEAD + chunked(*STREAM)], stream())
    assert out.done and texts(out) == ["Hel", "lo", "!"]


def test_request_carries_body_auth_and_connection_close() -> None:
    server, _ = serve([CHUNKED_HEAD + chunked(*STREAM)], stream(ClientSettings(api_key="k9")))
    (raw,) = server.requests
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    fields = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    assert fields[b"authorization"] == b"Bearer k9"
    assert fields[b"connection"] == b"close"
    assert fields[b"accept-encoding"] == b"identity"
    assert fields[b"host"] == f"127.0.0.1:{server.port}".encode()
    assert int(fields[b"content-length"]) == len(body) and json.loads(body) == {"x": 1}
    assert sum(1 for line in lines if line.lower().startswith(b"connection:")) == 1


def test_plain_get_and_post_json() -> None:
    async def body(url: str) -> Any:
        async with ClientSettings().build(url) as client:
            resp = await client.get("/health")
            return resp.status_code, resp.json()

    payload = b'{"status": "ok"}'
    server, got = serve([b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n" + payload], body)
    assert got == (200, {"status": "ok"})
    assert server.requests[0].startswith(b"GET /health HTTP/1.1\r\n")
    assert b"content-length" not in server.requests[0].lower()


def test_error_status_body_is_reported() -> None:
    body = b'{"error": "model not loaded"}'
    head = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n" % len(body)
    with pytest.raises(RequestFailed, match=r"HTTP 503 from /v1/chat/completions: .*not loaded"):
        serve([head + body], stream())


# --- broken responses: each an error, never a number ---------------------------------------------


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        ([], "Server disconnected without sending a response"),
        ([b"HTTP/1.1 200 OK\r\nContent-"], "closed the connection inside the response head"),
        ([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"], "not an HTTP/1.x status line"),
        ([b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"], "malformed header line"),
        ([CHUNKED_HEAD, chunked(STREAM[0])[:-5]], "peer closed connection without sending"),
        ([CHUNKED_HEAD, b"zz\r\n"], "bad chunk size line"),
        ([CHUNKED_HEAD, b"3\r\nabcXY"], "chunk data not followed by CRLF"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 9x\r\n\r\n"], "bad Content-Length"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n", STREAM[0]], "peer closed connection"),
    ],
)
def test_broken_responses_fail_the_request(pieces: list[bytes], message: str) -> None:
    with pytest.raises(RequestFailed, match=message):
        serve(pieces, stream())


def test_stream_without_done_is_an_error() -> None:
    with pytest.raises(RequestFailed, match=r"ended before \[DONE\] \(3 events\)"):
        serve([CHUNKED_HEAD + chunked(*STREAM[:3])], stream())


def test_stall_is_a_read_timeout() -> None:
    settings = ClientSettings(read_timeout_s=0.3)
    with pytest.raises(RequestFailed, match=r"read timeout: no data for 0.3 s"):
        serve([CHUNKED_HEAD, chunked(STREAM[0])[:-5]], stream(settings), hold_s=2.0)


def test_refused_connection_names_the_address() -> None:
    async def body(url: str) -> Any:
        async with ClientSettings().build(url) as client:
            return await stream_sse(client, "/x", {}, chat_has_content)

    server = Scripted([])
    asyncio.run(server.run(lambda url: asyncio.sleep(0)))  # a port that was just free
    with pytest.raises(RequestFailed, match=rf"cannot connect: 127.0.0.1:{server.port}: "):
        asyncio.run(body(f"http://127.0.0.1:{server.port}"))


def test_a_connection_reset_while_sending_is_a_failed_request() -> None:
    """The server resets the connection while a large body is still being sent: a failed
    request naming the address, never an OSError that escapes the request."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]

    def reset() -> None:
        conn, _ = listener.accept()
        conn.recv(1024)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    thread = threading.Thread(target=reset, daemon=True)
    thread.start()

    async def body() -> Any:
        async with ClientSettings(read_timeout_s=5).build(f"http://127.0.0.1:{port}") as client:
            payload = {"messages": [{"role": "user", "content": "x" * (32 << 20)}]}
            return await stream_sse(client, "/v1/chat/completions", payload, chat_has_content)

    try:
        with pytest.raises(RequestFailed, match=rf"request not sent to 127.0.0.1:{port}: "):
            asyncio.run(body())
    finally:
        thread.join(5)
        listener.close()


def test_https_goes_through_httpx_own_transport() -> None:
    async def check() -> None:
        async with ClientSettings().build("https://example.invalid") as client:
            assert not isinstance(client._transport, Http1Transport)
        with pytest.raises(httpx.UnsupportedProtocol, match="plain http:// only"):
            async with httpx.AsyncClient(transport=Http1Transport()) as client:
                await client.get("https://example.invalid/")

    asyncio.run(check())


# --- the pure parsers ------------------------------------------------------------------------


def test_chunked_decoder_every_split_gives_the_body() -> None:
    body = b"".join(STREAM)
    wire = chunked(body[:10], body[10:11], body[11:]).replace(b"\r\n0\r\n", b"\r\n0;ext=1\r\n")
    wire = wire[:-2] + b"X-Trailer: 1\r\n\r\n"
    for cut in range(len(wire) + 1):
        decoder = ChunkedDecoder()
        got = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert got == body and decoder.done, cut


@pytest.mark.parametrize("size", [b"-1", b"+5", b"", b"0x5"])
def test_chunked_decoder_refuses_bad_sizes(size: bytes) -> None:
    with pytest.raises(_ProtocolError, match="bad chunk size"):
        ChunkedDecoder().feed(size + b"\r\nhello\r\n")


def test_sse_splitter_every_split_and_line_ending() -> None:
    wire = b"".join(STREAM).replace(b"\n\n", b"\r\n\r\n", 1)
    wire = b": a comment\n" + wire.replace(b"data: [DONE]", b"event: end\ndata:[DONE]")
    expected = [json.dumps(e) for e in [*CONTENT, USAGE]] + ["[DONE]"]
    for cut in range(len(wire) + 1):
        sse = SseSplitter()
        assert sse.feed(wire[:cut]) + sse.feed(wire[cut:]) + sse.end() == expected, cut
    sse = SseSplitter()
    assert sse.feed(b"data: 1\n\ndata: [DONE]") == ["1"]
    assert sse.end() == ["[DONE]"]
    snow = "data: ☃ \n".encode()  # a three-byte character cut inside, then a bad byte
    sse = SseSplitter()
    assert sse.feed(snow[:7]) + sse.feed(snow[7:]) + sse.feed(b"data: \xff\n") == ["☃", "\ufffd"]
