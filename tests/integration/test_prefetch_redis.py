"""Reservations made ahead (``proxy.core.limits.prefetch``) by the worker's ``Limiter`` in front
of a real redis-server: requests far from the limits are admitted without a RESERVE call each, and
whatever the way the reservations end (used, idle, the worker closing, Redis failing), Redis
is left holding exactly what the requests spent (docs/limits.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from proxy.core.config import Team
from proxy.core.errors import ServiceUnavailable
from proxy.core.exchange import Exchange
from proxy.core.limits.admission import Budget, Limits, Reservation
from proxy.core.limits.config import State
from proxy.core.limits.prefetch import FIRST, IDLE_SECONDS
from proxy.core.limits.scripts import RESERVE
from proxy.core.usage import Usage
from proxy.http.limits.limiter import BATCH, RETRY_SECONDS, Limiter, Shown
from proxy.http.limits.redis_store import RedisStore
from tests.support.redis_server import RedisServer, redis_server

BIG = Limits(10**6, 10**9, 10**4, Budget("tokens", 10**12, "month"))
TEAM = Team("ahead", (), ("*",), BIG)
USED = Usage(12, 30, 42)


class Seen:
    """The limiter's observer: what it said of the store."""

    def __init__(self) -> None:
        self.changes: list[bool] = []

    def state_changed(self, up: bool) -> None:
        self.changes.append(up)

    def state_failed(self, operation: str) -> None:
        pass

    def settlements_dropped(self, count: int) -> None:
        pass  # one whose reply timed out: Redis may have applied it (this test's did)

    def limits_seen(self, shown: Shown) -> None:
        pass


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        client = running.client()
        # Every command is logged with its arguments: the RESERVE calls can be counted.
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        client.close()
        yield running


def reserve_calls(server: RedisServer) -> int:
    client = server.client()
    sha = client.script_load(RESERVE)
    head = f"EVALSHA {sha}".encode()
    calls = [e for e in client.slowlog_get(100_000) if bytes(e["command"]).startswith(head)]
    client.close()
    return len(calls)


def counters(server: RedisServer) -> dict[str, int]:
    """The team's counters by kind (rpm, tpm, budget) and its slots in flight (not the
    markers of the tallies applied, ``lim:{ahead}:settled:<worker>``)."""
    client = server.client()
    found = {
        key.split(":")[2]: int(client.get(key) or 0) for key in client.keys("lim:{ahead}:*")
        if not key.endswith("inflight") and key.split(":")[2] != "settled"
    }  # fmt: skip
    found["inflight"] = client.zcard("lim:{ahead}:inflight")
    client.close()
    return found


def room_in_the_minute(seconds: float) -> None:
    """Per-minute windows are fixed: a test that counts one waits for a minute with room."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.1)


async def one(
    limiter: Limiter, i: int, *, finish: bool = True, checked: bool = True
) -> tuple[Exchange, Reservation | None]:
    """A request admitted (``checked``: by the store), answered with ``USED`` and, unless
    told, finished."""
    exchange = Exchange(f"r{i}", "chat", 0.0, team=TEAM.name, model="m")
    reservation = await limiter.admit(
        TEAM, exchange, prompt_tokens=20, max_tokens=100, price=None, lease_seconds=30,
    )  # fmt: skip
    assert not checked or (reservation is not None and exchange.headers)
    exchange.usage = USED
    if finish:
        limiter.finish(exchange, reservation)
    return exchange, reservation


def test_requests_far_from_the_limits_are_admitted_from_reservations_made_ahead(
    server: RedisServer,
) -> None:
    room_in_the_minute(15)

    async def run() -> dict[str, int]:
        limiter = Limiter(RedisStore(server.url, 2.0), State(), Seen())
        limiter.start(lambda: [TEAM])
        for i in range(200):
            await one(limiter, i)
            await asyncio.sleep(0.001)  # the upstream's time: fills land meanwhile
        await asyncio.sleep(0.05)
        held = counters(server)  # while running: made ahead and not used yet
        await limiter.close()
        return held

    held = asyncio.run(run())
    calls = reserve_calls(server)
    assert calls <= 200 / (FIRST // 2) + 2, calls
    assert held["rpm"] > 200 and held["inflight"] > 0
    # Closed: every reservation made ahead and not used was given back.
    assert counters(server) == {"rpm": 200, "tpm": 200 * 42, "budget": 200 * 42, "inflight": 0}


def test_reservations_made_ahead_and_not_used_are_released_within_a_second(
    server: RedisServer,
) -> None:
    room_in_the_minute(10)

    async def run() -> tuple[dict[str, int], dict[str, int]]:
        limiter = Limiter(RedisStore(server.url, 2.0), State(), Seen())
        limiter.start(lambda: [TEAM])
        try:
            await one(limiter, 0)
            await asyncio.sleep(0.2)
            made = counters(server)
            await asyncio.sleep(IDLE_SECONDS + 0.4)  # looked at four times a second
            return made, counters(server)
        finally:
            await limiter.close()

    made, idle = asyncio.run(run())
    assert made["rpm"] == 1 + FIRST and made["inflight"] == FIRST
    assert idle == {"rpm": 1, "tpm": 42, "budget": 42, "inflight": 0}


def test_a_worker_closing_with_reservations_under_way_gives_them_back(
    server: RedisServer,
) -> None:
    """Closed while Redis is slow to answer a fill: the fill is awaited (within the store's
    timeout), then what it made goes back with the rest."""
    room_in_the_minute(10)

    async def run() -> None:
        limiter = Limiter(RedisStore(server.url, 2.0), State(), Seen())
        limiter.start(lambda: [TEAM])
        await one(limiter, 0)
        await asyncio.sleep(0.1)
        for i in range(1, FIRST // 2 + 2):  # down to half the pool: a fill is asked for
            await one(limiter, i)
        client = server.client()
        client.client_pause(300)  # the fill, on its way, waits
        client.close()
        await asyncio.sleep(0)
        await limiter.close()

    asyncio.run(run())
    spent = FIRST // 2 + 2
    assert counters(server) == {
        "rpm": spent,
        "tpm": spent * 42,
        "budget": spent * 42,
        "inflight": 0,
    }


def test_a_redis_that_fails_takes_the_reservations_made_ahead_back(
    server: RedisServer,
) -> None:
    """With on_failure closed, a request is refused while Redis is down although the worker
    held reservations made ahead: they go back once Redis answers again, with what waited,
    the settlement whose call timed out too."""
    room_in_the_minute(15)
    seen = Seen()

    async def run() -> list[str]:
        limiter = Limiter(RedisStore(server.url, 0.5), State(on_failure="closed"), seen)
        limiter.start(lambda: [TEAM])
        outcomes = []
        try:
            await one(limiter, 0)  # the store's answer; then a pool is made
            await asyncio.sleep(0.1)
            exchange, reservation = await one(limiter, 1, finish=False)  # from the pool
            client = server.client()
            client.client_pause(1500)  # Redis answers nobody for 1.5 s
            client.close()
            limiter.finish(exchange, reservation)  # its settlement times out: Redis failed
            await asyncio.sleep(0.7)
            for i in (2, 3):
                try:
                    await one(limiter, i)
                    outcomes.append("admitted")
                except ServiceUnavailable:
                    outcomes.append("refused")
            await asyncio.sleep(1.3)  # Redis answers again, and is tried again
            await one(limiter, 4)
            outcomes.append("admitted")
        finally:
            await limiter.close()
        return outcomes

    assert asyncio.run(run()) == ["refused", "refused", "admitted"]
    assert seen.changes == [False, True]
    # Requests 0, 1 and 4 spent 42 tokens each, and every reservation made ahead went back.
    # Request 1's settlement timed out: it was sent again once Redis answered, and applied
    # once (docs/limits.md), its slot freed.
    left = counters(server)
    assert left == {"rpm": 3, "tpm": 3 * 42, "budget": 3 * 42, "inflight": 0}


def test_settlements_past_the_queue_bound_drop_the_oldest_tally_and_say_so(
    server: RedisServer,
) -> None:
    """Redis down, on_failure open: requests are admitted unchecked, and their ledger lines wait
    in tallies of ``BATCH``. Past the bound, the oldest tally is dropped whole and reported;
    once Redis answers, the rest reach the ledger, each request once."""
    dropped: list[int] = []

    class Counting(Seen):
        def settlements_dropped(self, count: int) -> None:
            dropped.append(count)

    async def run() -> None:
        limiter = Limiter(RedisStore(server.url, 0.2), State(), Counting(), queue_max=600)
        server.kill()
        for i in range(1000):
            exchange, reservation = await one(limiter, i, finish=False, checked=False)
            # Unchecked: it took nothing, so settling it charges what it spent.
            assert reservation is not None and reservation.amounts == (0, 0, 0)
            limiter.finish(exchange, reservation)
        assert dropped == [BATCH]  # at the 769th: three tallies of 256 held, over 600
        server.start()
        await asyncio.sleep(RETRY_SECONDS)  # the store is tried again once this is past
        await limiter.close()

    asyncio.run(run())
    client = server.client()
    month = time.strftime("%Y-%m", time.gmtime())
    assert client.hget(f"use:{{ahead}}:month:{month}", "m|requests") == str(1000 - BATCH)
    client.close()
    # And the budget holds what they spent, as the ledger does.
    assert counters(server)["budget"] == (1000 - BATCH) * USED.total_tokens
