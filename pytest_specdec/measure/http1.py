"""A lean HTTP/1.1 transport for httpx: one plain-TCP connection per request on asyncio streams.

The load driver reads every streamed token through this transport, so its per-chunk cost is
the driver's ceiling. httpx's default transport (httpcore + h11) turns each HTTP chunk into
several objects and events; here the response body is read in blocks as large as the socket
has, the chunked framing is stripped with slicing, and httpx sees one body piece per socket
read, however many SSE events it holds.

Scope, by design:

* ``http://`` only: ``client.ClientSettings.build`` gives ``https://`` URLs httpx's own
  transport.
* ``Connection: close``: no pool, no stale kept-alive connection an engine closed under us.
* Bodies framed by ``Transfer-Encoding: chunked``, ``Content-Length`` or the end of the
  connection; ``1xx`` interim responses are skipped; no content decoding (``Accept-Encoding:
  identity`` is sent).

Failures are httpx's own exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``WriteTimeout``, ``RemoteProtocolError``), so callers handle them as with any transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import httpx

T = TypeVar("T")

READ_SIZE = 1 << 16
MAX_HEAD_BYTES = 1 << 16
# Set by the transport itself: framing, encoding and connection handling.
_DROPPED_HEADERS = {
    b"connection", b"keep-alive", b"transfer-encoding", b"accept-encoding", b"content-length"
}  # fmt: skip


class _ProtocolError(Exception):
    """The body's framing is broken; becomes ``httpx.RemoteProtocolError``."""


if sys.version_info >= (3, 11):

    async def _within(aw: Awaitable[T], timeout: float | None) -> T:
        async with asyncio.timeout(timeout):
            return await aw

else:  # pragma: no cover - Python 3.10

    async def _within(aw: Awaitable[T], timeout: float | None) -> T:
        return await asyncio.wait_for(aw, timeout)


class ChunkedDecoder:
    """Strips ``Transfer-Encoding: chunked`` framing from bytes fed in any split."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._remaining = 0  # data bytes left in the current chunk
        self._need_crlf = False  # the CRLF after a chunk's data
        self._in_trailer = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Add received bytes; return the body bytes they complete."""
        buf = self._buf
        buf += data
        out = bytearray()
        while not self.done:
            if self._remaining:
                take = min(self._remaining, len(buf))
                out += buf[:take]
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    break
                self._need_crlf = True
            if self._need_crlf:
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise _ProtocolError(f"chunk data not followed by CRLF: {bytes(buf[:16])!r}")
                del buf[:2]
                self._need_crlf = False
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > 4096:
                    raise _ProtocolError("chunk size line longer than 4096 bytes")
                break
            line = bytes(buf[:end])
            del buf[: end + 2]
            if self._in_trailer:
                self.done = not line
                continue
            self._remaining = _chunk_size(line)
            self._in_trailer = self._remaining == 0
        return bytes(out)


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or text.strip(b"0123456789abcdefABCDEF"):
        raise _ProtocolError(f"bad chunk size line {line[:40]!r}")
    return int(text, 16)


class _Body(httpx.AsyncByteStream):
    """The response body, read in socket-sized blocks and closed with the connection."""

    def __init__(
        self,
        request: httpx.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        framing: str,
        length: int,
        read_timeout: float | None,
    ) -> None:
        self._request = request
        self._reader = reader
        self._writer = writer
        self._framing = framing  # "chunked" | "length" | "eof" | "none"
        self._left = length
        self._timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._framing == "none":
            return
        chunked = ChunkedDecoder() if self._framing == "chunked" else None
        while True:
            data = await self._read()
            if not data:
                if self._framing == "eof":
                    return
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body",
                    request=self._request,
                )
            if chunked is not None:
                try:
                    piece = chunked.feed(data)
                except _ProtocolError as exc:
                    raise httpx.RemoteProtocolError(str(exc), request=self._request) from exc
                if piece:
                    yield piece
                if chunked.done:
                    return
            elif self._framing == "length":
                piece = data[: self._left]
                self._left -= len(piece)
                yield piece
                if not self._left:
                    return
            else:
                yield data

    async def _read(self) -> bytes:
        try:
            return await _within(self._reader.read(READ_SIZE), self._timeout)
        except asyncio.TimeoutError as exc:
            raise httpx.ReadTimeout(
                f"no data for {self._timeout} s", request=self._request
            ) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=self._request) from exc

    async def aclose(self) -> None:
        await _close(self._writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, asyncio.TimeoutError):
        await _within(writer.wait_closed(), 1.0)


class Http1Transport(httpx.AsyncBaseTransport):
    """Plain HTTP/1.1 for ``httpx.AsyncClient(transport=...)``, one connection per request."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"{url}: Http1Transport speaks plain http:// only; "
                "use httpx's default transport for https://",
                request=request,
            )
        timeouts = request.extensions.get("timeout", {})
        host, port = url.host, url.port or 80
        try:
            reader, writer = await _within(
                asyncio.open_connection(host, port, limit=MAX_HEAD_BYTES), timeouts.get("connect")
            )
        except asyncio.TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"no connection to {host}:{port} within {timeouts.get('connect')} s",
                request=request,
            ) from exc
        except OSError as exc:
            raise httpx.ConnectError(
                f"{host}:{port}: {exc.strerror or exc}", request=request
            ) from exc
        try:
            body = await request.aread()
            writer.write(_head(request, len(body)) + body)
            try:
                await _within(writer.drain(), timeouts.get("write"))
            except asyncio.TimeoutError as exc:
                raise httpx.WriteTimeout(
                    f"request not sent within {timeouts.get('write')} s", request=request
                ) from exc
            except OSError as exc:  # the server closed or reset the connection mid-send
                raise httpx.WriteError(
                    f"request not sent to {host}:{port}: {exc.strerror or exc}", request=request
                ) from exc
            return await _response(request, reader, writer, timeouts.get("read"))
        except BaseException:
            await _close(writer)
            raise


def _head(request: httpx.Request, content_length: int) -> bytes:
    target = request.url.raw_path
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        if name.lower() not in _DROPPED_HEADERS:
            lines.append(name + b": " + value)
    lines.append(b"Accept-Encoding: identity")
    lines.append(b"Connection: close")
    if content_length or request.method not in ("GET", "HEAD"):
        lines.append(b"Content-Length: " + str(content_length).encode("ascii"))
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _response(
    request: httpx.Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    read_timeout: float | None,
) -> httpx.Response:
    while True:
        try:
            head = await _within(reader.readuntil(b"\r\n\r\n"), read_timeout)
        except asyncio.TimeoutError as exc:
            raise httpx.ReadTimeout(f"no response for {read_timeout} s", request=request) from exc
        except asyncio.IncompleteReadError as exc:
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response."
                if not exc.partial
                else f"server closed the connection inside the response head: {exc.partial[:80]!r}",
                request=request,
            ) from exc
        except asyncio.LimitOverrunError as exc:
            raise httpx.RemoteProtocolError(
                f"response head larger than {MAX_HEAD_BYTES} bytes", request=request
            ) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=request) from exc
        status, reason, headers = _parse_head(head, request)
        if not 100 <= status < 200:
            break
    framing, length = _framing(request, status, headers)
    body = _Body(request, reader, writer, framing, length, read_timeout)
    return httpx.Response(
        status,
        headers=headers,
        stream=body,
        extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
    )


def _parse_head(
    head: bytes, request: httpx.Request
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(
            f"not an HTTP/1.x status line: {lines[0][:80]!r}", request=request
        )
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}", request=request)
        headers.append((name, value.strip()))
    return int(parts[1]), parts[2] if len(parts) > 2 else b"", headers


def _framing(
    request: httpx.Request, status: int, headers: list[tuple[bytes, bytes]]
) -> tuple[str, int]:
    if request.method == "HEAD" or status in (204, 304):
        return "none", 0
    values = {name.lower(): value for name, value in headers}
    if b"chunked" in values.get(b"transfer-encoding", b"").lower():
        return "chunked", 0
    if b"content-length" in values:
        raw = values[b"content-length"]
        if not raw.isdigit():
            raise httpx.RemoteProtocolError(f"bad Content-Length {raw[:40]!r}", request=request)
        length = int(raw)
        return ("length", length) if length else ("none", 0)
    return "eof", 0
