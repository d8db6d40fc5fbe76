"""The upstream connections a process keeps between requests (``proxy.http.pool``), seen
from a bare HTTP/1.1 upstream that numbers the connections it accepts and notes which the
proxy closes."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from yarl import URL

from proxy.core.errors import UpstreamError
from proxy.http.pool import Pool, Slots
from proxy.http.upstream import Destination, Target, UpstreamClient, read_whole

ANSWER = (Path(__file__).parents[1] / "fixtures" / "providers" / "openai.chat.json").read_bytes()
KEPT = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)
# Whole, yet the upstream says it will not take another request on this connection.
LAST = KEPT.replace(b"200 OK\r\n", b"200 OK\r\nConnection: close\r\n")
TARGET = Target({}, 5.0)


@dataclass
class Upstream:
    """Answers every request with ``answer`` once ``gate`` is open; ``requests`` has the number
    of the connection each came on, ``closed`` those the client has closed."""

    answer: bytes = KEPT
    hang_up_after: float | None = None  # close each connection this long after an answer
    requests: list[int] = field(default_factory=list)
    waiting: int = 0  # requests read and not yet answered (the gate is closed)
    closed: set[int] = field(default_factory=set)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.gate.set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = next(self._numbers)
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests.append(number)
                self.waiting += 1
                await self.gate.wait()
                self.waiting -= 1
                writer.write(self.answer)
                await writer.drain()
                if self.hang_up_after is not None:
                    await asyncio.sleep(self.hang_up_after)
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.add(number)
        finally:
            self._writers.discard(writer)
            writer.close()

    @property
    def opened(self) -> int:
        return len(set(self.requests))

    def destination(self) -> Destination:
        return Destination(URL(f"http://127.0.0.1:{self.port}/v1/chat/completions"), {})

    def close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()


Start = Callable[..., Awaitable[Upstream]]


@pytest.fixture
async def upstreams() -> AsyncIterator[Start]:
    """Starts upstreams on loopback (keyword arguments as ``Upstream``'s); closes them after."""
    servers: list[tuple[asyncio.Server, Upstream]] = []

    async def start(**settings: Any) -> Upstream:
        upstream = Upstream(**settings)
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        upstream.port = server.sockets[0].getsockname()[1]
        servers.append((server, upstream))
        return upstream

    yield start
    for server, upstream in servers:
        upstream.close_all()
        server.close()
        await server.wait_closed()


async def _ask(client: UpstreamClient, destination: Destination) -> None:
    response = await client.send(destination, TARGET, b"{}", stream=False)
    assert await read_whole(response, 1 << 20) == ANSWER


async def _eventually(condition: Callable[[], bool], seconds: float = 5) -> None:
    for _ in range(int(seconds * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not so within {seconds} s")


async def _two_at_once(upstream: Upstream, client: UpstreamClient) -> None:
    """Two requests in flight together: two connections, both idle afterwards."""
    upstream.gate.clear()
    both = [asyncio.ensure_future(_ask(client, upstream.destination())) for _ in range(2)]
    await _eventually(lambda: upstream.waiting == 2)
    upstream.gate.set()
    await asyncio.gather(*both)
    assert upstream.opened == 2


async def test_the_connection_put_back_last_is_taken_first(upstreams: Start) -> None:
    # aiohttp's pool took the oldest first: these would have gone to both in turn.
    upstream = await upstreams()
    pool = Pool()
    client = UpstreamClient(pool)
    try:
        await _two_at_once(upstream, client)
        for _ in range(4):
            await _ask(client, upstream.destination())
        assert len(set(upstream.requests[2:])) == 1
        assert pool.opened == 2 and not upstream.closed
    finally:
        await pool.close()
    await _eventually(lambda: upstream.closed == {1, 2})
    assert pool.opened == 0


async def test_connections_the_traffic_no_longer_needs_close_after_their_keep_alive(
    upstreams: Start,
) -> None:
    upstream = await upstreams()
    pool = Pool(0.2)
    client = UpstreamClient(pool)
    loop = asyncio.get_running_loop()
    try:
        await _two_at_once(upstream, client)
        # A request every 50 ms for 0.6 s: one connection serves them all; the other, idle,
        # is closed by the sweep, with no request needing a connection to notice.
        until = loop.time() + 0.6
        while loop.time() < until:
            await _ask(client, upstream.destination())
            await asyncio.sleep(0.05)
        busy = set(upstream.requests[2:])
        assert len(busy) == 1 and len(upstream.closed) == 1 and busy.isdisjoint(upstream.closed)
        assert pool.opened == 1
        # Then no traffic at all: the last one goes too.
        await _eventually(lambda: upstream.closed == {1, 2}, 2)
        assert pool.opened == 0
    finally:
        await pool.close()


async def test_at_the_limit_an_idle_connection_gives_way_to_a_new_one(upstreams: Start) -> None:
    # Without: the new one would wait for the connector's limit until its connect timeout (5 s).
    first, second = await upstreams(), await upstreams()
    pool = Pool(limit=1)
    client = UpstreamClient(pool)
    try:
        await _ask(client, first.destination())
        await asyncio.wait_for(_ask(client, second.destination()), 3)
        await _eventually(lambda: first.closed == {1})
        assert pool.opened == 1 and second.opened == 1 and not second.closed
    finally:
        await pool.close()


@pytest.mark.parametrize("elsewhere", [False, True])
async def test_at_the_limit_a_request_takes_the_connection_an_answer_gives_back(
    upstreams: Start, elsewhere: bool
) -> None:
    # One connection in use at the limit, and a request waiting: the connection given back
    # goes to it (the same place), or makes room for one of its own (another place). Kept on
    # a shelf instead, the request would wait until its connect timeout (5 s).
    first, second = await upstreams(), await upstreams()
    pool = Pool(limit=1)
    client = UpstreamClient(pool)
    try:
        first.gate.clear()
        busy = asyncio.ensure_future(_ask(client, first.destination()))
        await _eventually(lambda: first.waiting == 1)
        waiting = asyncio.ensure_future(
            _ask(client, (second if elsewhere else first).destination())
        )
        await asyncio.sleep(0.1)
        assert not waiting.done() and pool.waiting == 1
        first.gate.set()
        await asyncio.wait_for(asyncio.gather(busy, waiting), 3)
        assert first.opened == 1 and len(first.requests) == (1 if elsewhere else 2)
        assert second.opened == (1 if elsewhere else 0)
        assert pool.waiting == 0
    finally:
        await pool.close()


async def test_a_connection_the_upstream_closed_while_idle_is_passed_over(
    upstreams: Start,
) -> None:
    upstream = await upstreams(hang_up_after=0.05)
    pool = Pool()
    client = UpstreamClient(pool)
    try:
        await _ask(client, upstream.destination())
        await asyncio.sleep(0.3)  # the upstream has hung up, the client has seen it
        await _ask(client, upstream.destination())
        assert upstream.requests == [1, 2]
        assert pool.opened == 1
    finally:
        await pool.close()


async def test_an_answer_that_says_connection_close_is_not_kept(upstreams: Start) -> None:
    # The upstream would take another request on it; the proxy closes it, as it was told.
    upstream = await upstreams(answer=LAST)
    pool = Pool()
    client = UpstreamClient(pool)
    try:
        await _ask(client, upstream.destination())
        await _eventually(lambda: upstream.closed == {1})
        await _ask(client, upstream.destination())
        assert upstream.requests == [1, 2]
        assert pool.opened == 0
    finally:
        await pool.close()


async def test_a_pool_closed_with_a_request_in_flight_closes_every_connection(
    upstreams: Start,
) -> None:
    upstream = await upstreams()
    pool = Pool()
    client = UpstreamClient(pool)
    await _two_at_once(upstream, client)  # two idle
    upstream.gate.clear()
    in_flight = asyncio.ensure_future(_ask(client, upstream.destination()))
    await _eventually(lambda: upstream.waiting == 1)
    await pool.close()
    upstream.gate.set()  # the upstream answers, then finds the connection closed
    await _eventually(lambda: upstream.closed == {1, 2})
    with pytest.raises(UpstreamError):
        await asyncio.wait_for(in_flight, 3)
    assert pool.opened == 0


async def test_slots_hand_a_freed_slot_to_the_longest_waiting() -> None:
    slots = Slots(2)
    assert slots.take() and slots.take() and not slots.take()
    first = asyncio.ensure_future(slots.wait())
    second = asyncio.ensure_future(slots.wait())
    await asyncio.sleep(0)
    slots.release()
    await asyncio.sleep(0)
    assert first.done() and not second.done()
    assert slots.used == 2  # handed over, not freed
    # A request that stopped waiting leaves the queue; the next release goes past it.
    second.cancel()
    await asyncio.sleep(0)
    slots.release()
    slots.release()
    assert slots.used == 0 and slots.take()


async def test_a_slot_handed_to_a_request_cancelled_meanwhile_is_passed_on() -> None:
    slots = Slots(1)
    assert slots.take()
    waiter = asyncio.ensure_future(slots.wait())
    other = asyncio.ensure_future(slots.wait())
    await asyncio.sleep(0)
    slots.release()  # to waiter...
    waiter.cancel()  # ...which is cancelled before it runs: the slot goes on to other
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiter.cancelled() and other.done()
    assert slots.used == 1
