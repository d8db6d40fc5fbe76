"""``Pipelined``: a connection whose calls are written at once and answered in order, on
asyncio's Protocol: the supervisor's store's orjson lines (``proxy.http.limits.stores``).

The calls made in one turn of the loop go out in one write; each reply, parsed as it arrives in
``data_received``, resolves its call's future: no task is woken but the caller's. One watchdog
per connection bounds every wait, instead of a timer per call, which would cost a request
more than the call itself.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class Incomplete(Exception):
    """The reply has not all arrived yet."""


class ProtocolError(ValueError):
    """What came is not a reply: the connection is dropped."""


class _Call(Generic[T]):
    """A call's replies, for a future or a callback (``Pipelined.send_then``)."""

    __slots__ = ("future", "left", "replies", "sent", "then")

    def __init__(
        self,
        future: asyncio.Future[list[T]] | None,
        then: Callable[[list[T] | Exception], None] | None,
        count: int,
        sent: float,
    ) -> None:
        self.future = future
        self.then = then
        self.left = count
        self.replies: list[T] = []
        self.sent = sent

    def answered(self, outcome: list[T] | Exception) -> None:
        if self.then is not None:
            self.then(outcome)
        elif self.future is not None and not self.future.done():
            if isinstance(outcome, Exception):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)


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
        self._queue(_Call(future, None, count, self._loop.time()), data, at_once=False)
        return future

    def send_then(
        self, data: bytes, count: int, then: Callable[[list[T] | Exception], None]
    ) -> None:
        """``send``, written now (after what was sent before it this turn), for a caller that
        gathered its calls itself; ``then`` is called with the replies or the failure as they
        come, with no turn of the loop in between (a future's callbacks wait for one). It must
        not raise."""
        self._queue(_Call(None, then, count, self._loop.time()), data, at_once=True)

    def _queue(self, call: _Call[T], data: bytes, *, at_once: bool) -> None:
        if self.closed or self._transport is None:
            call.answered(ConnectionError(f"the connection to {self.name} is closed"))
            return
        self._calls.append(call)
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(call.sent + self.timeout, self._watch)
        if at_once:
            self._out.append(data)
            self._flush()
            return
        if not self._out:
            # Written once this turn of the loop is over, with every call made during it: one
            # write (and one reply to read) for the requests of a busy moment.
            self._loop.call_soon(self._flush)
        self._out.append(data)

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
                    call.answered(call.replies)
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
            self._calls.popleft().answered(error)

    def close(self) -> None:
        self.closed = True
        self._out = []
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._transport is not None:
            self._transport.close()
