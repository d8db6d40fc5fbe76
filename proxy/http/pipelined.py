"""``Pipelined``: a connection whose calls are written at once and answered in order, on
asyncio's Protocol: Redis's RESP2 (``proxy.http.resp``) and the supervisor's store's orjson
lines (``proxy.http.stores``).

The calls made in one turn of the loop go out in one write; each reply, parsed as it arrives in
``data_received``, resolves its call's future: no task is woken but the caller's. One watchdog
per connection bounds every wait, instead of a timer per call, which would cost a request
more than the call itself.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class Incomplete(Exception):
    """The reply has not all arrived yet."""


class ProtocolError(ValueError):
    """What came is not a reply: the connection is dropped."""


class _Call(Generic[T]):
    __slots__ = ("future", "left", "replies", "sent")

    def __init__(self, future: asyncio.Future[list[T]], count: int, sent: float) -> None:
        self.future = future
        self.left = count
        self.replies: list[T] = []
        self.sent = sent


class Pipelined(asyncio.Protocol, Generic[T]):
    """``timeout``: a call not answered within it fails with ``TimeoutError``, and so does
    every call after it, for the connection is closed (a late reply would be taken for the
    next call's). ``limit``: the most of a reply kept waiting for its end. Subclasses say how
    a reply is read (``parse``)."""

    name = "the server"  # for errors: "the connection to <name> was lost"

    def __init__(self, timeout: float, limit: int) -> None:
        self.timeout = timeout
        self.limit = limit
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._calls: collections.deque[_Call[T]] = collections.deque()
        self._out: list[bytes] = []
        self._loop = asyncio.get_running_loop()
        self._watchdog: asyncio.TimerHandle | None = None
        self.closed = False

    def parse(self, buffer: bytearray, start: int) -> tuple[T, int]:
        """One reply from ``buffer[start:]`` and where the next begins; ``Incomplete`` if it
        has not all come yet, ``ValueError`` if it is no reply."""
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (uvloop's is not an asyncio.Transport subclass, but is one).
        self._transport = cast(asyncio.Transport, transport)

    def send(self, data: bytes, count: int) -> asyncio.Future[list[T]]:
        """The replies to the ``count`` calls packed in ``data``, in order (a connection lost
        fails the future with ``ConnectionError``)."""
        future: asyncio.Future[list[T]] = self._loop.create_future()
        if self.closed or self._transport is None:
            future.set_exception(ConnectionError(f"the connection to {self.name} is closed"))
            return future
        now = self._loop.time()
        self._calls.append(_Call(future, count, now))
        if not self._out:
            # Written once this turn of the loop is over, with every call made during it: one
            # write (and one reply to read) for the requests of a busy moment.
            self._loop.call_soon(self._flush)
        self._out.append(data)
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(now + self.timeout, self._watch)
        return future

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and not self.closed and self._transport is not None:
            self._transport.write(b"".join(out))

    def _watch(self) -> None:
        self._watchdog = None
        if not self._calls:
            return
        oldest = self._calls[0].sent
        if self._loop.time() - oldest >= self.timeout:
            self._fail(TimeoutError(f"{self.name} did not answer within {self.timeout:g} s"))
        else:
            self._watchdog = self._loop.call_at(oldest + self.timeout, self._watch)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        try:
            while start < len(buffer):
                reply, start = self.parse(buffer, start)
                call = self._calls[0]
                call.replies.append(reply)
                call.left -= 1
                if not call.left:
                    self._calls.popleft()
                    if not call.future.done():
                        call.future.set_result(call.replies)
        except Incomplete:
            pass
        except (ValueError, IndexError) as exc:  # IndexError: nobody asked
            del buffer[:start]
            self._fail(ConnectionError(f"{self.name} spoke wrongly: {exc}"))
            return
        del buffer[:start]
        if len(buffer) > self.limit:
            self._fail(ConnectionError(f"a reply from {self.name} is too large"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"the connection to {self.name} was lost: {exc or 'closed'}"))

    def _fail(self, error: Exception) -> None:
        self.close()
        while self._calls:
            call = self._calls.popleft()
            if not call.future.done():
                call.future.set_exception(error)

    def close(self) -> None:
        self.closed = True
        self._out = []
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._transport is not None:
            self._transport.close()
