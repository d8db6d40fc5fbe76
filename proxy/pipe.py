"""``Pipe``: a stream's events relayed in the event loop's callbacks, not in its task.

Relaying a stream in its handler's task costs, for every read, a future for aiohttp's reader to
complete, the task woken to resume the coroutines waiting on it, and the coroutines of aiohttp's
``write``. Relayed by pipes, an event of a slow stream takes measurably less CPU
(docs/performance.md).

A pipe stands in for the future aiohttp's ``StreamReader`` completes when data arrives (its
``_waiter``): ``feed_data``, ``feed_eof`` and ``set_exception`` call its ``set_result`` or
``set_exception``, which hands its ``_step`` to the loop's ``Relays`` (not run inside the
protocol's ``data_received``, where reading would re-enter aiohttp's parser), which run the
steps a few at a time in the loop's callbacks. A step takes what was read,
decodes and normalizes it, and writes the frames straight to the client's transport, framed as
the response's headers said. The handler's task waits only for what needs it (``flow``): the
normalizer's last frames, whose write ends the response, or a client that is not reading
(its transport holds more than its high-water mark), for whom the task waits until it drained.
A pipe may also take a chunked body from the connection itself, past aiohttp's parser and
reader (``Pipe``'s doc says how).

The task's deadline still bounds every wait: each step moves it to the idle limit, and its
expiry cancels the task, which disarms the pipe. ``PIPES`` is False if aiohttp's reader no longer
has its ``_waiter``; the relay then reads in its task as before; ``TAKING`` is False if it no
longer says where its chunks end, and pipes then leave every body to it (tests/test_pipe.py
fails in either case).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from time import perf_counter
from typing import Final, cast

import aiohttp
import orjson
from aiohttp.http_exceptions import TransferEncodingError

from proxy.chunks import ChunkDecoder
from proxy.deadline import Deadline
from proxy.errors import UpstreamError, UpstreamProtocolError, handled
from proxy.exchange import Exchange
from proxy.normalize import StreamNormalizer
from proxy.pool import UpstreamProtocol
from proxy.sse import Event, SSEDecoder
from proxy.upstream import TRANSPORT_ERRORS, upstream_error_for

__all__ = ["HELD_MAX", "PIPES", "STEPS", "TAKE_TRIES", "Pipe", "Relays", "frames_for"]

log = logging.getLogger("proxy.relay")

PIPES: Final = "_waiter" in getattr(aiohttp.StreamReader, "__slots__", ())
# A pipe takes its stream's body from the connection itself when aiohttp's reader still says
# where its last chunk ended and what it holds (``_http_chunk_splits``, ``_buffer``).
TAKING: Final = {"_http_chunk_splits", "_buffer"} <= set(
    getattr(aiohttp.StreamReader, "__slots__", ())
)
# What a pipe taking its body holds before it stops reading the connection: aiohttp's reader's
# mark (twice its limit of 64 KiB), which it stands in for.
HELD_MAX: Final = 128 * 1024
# How many reads a pipe checks for one that ends where a chunk ends before it leaves the body
# to aiohttp's reader (each is taken apart twice meanwhile); the first usually does.
TAKE_TRIES: Final = 8
# How many pipes a callback of Relays steps: few, so that a request waits little for the pipes
# stepped ahead of it; four rather than eight lowered time to first token (docs/performance.md).
STEPS: Final = 4


def frames_for(normalizer: StreamNormalizer, events: list[Event], at_end: bool) -> list[bytes]:
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
    """Relays one stream, once its response has started, from the upstream's reader to the
    client's transport; when allowed (``direct``: a body in chunks, not encoded), from the
    upstream's connection itself.

    Taking the body: aiohttp's parser and reader cost, for every read, the parse, a call per
    chunk's start and end, the reader's ``feed_data`` and the pipe's ``read_nowait``. A pipe
    allowed to take its body sets itself as the connection's ``sink`` (``UpstreamProtocol``);
    it then sees each read after the parser has, and takes the connection's reads from the
    first that ends where a chunk ends, as aiohttp's parser and its own ``ChunkDecoder`` both
    find (then the parser is between two chunks, and so is the decoder from there on). What it
    takes waits in ``_held`` for its step; past ``HELD_MAX``, it stops reading the connection
    until a step takes it, as aiohttp's reader would. The body's last chunk goes back to the
    parser, which ends the message as it would have (the reader's end, which wakes the pipe,
    and the connection back to the pool, once the pipe has let go). The pipe stays the
    reader's waiter whenever it waits, so that a connection lost or a parser's error reaches it.
    A read costs less in the decoder than in aiohttp's parser and reader, and a stream
    measurably less CPU (docs/performance.md).
    """

    __slots__ = (
        "_armed_at",
        "_chunked",
        "_chunks",
        "_content",
        "_deadline",
        "_decoder",
        "_exchange",
        "_finished",
        "_held",
        "_held_size",
        "_high_water",
        "_idle",
        "_loop",
        "_normalizer",
        "_paused",
        "_protocol",
        "_relays",
        "_timer",
        "_transport",
        "_tries",
        "_waiting",
        "data",
    )

    def __init__(
        self,
        content: aiohttp.StreamReader,
        decoder: SSEDecoder,
        normalizer: StreamNormalizer,
        transport: asyncio.Transport,
        *,
        chunked: bool,
        timer: Deadline,
        idle: float,
        deadline: float,
        exchange: Exchange,
        relays: Relays,
        direct: bool = False,
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
        # Taking the body from the connection (the class's doc).
        self._protocol: UpstreamProtocol | None = None  # while it is the connection's sink
        self._chunks: ChunkDecoder | None = None  # once it takes the connection's reads
        self._held: list[bytes] = []
        self._held_size = 0
        self._paused = False  # it stopped reading the connection
        self._tries = 0
        protocol = content._protocol
        if (
            direct
            and TAKING
            and isinstance(protocol, UpstreamProtocol)
            and protocol.sink is None
            and protocol._payload is content
            and not content.is_eof()
        ):
            self._protocol = protocol
            protocol.sink = self

    @property
    def taking(self) -> bool:
        """It took the body from the connection (and still does, unless the body ended)."""
        return self._chunks is not None

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
            except asyncio.CancelledError:
                # The deadline, or the client left: no step may run any more, and what comes
                # from the upstream is the reader's again, if it can be.
                self._let_go()
                raise
            finally:
                self._waiting = False
                if cast(object, self._content._waiter) is self:
                    self._content._waiter = None
        return finished.result()

    # The reader's side: what aiohttp calls on its waiter.

    def done(self) -> bool:
        return False

    # A bound method made per read, not kept: kept, it would tie the pipe into a reference
    # cycle, and a pipe outlives its stream's young collections, so what it holds (the reader,
    # the normalizer) stayed until a full collection, and a worker's memory grew with it.
    # For the same reason the connection lets go of its sink when the stream is over.

    def set_result(self, result: None) -> None:
        self._wake()

    def set_exception(self, exc: BaseException) -> None:
        # The reader keeps the exception, and reading raises it: the step tells it.
        self._wake()

    def _wake(self) -> None:
        if self._waiting:
            self._waiting = False
            self._relays.add(self._step)

    # The connection's side, while the pipe is its sink.

    def received(self, data: bytes) -> None:
        protocol = self._protocol
        assert protocol is not None
        chunks = self._chunks
        if chunks is None:
            self._try_taking(protocol, data)
            return
        try:
            payload, rest = chunks.feed(data)
        except UpstreamProtocolError as exc:
            # What aiohttp's parser would refuse too: letting go closes the connection.
            self._let_go()
            self._content.set_exception(TransferEncodingError(exc.message))
            return
        if payload and not self._normalizer.ended:  # once it has, the rest is not wanted
            self._held.append(payload)
            self._held_size += len(payload)
        if rest is not None:
            # The body's last chunk: the parser ends the message, and wakes the pipe.
            self._let_go()
            protocol.parse(rest)
        elif self._held_size > HELD_MAX and not self._paused:
            self._paused = True
            transport = protocol.transport
            if transport is not None:
                transport.pause_reading()
        if payload:
            self._wake()

    def _try_taking(self, protocol: UpstreamProtocol, data: bytes) -> None:
        """Let the parser have ``data``, and take the reads after it if it ends between two
        chunks, as the parser and a decoder of the pipe's own both find it."""
        content = self._content
        before = content.total_bytes
        # Not the sink while the parser reads: should the body end in it, the connection goes
        # back to the pool at once, and only a connection without a sink may.
        protocol.sink = None
        protocol.parse(data)
        if content.is_eof() or content._exception is not None or protocol._payload is not content:
            self._protocol = None
            return
        self._tries += 1
        chunks = ChunkDecoder()
        try:
            payload, rest = chunks.feed(data)
        except UpstreamProtocolError:
            payload, rest = b"", None  # it did not start at a chunk's start: not this one
        splits = content._http_chunk_splits
        size = len(payload)
        if (
            size
            and rest is None
            and chunks.at_boundary
            and content.total_bytes - before == size
            and splits
            and splits[-1] == content.total_bytes
            and not protocol._reading_paused
            and b"".join(content._buffer)[-size:] == payload
        ):
            self._chunks = chunks
        elif self._tries >= TAKE_TRIES:
            self._protocol = None
            return
        protocol.sink = self

    def _let_go(self) -> None:
        """No longer the connection's sink; if the pipe took its reads, the parser cannot
        go on where the pipe stopped, and the connection must not be reused."""
        protocol, self._protocol = self._protocol, None
        if protocol is None:
            return
        if protocol.sink is self:
            protocol.sink = None
        if self._chunks is not None and not self._chunks.ended:
            protocol.force_close()
            transport = protocol.transport
            if transport is not None:
                transport.close()
        # The pipe pauses a connection only while it takes a body not yet over, which was
        # closed just above: there is nothing to resume.
        self._paused = False

    def _take(self) -> bytes:
        held = self._held
        data = held[0] if len(held) == 1 else b"".join(held)
        held.clear()
        self._held_size = 0
        if self._paused:
            self._paused = False
            protocol = self._protocol
            transport = protocol.transport if protocol is not None else None
            if transport is not None:
                transport.resume_reading()
        return data

    # The loop's side.

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
        if cast(object, content._waiter) is self:
            content._waiter = None  # woken by a read the pipe took: the reader never was
        while True:
            try:
                # What the reader holds came before what the pipe took.
                taken = self._held and not content._buffer
                data = self._take() if taken else content.read_nowait()
                if data:
                    events = self._decoder.feed(data)
                elif content.is_eof():
                    events = self._decoder.close()
                else:
                    # Nothing more for now: wait for the next read, within the idle limit.
                    self._timer.move(min(self._loop.time() + self._idle, self._deadline))
                    self._armed_at = perf_counter()
                    content._waiter = self  # type: ignore[assignment]  # see the module's doc
                    self._waiting = True
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
