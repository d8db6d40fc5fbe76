"""One HTTP/1.1 connection to an upstream: ``UpstreamConnection``, an ``asyncio.Protocol`` that
writes a request and parses its answer with ``httptools`` (llhttp, the parser of Node.js and
uvicorn), and ``Body``, the answer's body as it arrives.

Ours rather than aiohttp's client: what made aiohttp's client fast enough here was its private
parts (its reader's waiter, its protocol's parser state), which any minor release may rename.
This rests on asyncio's protocol contract and httptools' documented callbacks alone. A body is
handed on as the parser gives it (chunks undone, gzip or deflate decoded), and whoever reads it
may be told of each arrival by a plain callback (``Body.listener``): a stream's pipe is woken so,
without a future per read.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Final, cast

import httptools

__all__ = [
    "HEAD_MAX",
    "HIGH_WATER",
    "Body",
    "BrokenAnswer",
    "Head",
    "InvalidAnswer",
    "UpstreamConnection",
]

# An answer's status line and headers together, at most (aiohttp's client allowed 8 KiB a line).
HEAD_MAX: Final = 64 * 1024
# A body holding this much unread stops reading its connection until it is read (TCP's flow
# control then holds the upstream back).
HIGH_WATER: Final = 128 * 1024
# A request body up to this size goes out in one write with its head; a larger one beside it.
COALESCE: Final = 16 * 1024


class BrokenAnswer(ConnectionError):
    """The connection ended before the answer did."""


class InvalidAnswer(Exception):
    """What the upstream sent is not HTTP/1.1 (a malformed head or chunk, an unknown coding)."""


class Body:
    """An answer's body: what has arrived and not been read, whether it ended, or how it failed.

    Read by ``readany`` (waiting) or ``read_nowait``; what came before a failure is read first,
    then the failure is raised. ``listener``, if set, is called at each arrival, at the end and
    on a failure, from the connection's ``data_received`` (so it must only schedule work).
    """

    __slots__ = (
        "_chunks",
        "_connection",
        "_decoder",
        "_ended",
        "_eof_callbacks",
        "_failure",
        "_raw_deflate_tried",
        "_size",
        "_waiter",
        "listener",
        "total_bytes",
    )

    def __init__(self, connection: UpstreamConnection, coding: str) -> None:
        self._connection = connection
        self._chunks: list[bytes] = []
        self._size = 0  # bytes held unread
        self.total_bytes = 0  # bytes handed on so far, decoded
        self._ended = False
        self._failure: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._eof_callbacks: list[Callable[[], None]] = []
        self.listener: Callable[[], None] | None = None
        # gzip or zlib-wrapped deflate, told apart by their headers (wbits 32 + 15, RFC 1950/1952).
        self._decoder = zlib.decompressobj(47) if coding in ("gzip", "x-gzip", "deflate") else None
        self._raw_deflate_tried = coding != "deflate"  # only deflate has a raw variant

    # The connection's side.

    def feed(self, data: bytes) -> None:
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error:
                if self._raw_deflate_tried or self.total_bytes:
                    self._connection.abandon(InvalidAnswer("the body's coding is broken"))
                    return
                # "deflate" sent as a raw stream, without zlib's header: a common mistake of
                # servers (RFC 9110 section 8.4.1.2 says zlib), which clients accept.
                self._raw_deflate_tried = True
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                self.feed(data)
                return
            if not data:
                return
        self._chunks.append(data)
        self._size += len(data)
        self.total_bytes += len(data)
        if self._size > HIGH_WATER:
            self._connection.pause()
        self._wake()

    def end(self) -> None:
        if self._failure is not None:
            return  # failed already (a broken coding): the failure is the body's last word
        if self._decoder is not None:
            try:
                rest = self._decoder.flush()
            except zlib.error:
                self._connection.abandon(InvalidAnswer("the body's coding is broken"))
                return
            if rest:
                self._chunks.append(rest)
                self._size += len(rest)
                self.total_bytes += len(rest)
            self._decoder = None
        self._ended = True
        self._wake()
        callbacks, self._eof_callbacks = self._eof_callbacks, []
        for callback in callbacks:
            callback()

    def fail(self, failure: BaseException) -> None:
        if self._ended or self._failure is not None:
            return
        self._failure = failure
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        listener = self.listener
        if listener is not None:
            listener()

    # The reader's side.

    @property
    def held(self) -> int:
        """Bytes arrived and not read yet."""
        return self._size

    def is_eof(self) -> bool:
        """The body ended cleanly (what it holds may still be unread)."""
        return self._ended

    def exception(self) -> BaseException | None:
        return self._failure

    def on_eof(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the body has ended cleanly (at once if it has)."""
        if self._ended:
            callback()
        else:
            self._eof_callbacks.append(callback)

    def read_nowait(self) -> bytes:
        """What has arrived and not been read (b"" if nothing has); raises the failure once
        everything before it has been read."""
        chunks = self._chunks
        if not chunks:
            if self._failure is not None:
                raise self._failure
            return b""
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        self._connection.resume()
        return data

    async def readany(self) -> bytes:
        """The next bytes of the body, waiting for them; b"" at its end."""
        while not self._chunks and not self._ended and self._failure is None:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self.read_nowait()

    async def read_upto(self, limit: int) -> bytes:
        """The body, to its end or to ``limit`` bytes, whichever comes first."""
        parts: list[bytes] = []
        size = 0
        while size < limit:
            data = await self.readany()
            if not data:
                break
            parts.append(data)
            size += len(data)
        return b"".join(parts)[:limit]


class Head:
    """An answer's status line and headers (names in lower case; repeated ones joined with
    ", ", as RFC 9110 section 5.3 allows), and its body."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: Body) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


class UpstreamConnection(asyncio.Protocol):
    """A keep-alive connection: ``request`` writes one request and waits for its answer's head;
    its body then arrives in ``Head.body``. One request at a time (no pipelining)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[Head] | None = None
        self._reason = bytearray()
        self._fields: list[tuple[bytes, bytes]] = []
        self._head_size = 0  # bytes read before the head was whole (a head in pieces)
        self._fields_size = 0  # the head's headers so far, as parsed
        self._refused: InvalidAnswer | None = None
        self._informational = False
        self._until_close = False  # the body runs to the connection's end
        self.body: Body | None = None
        # A request is out and its answer has not ended: what arrives is its answer. Whatever
        # arrives otherwise answers nobody's request, and would be taken for the next one's
        # answer (another team's perhaps): the connection is closed instead.
        self.busy = False
        self.reusable = False  # its last answer ended cleanly, and keep-alive
        self.closed = False
        self._paused = False
        self.released_at = 0.0  # when it last went idle, on the loop's clock (the pool's)

    # asyncio's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport's subclasses, but have its methods.
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.abandon(None)
            return
        if self.body is None:
            self._head_size += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            refused, self._refused = self._refused, None
            self.abandon(refused if refused is not None else InvalidAnswer(str(exc)))
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.abandon(InvalidAnswer(f"malformed answer: {exc}"))
        else:
            if self.body is None and self._head_size > HEAD_MAX:
                self.abandon(InvalidAnswer(f"an answer's head of more than {HEAD_MAX} bytes"))

    def eof_received(self) -> bool | None:
        return False  # close the transport (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        self.busy = False
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(BrokenAnswer("the upstream closed the connection before answering"))
        body = self.body
        if body is not None and not body.is_eof():
            if self._until_close and exc is None:
                body.end()  # a body without a length or chunks ends with its connection
            else:
                body.fail(BrokenAnswer("the upstream closed the connection mid-answer"))

    # The parser's callbacks (httptools).

    def _refuse(self, reason: str) -> InvalidAnswer:
        # Kept for data_received: httptools raises its own error for whatever a callback raised.
        refused = self._refused = InvalidAnswer(reason)
        return refused

    def on_message_begin(self) -> None:
        if not self.busy or self.body is not None:
            # A second answer to one request, or bytes after the last one's end.
            raise self._refuse("the upstream sent an answer nobody asked for")
        self._reason.clear()
        self._fields.clear()
        self._fields_size = 0

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        # Counted here too: a head that came whole in one read is parsed before data_received
        # could measure it.
        self._fields_size += len(name) + len(value) + 4
        if self._fields_size > HEAD_MAX:
            raise self._refuse(f"an answer's head of more than {HEAD_MAX} bytes")
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            # 100 Continue and 103 Early Hints precede the real answer; llhttp ends each as a
            # message of its own. 101 is refused: nothing here asks to switch protocols.
            if status == 101:
                raise self._refuse("the upstream switched protocols")
            self._informational = True
            return
        headers: dict[str, str] = {}
        for raw_name, raw_value in self._fields:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1").strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        coding = headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("identity", "gzip", "x-gzip", "deflate", ""):
            raise self._refuse(f"a body in a coding that was not asked for: {coding!r}")
        framing = headers.get("transfer-encoding", "").lower()
        self._until_close = (
            "content-length" not in headers
            and "chunked" not in framing
            and status not in (204, 304)
        )
        body = self.body = Body(self, coding)
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_result(Head(status, self._reason.decode("latin-1"), headers, body))

    def on_body(self, data: bytes) -> None:
        body = self.body
        if body is not None:
            body.feed(data)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            self._reason.clear()
            self._fields.clear()
            return
        body = self.body
        self.busy = False
        transport = self.transport
        self.reusable = (
            self._parser.should_keep_alive()
            and transport is not None
            and not transport.is_closing()
            and (body is None or body.exception() is None)
        )
        # The answer is all here, read or not: read on, so that whatever the upstream sends
        # while the connection is idle is seen (and the connection closed for it).
        self.resume()
        if body is not None:
            body.end()

    # The pool's and the client's side.

    def request(self, head: bytes, body: bytes) -> asyncio.Future[Head]:
        """Write a request and return the future of its answer's head."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            raise BrokenAnswer("the upstream closed the connection")
        answer = self._head = asyncio.get_running_loop().create_future()
        self.busy = True
        self.reusable = False
        self.body = None
        self._head_size = 0
        if len(body) <= COALESCE:
            transport.write(head + body)  # one copy, one send
        else:
            transport.writelines((head, body))
        return answer

    @property
    def idle_usable(self) -> bool:
        """Open, its last answer over and keep-alive, nothing unread: fit for another request."""
        transport = self.transport
        return (
            self.reusable
            and not self.busy
            and transport is not None
            and not transport.is_closing()
            and not self._paused
        )

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        """Read again: the body's reader took all it held."""
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abandon(self, failure: BaseException | None) -> None:
        """Close the connection; the answer in progress fails with ``failure``."""
        self.reusable = False
        self.busy = False
        head, self._head = self._head, None
        if failure is not None:
            if head is not None and not head.done():
                head.set_exception(failure)
            body = self.body
            if body is not None:
                body.fail(failure)
        self.close()

    def close(self) -> None:
        self.reusable = False
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.close()
