"""The async HTTP load driver: one event loop thread, one httpx client per server, SSE streams.

Timing uses ``time.perf_counter_ns``. A stream must reach ``data: [DONE]`` and is read to the end
of the response (through :mod:`pytest_specdec.measure.http1` for ``http://``); any HTTP error,
malformed event, early end of stream or timeout raises :class:`RequestFailed` with its cause, so
that the caller records an error, never a number.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from pytest_specdec.measure.http1 import Http1Transport

T = TypeVar("T")


class RequestFailed(RuntimeError):
    """A request did not produce a usable measurement; ``str()`` says why."""


@dataclass(frozen=True)
class ClientSettings:
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 300.0
    api_key: str | None = None

    def build(
        self, base_url: str, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        """A client whose requests each open a new connection and close it at the end.

        ``http://`` goes through :class:`~pytest_specdec.measure.http1.Http1Transport` (the lean
        reader behind the driver's ceiling); ``https://`` through httpx's own transport.
        No keep-alive either way: engines close idle connections, and a request sent on one
        they closed fails ("disconnected without sending a response"); a loopback connect
        costs well under a millisecond of TTFT.
        """
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if transport is None and not base_url.startswith("https://"):
            transport = Http1Transport()
        return httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s),
            limits=httpx.Limits(max_keepalive_connections=0),
            transport=transport,
        )


class LoopThread:
    """A private asyncio loop in a daemon thread, so sync pytest code can drive async requests."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="specdec-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(_as_coro(coro), self._loop)
        return fut.result(timeout)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


async def _as_coro(aw: Awaitable[T]) -> T:
    return await aw


@dataclass
class StreamOutcome:
    """What one streamed request produced, with monotonic timings in nanoseconds."""

    events: list[dict[str, Any]] = field(default_factory=list)
    start_ns: int = 0
    first_token_ns: int | None = None
    end_ns: int = 0
    done: bool = False

    @property
    def wall_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def ttft_s(self) -> float | None:
        if self.first_token_ns is None:
            return None
        return (self.first_token_ns - self.start_ns) / 1e9


CANNOT_CONNECT = "cannot connect"
CLOSED_MID_RESPONSE = "connection closed by the server mid-response"


def _describe_http_error(exc: httpx.HTTPError, timeout: float | None) -> str:
    if isinstance(exc, httpx.ReadTimeout):
        return f"read timeout: no data for {timeout} s"
    if isinstance(exc, httpx.ConnectError):
        return f"{CANNOT_CONNECT}: {exc}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{CLOSED_MID_RESPONSE}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def connection_lost(error: str) -> bool:
    """Whether a request's ``error`` (as described here, perhaps after a prefix naming the
    request) is the server's socket gone: refused, or closed while it answered (what a dying
    engine leaves)."""
    return CANNOT_CONNECT in error or CLOSED_MID_RESPONSE in error


class SseSplitter:
    """Cuts a byte stream into SSE ``data:`` payloads, whatever the split of the pieces.

    One payload per ``data:`` line (the servers this driver reads put each event's JSON on one
    line); other fields and comments are skipped. Lines end in ``\n`` or ``\r\n``. Bytes are
    decoded as UTF-8 once per piece (a character cut between pieces is joined; invalid bytes
    become U+FFFD, as in a text layer).
    """

    def __init__(self) -> None:
        self._tail = ""
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode

    def feed(self, piece: bytes) -> list[str]:
        text = self._decode(piece)
        lines = (self._tail + text if self._tail else text).split("\n")
        self._tail = lines.pop()
        return [line[5:].strip() for line in lines if line.startswith("data:")]

    def end(self) -> list[str]:
        """The last line when the stream ended without a newline after it."""
        tail, self._tail = self._tail + self._decode(b"", True), ""
        return [tail[5:].strip()] if tail.startswith("data:") else []


async def stream_sse(
    client: httpx.AsyncClient,
    path: str,
    payload: Mapping[str, Any],
    has_content: Callable[[dict[str, Any]], bool],
) -> StreamOutcome:
    """POST ``payload`` and read the SSE stream to ``[DONE]``, then to the end of the response.

    ``has_content`` tells whether an event carries generated text; the first such event
    defines TTFT. The body is read in whatever pieces the transport yields (with
    :class:`~pytest_specdec.measure.http1.Http1Transport`, one per socket read) and split into
    events here, without httpx's text and line layers.
    """
    out = StreamOutcome(start_ns=time.perf_counter_ns())
    timeout = client.timeout.read
    sse = SseSplitter()
    try:
        async with client.stream("POST", path, json=dict(payload)) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode("utf-8", "replace")
                raise RequestFailed(f"HTTP {resp.status_code} from {path}: {body[:300].strip()}")
            async for piece in resp.aiter_bytes():
                if not out.done:
                    _add_events(out, sse.feed(piece), path, has_content)
            if not out.done:
                _add_events(out, sse.end(), path, has_content)
    except httpx.HTTPError as exc:
        if not out.done:
            raise RequestFailed(_describe_http_error(exc, timeout)) from exc
    if not out.done:
        raise RequestFailed(f"stream from {path} ended before [DONE] ({len(out.events)} events)")
    return out


def _add_events(
    out: StreamOutcome,
    payloads: list[str],
    path: str,
    has_content: Callable[[dict[str, Any]], bool],
) -> None:
    """Parse one piece's events; ``[DONE]`` stamps the end and ends parsing."""
    for data in payloads:
        if data == "[DONE]":
            out.done, out.end_ns = True, time.perf_counter_ns()
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise RequestFailed(f"malformed JSON in stream from {path}: {data[:120]!r}") from exc
        if not isinstance(event, dict):
            raise RequestFailed(f"unexpected stream event from {path}: {data[:120]!r}")
        if "error" in event:
            raise RequestFailed(f"server error in stream from {path}: {event['error']}")
        if out.first_token_ns is None and has_content(event):
            out.first_token_ns = time.perf_counter_ns()
        out.events.append(event)


async def post_json(client: httpx.AsyncClient, path: str, payload: Mapping[str, Any]) -> Any:
    """POST JSON and return the decoded body, or raise RequestFailed."""
    try:
        resp = await client.post(path, json=dict(payload))
    except httpx.HTTPError as exc:
        raise RequestFailed(_describe_http_error(exc, client.timeout.read)) from exc
    if resp.status_code != 200:
        raise RequestFailed(f"HTTP {resp.status_code} from {path}: {resp.text[:300].strip()}")
    try:
        return resp.json()
    except json.JSONDecodeError as exc:
        raise RequestFailed(f"malformed JSON from {path}: {resp.text[:120]!r}") from exc


async def get(client: httpx.AsyncClient, path: str) -> httpx.Response:
    try:
        return await client.get(path)
    except httpx.HTTPError as exc:
        raise RequestFailed(_describe_http_error(exc, client.timeout.read)) from exc
