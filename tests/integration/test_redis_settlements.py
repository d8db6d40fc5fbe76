"""The worker's ``Limiter`` settling in a real redis-server when the way there fails or what
Redis holds is not what the proxy wrote (docs/limits.md): a settlement cut on its way is sent
again and counted once; a counter that is no integer ends neither the gauges nor the flush of
the settlements at shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

import proxy.http.limits.limiter as limiter_module
from proxy.core.config import Team
from proxy.core.exchange import Exchange
from proxy.core.limits.admission import Budget, Limits, Reservation
from proxy.core.limits.config import State
from proxy.core.limits.scripts import SETTLE
from proxy.core.usage import Usage
from proxy.http.limits.limiter import RETRY_SECONDS, Limiter, Shown
from proxy.http.limits.redis_store import RedisStore
from tests.support.redis_server import RedisServer, redis_server

# 60 a minute: near enough its limit that no reservation is made ahead; each request's own.
LIMITS = Limits(60, 10**6, None, Budget("tokens", 10**9, "month"))
USED = Usage(12, 30, 42)


class Seen:
    """The limiter's observer: what it said."""

    def __init__(self) -> None:
        self.changes: list[bool] = []
        self.failed: list[str] = []
        self.dropped = 0
        self.readings = 0

    def state_changed(self, up: bool) -> None:
        self.changes.append(up)

    def state_failed(self, operation: str) -> None:
        self.failed.append(operation)

    def settlements_dropped(self, count: int) -> None:
        self.dropped += count

    def limits_seen(self, shown: Shown) -> None:
        self.readings += 1


class Relay:
    """A TCP relay in front of redis-server that loses, while told, what passes one way:
    ``lose`` "requests" (Redis never reads them) or "replies" (Redis applies them, the worker
    never hears it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.lose = ""
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, "requests"),
                self._pump(up_reader, writer, "replies"),
                return_exceptions=True,
            )
        finally:
            self._tasks.discard(task)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, lost: str
    ) -> None:
        try:
            while data := await source.read(65536):
                if self.lose != lost:
                    sink.write(data)
        finally:
            sink.close()


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


async def admitted(limiter: Limiter, team: Team, i: int) -> tuple[Exchange, Reservation]:
    exchange = Exchange(f"r{i}", "chat", 0.0, team=team.name, model="m")
    reservation = await limiter.admit(
        team, exchange, prompt_tokens=20, max_tokens=100, price=None, lease_seconds=30
    )
    exchange.usage = USED
    return exchange, reservation


def test_a_settlement_cut_on_its_way_is_sent_again_and_counted_once(server: RedisServer) -> None:
    """Two tallies of five requests each, cut on their way: the first once Redis applied it
    (its reply lost), the second before Redis read it. Both are sent again once Redis answers;
    the first is not applied twice (its mark), the second is applied: ten requests, once each."""
    left = 60 - time.time() % 60
    if left < 12:
        time.sleep(left + 0.1)  # the tokens per minute counted in one minute
    team = Team("cut", (), ("*",), LIMITS)
    seen = Seen()
    client = server.client()
    client.script_load(SETTLE)  # else the first reply lost would be NOSCRIPT's: nothing applied
    client.close()

    async def run() -> None:
        relay = Relay(server.port)
        await relay.start()
        limiter = Limiter(RedisStore(relay.url, 0.3), State(), seen)
        limiter.start(lambda: [team])
        try:
            for lose in ("replies", "requests"):
                done = [await admitted(limiter, team, i) for i in range(5)]
                relay.lose = lose
                for exchange, reservation in done:
                    limiter.finish(exchange, reservation)
                await asyncio.sleep(0.6)  # its reply never came: Redis is taken for down
                relay.lose = ""
                await asyncio.sleep(RETRY_SECONDS + 0.5)  # then tried again
        finally:
            await limiter.close()
            await relay.stop()

    asyncio.run(run())
    client = server.client()
    month = time.strftime("%Y-%m", time.gmtime())
    assert client.hget(f"use:{{cut}}:month:{month}", "m|requests") == "10"
    assert int(client.get(f"lim:{{cut}}:budget:tokens:{month}")) == 10 * 42
    assert int(client.get(f"lim:{{cut}}:tpm:{int(time.time() // 60)}")) == 10 * 42
    client.close()
    assert seen.changes == [False, True, False, True] and seen.dropped == 0


def test_a_counter_that_is_no_integer_ends_neither_the_gauges_nor_the_flush(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gauges read a counter Redis holds as no integer: each reading is refused and said,
    the store stays up, and once the key is mended the readings go on. A settlement still
    queued when the worker closes is sent."""
    monkeypatch.setattr(limiter_module, "GAUGE_SECONDS", 0.05)
    team = Team("gauge", (), ("*",), LIMITS)
    month = time.strftime("%Y-%m", time.gmtime())
    key = f"lim:{{gauge}}:budget:tokens:{month}"
    client = server.client()
    client.set(key, "garbage")
    seen = Seen()

    async def run() -> int:
        limiter = Limiter(RedisStore(server.url, 0.5), State(), seen)
        limiter.start(lambda: [team])
        try:
            await asyncio.sleep(0.3)
            assert seen.readings == 0 and seen.failed and set(seen.failed) == {"read"}
            client.delete(key)
            await asyncio.sleep(0.3)
            readings = seen.readings
            exchange, reservation = await admitted(limiter, team, 0)
            limiter.finish(exchange, reservation)  # queued: the worker closes at once
        finally:
            await limiter.close()
        return readings

    assert asyncio.run(run()) > 0
    assert seen.changes == []  # never taken for down
    assert client.hget(f"use:{{gauge}}:month:{month}", "m|requests") == "1"
    assert int(client.get(key)) == 42
    client.close()
