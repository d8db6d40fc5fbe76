"""``proxy.http.pipe``: a stream relayed in the loop's callbacks, from a real upstream connection (a
bare TCP server, ``proxy.http``'s connection and body) to a real client transport (one end of a
socket pair; the test reads the other). They fail if the pipe relays anything differently from
a task reading the body itself.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

import orjson
import pytest
from yarl import URL

from proxy.core.exchange import Exchange
from proxy.core.sse import SSEDecoder
from proxy.http.connection import HIGH_WATER, BrokenAnswer, InvalidAnswer
from proxy.http.deadline import Deadline, Deadlines
from proxy.http.pipe import STEPS, Pipe, Relays, frames_for
from proxy.http.pool import Pool
from proxy.http.upstream import Destination, Target, UpstreamClient, UpstreamResponse
from proxy.normalize import API_FAMILIES, RequestContext, StreamNormalizer
from tests.support.replay import dechunk

FIXTURES = Path(__file__).parents[1] / "fixtures" / "providers"
STREAM = (FIXTURES / "openai.chat.stream.sse").read_bytes()
CTX = RequestContext(endpoint="chat", model="m", created=1_700_000_000)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
IDLE = 5.0


def normalizer() -> StreamNormalizer:
    return API_FAMILIES["openai"].stream(CTX)


def expected(stream: bytes, *, at_end: bool = True) -> bytes:
    """What the normalizer says for ``stream`` read in one piece (and then its end)."""
    return b"".join(frames_for(normalizer(), SSEDecoder().feed(stream), at_end))


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Client(asyncio.Protocol):
    """The proxy's end of the client's connection; ``writable`` is clear while the transport
    holds more than its high-water mark (what aiohttp's drain waits on)."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


@dataclass
class Rig:
    upstream: asyncio.StreamWriter  # the bare upstream's end: what it sends the proxy
    response: UpstreamResponse
    transport: asyncio.Transport  # the proxy's end of the client's connection
    protocol: Client
    client: socket.socket  # the client's end, read by the test
    normalizer: StreamNormalizer
    exchange: Exchange
    deadlines: Deadlines
    pool: Pool

    def pipe(
        self, *, chunked: bool = True, idle: float = IDLE, timer: Deadline | None = None
    ) -> Pipe:
        """A pipe whose deadline, unless given, is the calling task's."""
        loop = asyncio.get_running_loop()
        return Pipe(
            self.response.content,
            SSEDecoder(),
            self.normalizer,
            self.transport,
            chunked=chunked,
            timer=timer or Deadline(self.deadlines),
            idle=idle,
            deadline=loop.time() + 60,
            exchange=self.exchange,
            relays=Relays(loop),
        )

    async def send(self, data: bytes) -> None:
        self.upstream.write(data)
        await self.upstream.drain()

    async def received(self, quiet: float = 0.2) -> bytes:
        """What reached the client, until nothing more comes for ``quiet`` seconds."""
        loop = asyncio.get_running_loop()
        got: list[bytes] = []
        while True:
            try:
                data = await asyncio.wait_for(loop.sock_recv(self.client, 1 << 20), quiet)
            except TimeoutError:
                return b"".join(got)
            if not data:
                return b"".join(got)
            got.append(data)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    loop = asyncio.get_running_loop()
    upstream: asyncio.Future[asyncio.StreamWriter] = loop.create_future()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(HEAD)
        await writer.drain()
        upstream.set_result(writer)

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    destination = Destination(URL(f"http://127.0.0.1:{port}/v1/chat/completions"), {})
    target = Target({}, 5.0)
    response = await UpstreamClient(pool).send(destination, target, b"{}", stream=True)
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, protocol = await loop.connect_accepted_socket(Client, ours)
    deadlines = Deadlines(loop)
    rig = Rig(
        await upstream,
        response,
        transport,
        protocol,
        theirs,
        normalizer(),
        Exchange(request_id="t", endpoint="chat", started=perf_counter()),
        deadlines,
        pool,
    )
    try:
        yield rig
    finally:
        deadlines.close()
        response.close()
        transport.close()
        theirs.close()
        rig.upstream.close()
        server.close()
        await server.wait_closed()
        await pool.close()


@pytest.mark.parametrize("size", [1, 7, 300, len(STREAM)])
@pytest.mark.parametrize("chunked", [True, False], ids=["HTTP/1.1", "HTTP/1.0"])
async def test_a_stream_split_anywhere_is_relayed_as_one_read_of_it_would_be(
    rig: Rig, size: int, chunked: bool
) -> None:
    """Every read's frames go to the client as they come; ``flow`` returns the last ones, which
    end the response, once the normalizer has said them."""
    pipe = rig.pipe(chunked=chunked)
    flowing = asyncio.ensure_future(pipe.flow())
    for start in range(0, len(STREAM), size):
        await rig.send(chunk(STREAM[start : start + size]))
        if start < 2 * size:
            await asyncio.sleep(0.01)  # the first reads come one by one, with the pipe waiting
    last = await asyncio.wait_for(flowing, 10)
    sent = await rig.received()
    relayed = (dechunk(sent) if chunked else sent) + b"".join(last)
    assert relayed == expected(STREAM)
    assert last[-1] == b"data: [DONE]\n\n"
    assert rig.normalizer.ended and rig.normalizer.error is None
    # [DONE] came before the body's end: the relay reads on to reuse the connection.
    assert pipe.data
    assert 0 < rig.exchange.upstream_wait < 60


async def test_a_body_s_end_without_done_finishes_the_stream(rig: Rig) -> None:
    events = STREAM.split(b"data: [DONE]")[0]
    pipe = rig.pipe()
    await rig.send(chunk(events) + b"0\r\n\r\n")
    last = await asyncio.wait_for(pipe.flow(), 10)
    assert dechunk(await rig.received()) + b"".join(last) == expected(events)
    assert pipe.data == b""  # the body ended: its connection is back in the pool


async def test_a_pipe_done_with_is_freed_at_once_not_left_to_the_collector(rig: Rig) -> None:
    """A pipe lives as long as its stream, past the young collections: in a reference cycle, it
    and what it holds would wait for a full collection (it did: 76 MB per worker against 61)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable stays in gc.garbage
    try:
        pipe = rig.pipe()
        flowing = asyncio.ensure_future(pipe.flow())
        for event in STREAM.split(b"\n\n")[:-1]:
            await rig.send(chunk(event + b"\n\n"))  # read by read, each a step of the pipe
            await asyncio.sleep(0.01)
        await asyncio.wait_for(flowing, 10)
        del pipe, flowing
        gc.collect()
        assert not [o for o in gc.garbage if isinstance(o, Pipe)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_an_upstream_that_breaks_mid_stream_ends_it_with_one_error_event(rig: Rig) -> None:
    first_event = STREAM.split(b"\n\n")[0] + b"\n\n"
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await rig.send(chunk(first_event) + b"20\r\ndata: {")  # then it hangs up mid-chunk
    rig.upstream.close()
    last = await asyncio.wait_for(flowing, 10)
    assert dechunk(await rig.received()) == expected(first_event, at_end=False)
    assert len(last) == 1 and orjson.loads(last[0].removeprefix(b"data: "))["error"]
    assert rig.normalizer.error is not None and rig.normalizer.error.error_type == "upstream_error"


async def test_a_client_that_stops_reading_is_waited_for_not_written_to(rig: Rig) -> None:
    """Past the high-water mark the pipe hands the wait to the task and reads no more: the
    upstream's bytes wait in the body, which stops reading the socket at its own mark."""
    high_water = rig.transport.get_write_buffer_limits()[1]
    one_event = STREAM.split(b"\n\n")[1] + b"\n\n"
    many = one_event * (4 * high_water // len(one_event))
    first = STREAM.split(b"\n\n")[0] + b"\n\n"
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await rig.send(chunk(first))
    await asyncio.sleep(0.01)
    sender = asyncio.ensure_future(rig.send(chunk(many) * 16 + chunk(STREAM)))
    assert await asyncio.wait_for(flowing, 10) == []  # the client's transport is full
    assert rig.transport.get_write_buffer_size() > high_water
    assert not rig.normalizer.ended
    # The upstream's connection stops being read once its body holds more than its mark; it
    # is resumed by the reads that follow.
    for _ in range(100):
        if rig.response.content.held > HIGH_WATER:
            break
        await asyncio.sleep(0.01)
    held = rig.response.content.held
    assert held > HIGH_WATER
    await asyncio.sleep(0.1)
    assert rig.response.content.held == held  # nothing more is read meanwhile
    # The client reads everything while the task keeps flowing: nothing is lost or reordered.
    reading = asyncio.ensure_future(rig.received(quiet=1.0))
    while not (last := await asyncio.wait_for(pipe.flow(), 10)):
        await rig.protocol.writable.wait()
    await sender
    assert dechunk(await reading) + b"".join(last) == expected(first + many * 16 + STREAM)


async def test_a_client_gone_is_a_connection_reset(rig: Rig) -> None:
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await rig.send(chunk(STREAM.split(b"\n\n")[0] + b"\n\n"))
    await rig.received()
    rig.transport.close()
    await rig.send(chunk(STREAM.split(b"\n\n")[1] + b"\n\n"))
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(flowing, 5)


async def test_a_flow_cancelled_leaves_the_reader_as_it_found_it(rig: Rig) -> None:
    """The client left, or the deadline expired: what arrives afterwards stays in the body."""
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await asyncio.sleep(0.05)
    flowing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flowing

    async def read_again() -> bytes:  # as a task may: it waits for data of its own
        read = b""
        while len(read) < len(STREAM):
            read += await rig.response.content.readany()
        return read

    reading = asyncio.ensure_future(read_again())
    await asyncio.sleep(0.05)
    await rig.send(chunk(STREAM))
    assert await asyncio.wait_for(reading, 5) == STREAM
    assert await rig.received() == b""


async def test_each_read_moves_the_deadline_to_the_idle_limit(rig: Rig) -> None:
    """An upstream that goes quiet mid-stream meets the idle timeout: the deadline cancels the
    task waiting on ``flow``, as it does a task waiting on a read."""
    loop = asyncio.get_running_loop()
    idle = 0.3

    async def relay() -> float:
        timer = Deadline(rig.deadlines)
        timer.move(loop.time() + idle)
        try:
            await rig.pipe(idle=idle, timer=timer).flow()
        except asyncio.CancelledError:
            assert timer.expired()
            return loop.time()
        raise AssertionError("the stream ended")

    relaying = asyncio.ensure_future(relay())
    for event in STREAM.split(b"\n\n")[:5]:  # for longer than the idle limit, each within it
        await asyncio.sleep(idle / 3)
        await rig.send(chunk(event + b"\n\n"))
    quiet_from = loop.time()
    expired_at = await asyncio.wait_for(relaying, 5)
    assert expired_at - quiet_from >= idle * 0.8  # a tick (10 ms) and the loop's clock aside
    assert not rig.normalizer.ended


async def test_the_waits_for_the_upstream_are_metered(rig: Rig) -> None:
    """``Exchange.upstream_wait`` is the time the pipe waited for reads: the rest of the
    stream's duration, less the client's waits, is the proxy's overhead."""
    gap = 0.05
    events = [event + b"\n\n" for event in STREAM.split(b"\n\n") if event]
    started = perf_counter()
    flowing = asyncio.ensure_future(rig.pipe().flow())
    for event in events[:5]:
        await asyncio.sleep(gap)
        await rig.send(chunk(event))
    await rig.send(chunk(b"".join(events[5:])))
    await asyncio.wait_for(flowing, 10)
    elapsed = perf_counter() - started
    assert 5 * gap * 0.9 <= rig.exchange.upstream_wait <= elapsed


async def test_relays_take_a_few_steps_at_a_time_and_let_the_loop_in_between() -> None:
    """Steps queued in a burst go in batches of STEPS: a callback queued behind the first batch
    (a request's handler woken meanwhile) runs before the second, not after all of them."""
    loop = asyncio.get_running_loop()
    relays = Relays(loop)
    order: list[object] = []
    steps = 2 * STEPS + 3
    for i in range(steps):
        relays.add(functools.partial(order.append, i))
    loop.call_soon(order.append, "handler")
    for _ in range(4):
        await asyncio.sleep(0)
    assert order == [*range(STEPS), "handler", *range(STEPS, steps)]
    relays.add(lambda: order.append("later"))  # idle again: the next step is taken at once
    await asyncio.sleep(0)
    assert order[-1] == "later"


async def test_a_step_that_raises_does_not_hold_up_the_others() -> None:
    loop = asyncio.get_running_loop()
    relays = Relays(loop)
    reported: list[object] = []
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    taken: list[int] = []

    def broken() -> None:
        raise RuntimeError("a bug of ours")

    relays.add(broken)
    for i in range(3):
        relays.add(functools.partial(taken.append, i))
    for _ in range(3):
        await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert taken == [0, 1, 2]
    assert [type(exc) for exc in reported] == [RuntimeError]


# Framing, and connections reused.


def chunked(stream: bytes) -> bytes:
    """``stream`` as an upstream sends it: an event a chunk, then the last chunk."""
    return b"".join(chunk(event + b"\n\n") for event in stream.split(b"\n\n")[:-1]) + b"0\r\n\r\n"


async def test_framing_broken_mid_stream_ends_the_stream_with_an_error(rig: Rig) -> None:
    """At once, not at the idle timeout; and the connection is closed, never reused."""
    first_event = STREAM.split(b"\n\n")[0] + b"\n\n"
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await rig.send(chunk(first_event))
    await asyncio.sleep(0.01)
    await rig.send(b"5\r\nhelloXY")  # longer than its size
    last = await asyncio.wait_for(flowing, 10)
    assert dechunk(await rig.received()) == expected(first_event, at_end=False)
    assert len(last) == 1 and orjson.loads(last[0].removeprefix(b"data: "))["error"]
    assert rig.normalizer.error is not None and rig.normalizer.error.error_type == "upstream_error"
    assert isinstance(rig.response.content.exception(), InvalidAnswer)  # and closed


async def test_a_malformed_chunk_size_ends_the_stream_with_an_error(rig: Rig) -> None:
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await asyncio.sleep(0.01)
    await rig.send(b"zz\r\nhello\r\n")  # no chunk size
    last = await asyncio.wait_for(flowing, 10)
    assert len(last) == 1 and orjson.loads(last[0].removeprefix(b"data: "))["error"]
    assert rig.normalizer.error is not None and rig.normalizer.error.error_type == "upstream_error"


SECOND = (FIXTURES / "groq.chat.stream.sse").read_bytes()


async def send_event_by_event(writer: asyncio.StreamWriter, body: bytes) -> bytes:
    for event in body.split(b"\n\n")[:-1]:
        writer.write(chunk(event + b"\n\n"))
        await writer.drain()
        await asyncio.sleep(0.002)
    writer.write(b"0\r\n\r\n")
    return body


async def send_at_once(writer: asyncio.StreamWriter, body: bytes) -> bytes:
    # More than the pipe holds before it pauses the connection, in one write.
    events = body.split(b"\n\n")[:-1]
    writer.write(chunk(events[0] + b"\n\n"))  # the one the task reads, before the pipe
    await writer.drain()
    await asyncio.sleep(0.01)
    filler = (events[1] + b"\n\n") * (2 * HIGH_WATER // len(events[1]))
    writer.write(chunk(filler) + chunked(b"\n\n".join(events[1:]) + b"\n\n"))
    return events[0] + b"\n\n" + filler + b"\n\n".join(events[1:]) + b"\n\n"


async def send_the_end_after_done(writer: asyncio.StreamWriter, body: bytes) -> bytes:
    # The last chunk after a pause: the stream was over for the pipe before its body was.
    events = body.split(b"\n\n")[:-1]
    for event in events:
        writer.write(chunk(event + b"\n\n"))
        await writer.drain()
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.05)
    writer.write(b"0\r\n\r\n")
    return body


@pytest.mark.parametrize(
    "send",
    [send_event_by_event, send_at_once, send_the_end_after_done],
    ids=["event by event", "at once", "the end after [DONE]"],
)
async def test_streams_in_turn_on_one_pooled_connection_each_get_their_own_body(
    send: Callable[[asyncio.StreamWriter, bytes], Awaitable[bytes]],
) -> None:
    """The connection goes back to the pool once the parser has ended the body, and only then:
    the next stream on it is read from its own start."""
    loop = asyncio.get_running_loop()
    bodies = [STREAM, SECOND]
    sent: list[bytes] = []
    connections = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            for body in bodies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(HEAD)
                sent.append(await send(writer, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    destination = Destination(URL(f"http://127.0.0.1:{port}/v1/chat/completions"), {})
    target = Target({}, 5.0)
    client = UpstreamClient(pool)
    deadlines = Deadlines(loop)
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, protocol = await loop.connect_accepted_socket(Client, ours)
    opened = []
    try:
        for index in range(len(bodies)):
            response = await client.send(destination, target, b"{}", stream=True)
            opened.append(pool.opened)
            decoder = SSEDecoder()
            stream_normalizer = normalizer()
            first = await response.content.readany()  # as the task reads the first event
            transport.write(
                chunk(b"".join(frames_for(stream_normalizer, decoder.feed(first), False)))
            )
            pipe = Pipe(
                response.content,
                decoder,
                stream_normalizer,
                transport,
                chunked=True,
                timer=Deadline(deadlines),
                idle=IDLE,
                deadline=loop.time() + 60,
                exchange=Exchange(request_id="t", endpoint="chat", started=perf_counter()),
                relays=Relays(loop),
            )
            reading = asyncio.ensure_future(read_all(theirs))
            while not (last := await asyncio.wait_for(pipe.flow(), 10)):
                await protocol.writable.wait()
            transport.write(chunk(b"".join(last)))
            if pipe.data:  # as the relay does: read on to the body's end, to reuse the connection
                while await asyncio.wait_for(response.content.readany(), 5):
                    pass
            response.close()
            got = await reading
            assert dechunk(got) == expected(sent[index])
            assert response.content.listener is None  # the pipe let go of the body
        assert opened == [1, 1] and connections == 1
    finally:
        deadlines.close()
        transport.close()
        theirs.close()
        server.close()
        await server.wait_closed()
        await pool.close()


async def read_all(sock: socket.socket, quiet: float = 0.3) -> bytes:
    loop = asyncio.get_running_loop()
    got: list[bytes] = []
    while True:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), quiet)
        except TimeoutError:
            return b"".join(got)
        got.append(data)


async def test_an_abandoned_stream_s_connection_is_not_reused(rig: Rig) -> None:
    pipe = rig.pipe()
    flowing = asyncio.ensure_future(pipe.flow())
    await rig.send(chunk(STREAM.split(b"\n\n")[0] + b"\n\n"))
    await asyncio.sleep(0.01)
    flowing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flowing
    assert rig.response.content.listener is None
    # Its body is not over: the connection is closed, and what the upstream sends later is
    # read by nobody, least of all the next request on it.
    rig.response.close()
    assert rig.pool.opened == 0
    await rig.send(chunk(STREAM.split(b"\n\n")[1] + b"\n\n"))
    with pytest.raises(BrokenAnswer):
        await asyncio.wait_for(rig.response.content.readany(), 5)
