"""``Pipe``: a stream's events relayed in the event loop's callbacks, not in its task.

Relaying a stream in its handler's task costs, for every read, a future for the body to
complete, the task woken to resume the coroutines waiting on it, and the coroutines of aiohttp's
``write``. Relayed by a pipe, an event of a slow stream takes measurably less CPU
(docs/performance.md).

A pipe is its body's ``listener`` (``proxy.http.connection.Body``): each arrival, the body's end
or its failure hands the pipe's ``_step`` to the loop's ``Relays`` (not run inside the
connection's ``data_received``, where the parser is still at work), which run the steps a few at
a time in the loop's callbacks. A step takes what was read, decodes and normalizes it, and writes
the frames straight to the client's transport, framed as the response's headers said. The
handler's task waits only for what needs it (``flow``): the normalizer's last frames, whose write
ends the response, or a client that is not reading (its transport holds more than its high-water
mark), for whom the task waits until it drained.

The task's deadline still bounds every wait: each step moves it to the idle limit, and its
expiry cancels the task, which disarms the pipe.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from time import perf_counter
from typing import Final

import orjson

from proxy.core.errors import UpstreamError, UpstreamProtocolError, handled
from proxy.core.exchange import Exchange
from proxy.core.framing import Decoder
from proxy.core.sse import Event
from proxy.http.connection import Body
from proxy.http.deadline import Deadline
from proxy.http.upstream import TRANSPORT_ERRORS, upstream_error_for
from proxy.normalize.present import EventStream

__all__ = ["STEPS", "Pipe", "Relays", "frames_for"]

log = logging.getLogger("proxy.relay")

# How many pipes a callback of Relays steps: few, so that a request waits little for the pipes
# stepped ahead of it; four rather than eight lowered time to first token (docs/performance.md).
STEPS: Final = 4


def frames_for(normalizer: EventStream, events: list[Event], at_end: bool) -> list[bytes]:
    """The frames for ``events`` (and the end of the body, if it came)."""
    frames: list[bytes] = []
    try:
        for event in events:
            frames += normalizer.feed(event)
            if normalizer.ended:
                return frames
        if at_end:
            frames += normalizer.finish()
    except orjson.JSONEncodeError:
        # orjson writes less deep a document than it reads: the upstream's, not a bug.
        frames += normalizer.fail(
            UpstreamProtocolError("The upstream sent an event nested too deeply to pass on")
        )
    except Exception:
        # Defence in depth: a bug of ours must end this stream cleanly, not the process.
        log.exception("the normalizer failed")
        failure = UpstreamProtocolError("The proxy could not process the upstream's stream")
        frames += normalizer.fail(failure)
    return frames


class Relays:
    """The steps of one event loop's pipes that have data, taken ``STEPS`` at a time, so that
    the loop takes in what else has arrived between one batch and the next.

    The slow streams' events come in bursts (streams fall into step with their upstream's
    timer): a step per callback, as they came, and a request that arrived in the middle of a
    burst waited for all of it before its handler began, and its time to first token with it.
    A few steps per callback measurably lowered that time (docs/performance.md; ``STEPS``).
    """

    __slots__ = ("_loop", "_queued", "_ready")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._ready: collections.deque[Callable[[], None]] = collections.deque()
        self._queued = False

    def add(self, step: Callable[[], None]) -> None:
        self._ready.append(step)
        if not self._queued:
            self._queued = True
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        ready = self._ready
        try:
            for _ in range(min(STEPS, len(ready))):
                ready.popleft()()
        finally:
            # Behind whatever was queued meanwhile; and whatever a step raised (the loop's
            # exception handler tells it), the others still run.
            if ready:
                self._loop.call_soon(self._run)
            else:
                self._queued = False


class Pipe:
    """Relays one stream, once its response has started, from the upstream's body to the
    client's transport."""

    __slots__ = (
        "_armed_at",
        "_chunked",
        "_content",
        "_deadline",
        "_decoder",
        "_exchange",
        "_finished",
        "_high_water",
        "_idle",
        "_loop",
        "_normalizer",
        "_relays",
        "_timer",
        "_transport",
        "_waiting",
        "data",
    )

    def __init__(
        self,
        content: Body,
        decoder: Decoder,
        normalizer: EventStream,
        transport: asyncio.Transport,
        *,
        chunked: bool,
        timer: Deadline,
        idle: float,
        deadline: float,
        exchange: Exchange,
        relays: Relays,
    ) -> None:
        self._loop = timer.loop
        self._relays = relays
        self._content = content
        self._decoder = decoder
        self._normalizer = normalizer
        self._transport = transport
        # Past this, the transport asks its protocol to pause writing (64 KiB in uvloop and
        # asyncio): the pipe then leaves the wait for the client to the task (aiohttp's drain).
        self._high_water = transport.get_write_buffer_limits()[1]
        self._chunked = chunked  # the response's body is chunked (HTTP/1.1), not raw (1.0)
        self._timer = timer
        self._idle = idle
        self._deadline = deadline  # loop time by which the whole exchange must be over
        self._exchange = exchange
        self._finished: asyncio.Future[list[bytes]] | None = None
        self._armed_at = 0.0
        self._waiting = False  # armed: the next read, the body's end or a failure steps it
        self.data = b""  # the last read: b"" once the upstream's body has ended

    async def flow(self) -> list[bytes]:
        """Relay until the task is needed: the normalizer's last frames, not yet written (the
        normalizer has ended), or nothing (the client's transport is full: drain it, then
        ``flow`` again). Raises ``ConnectionResetError`` if the client's connection closed."""
        finished: asyncio.Future[list[bytes]] = self._loop.create_future()
        self._finished = finished
        self._armed_at = perf_counter()
        self._step()
        if not finished.done():
            try:
                await finished
            finally:
                # Done, cancelled (the deadline, or the client left) or failed: no step may run
                # any more. Let go of the body too: kept, the listener (a bound method) would
                # tie the pipe, the body and the normalizer into a cycle that only a full
                # collection frees, and a worker's memory grew with it.
                self._waiting = False
                self._content.listener = None
        return finished.result()

    def _wake(self) -> None:
        if self._waiting:
            self._waiting = False
            self._relays.add(self._step)

    def _step(self) -> None:
        finished = self._finished
        if finished is None or finished.done():
            return  # the task stopped waiting
        self._exchange.upstream_wait += perf_counter() - self._armed_at
        try:
            self._relay(finished)
        except Exception as exc:
            # The client's connection closed (ConnectionResetError, as a write in the task would
            # raise), or a bug of ours: the task raises it, rather than waiting for a timeout.
            finished.set_exception(exc)

    def _relay(self, finished: asyncio.Future[list[bytes]]) -> None:
        content = self._content
        normalizer = self._normalizer
        while True:
            try:
                data = content.read_nowait()
                if data:
                    events = self._decoder.feed(data)
                elif content.is_eof():
                    events = self._decoder.close()
                else:
                    # Nothing more for now: wait for the next read, within the idle limit.
                    self._timer.move(min(self._loop.time() + self._idle, self._deadline))
                    self._armed_at = perf_counter()
                    self._waiting = True
                    content.listener = self._wake
                    return
            except TRANSPORT_ERRORS as exc:
                data = b""
                frames = normalizer.fail(upstream_error_for(handled(exc), "stream"))
            except UpstreamError as exc:  # an event over the size bound
                data = b""
                frames = normalizer.fail(exc)
            else:
                frames = frames_for(normalizer, events, not data)
            self.data = data
            if normalizer.ended:
                finished.set_result(frames)
                return
            if frames and not self._write(frames):
                finished.set_result([])
                return

    def _write(self, frames: list[bytes]) -> bool:
        """Write, and say whether the client's transport can take more."""
        transport = self._transport
        if transport.is_closing():
            raise ConnectionResetError("The client's connection is closed")
        body = b"".join(frames) if len(frames) > 1 else frames[0]
        transport.write(b"%x\r\n%b\r\n" % (len(body), body) if self._chunked else body)
        return transport.get_write_buffer_size() <= self._high_water
