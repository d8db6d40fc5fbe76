"""The Redis scripts against ``MemoryStore``, on a real redis-server: the same KEYS and ARGV must
give the same replies and leave the same counters, leases and ledger, step by step, for any
interleaving of reservations and settlements (``proxy.core.limits_lua`` says they do)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.ledger import entry
from proxy.core.limits import Budget, Limits, Reservation, reserve, settle
from proxy.core.limits_lua import RESERVE, SETTLE, reserve_call
from proxy.core.limits_store import MemoryStore
from proxy.core.prices import Price
from proxy.core.tally import Tally
from proxy.core.usage import Usage
from proxy.http.stores import RedisStore, StoreUnavailable
from tests.harness import free_port
from tests.redis_server import RedisServer, redis_server

PRICE = Price(1.0, 0.5, 2.0)
LIMITS = Limits(5, 600, 3, Budget("usd", 0.003, "day"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


STEP = st.tuples(
    st.sampled_from(["reserve", "settle"]),
    st.integers(0, 50),  # prompt tokens
    st.integers(0, 200),  # max_tokens, and the completion tokens used
    st.booleans(),  # usage known
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=40))
def test_the_scripts_do_what_memory_store_does(
    server: RedisServer, steps: list[tuple[str, int, int, bool]]
) -> None:
    client = server.client()
    client.flushdb()
    reserve_script = client.register_script(RESERVE)
    settle_script = client.register_script(SETTLE)
    memory = MemoryStore()
    team = "t{x}:y"  # braces and colons in a team name stay inside its hash tag
    held: list[Reservation] = []
    keys_seen: set[str] = set()
    try:
        for n, (op, prompt, tokens, known) in enumerate(steps):
            now = time.time()
            if op == "reserve" or not held:
                r = reserve(
                    team, LIMITS, prompt_tokens=prompt, max_tokens=tokens, price=PRICE,
                    lease_id=f"lease-{n}", lease_seconds=30, now=now,
                )  # fmt: skip
                keys, args = reserve_call(r, now)
                expected = memory.eval_reserve(keys, args)
                assert [int(v) for v in reserve_script(keys=keys, args=args)] == expected
                if expected[0]:
                    held.append(r)
            else:
                r = held.pop(0)
                usage = Usage(prompt, tokens, prompt + tokens, cached_tokens=prompt // 3)
                cost = PRICE.cost(usage)
                line = entry(team, "gpt", usage if known else None, cost if known else None, now)
                tally = Tally()
                tally.add(team, settle(r, usage, cost if known else None, now), line)
                if n % 3 and held:  # now and then two requests' settlements in one call
                    other = held.pop(0)
                    tally.add(team, settle(other, usage, cost, now), line)
                ((keys, args),) = tally.calls(now)
                memory.eval_settle(keys, args, now)
                settle_script(keys=keys, args=args)
            keys_seen.update(keys)
            for key in keys_seen:
                kind = client.type(key)
                if kind == "string":
                    assert int(client.get(key)) == memory.value(key, now), key
                    assert 0 < client.ttl(key) <= memory.counters[key][1] - now + 1
                elif kind == "zset":
                    assert client.zcount(key, f"({now}", "+inf") == memory.in_flight(key, now)
                elif kind == "hash":
                    found = {k: int(v) for k, v in client.hgetall(key).items()}
                    assert found == memory.hashes[key][0], key
    finally:
        client.close()


def test_a_reply_past_2_to_the_53_is_refused_not_rounded(server: RedisServer) -> None:
    """USD are nano-dollars in Lua's doubles: exact to 2**53, which the configuration's
    9 million USD a period keeps them under."""
    client = server.client()
    try:
        r = reserve(
            "big", Limits(budget=Budget("usd", 9_000_000, "month")), prompt_tokens=0,
            max_tokens=10**6, price=Price(0, 0, 1_000_000), lease_id="x", lease_seconds=1,
            now=time.time(),
        )  # fmt: skip
        keys, args = reserve_call(r, time.time())
        reply = client.register_script(RESERVE)(keys=keys, args=args)
        assert reply[0] == 1
        assert int(client.get(keys[0])) == 10**15  # 1 million USD, exactly
    finally:
        client.close()


def test_the_proxys_redis_store_runs_them(server: RedisServer) -> None:
    """The store the proxy uses, against the same server."""

    async def run() -> list[int]:
        store = RedisStore(server.url, 0.5)
        try:
            r = reserve(
                "a", Limits(requests_per_minute=2), prompt_tokens=0, max_tokens=0, price=None,
                lease_id="l", lease_seconds=1, now=time.time(),
            )  # fmt: skip
            first = await store.reserve(r, time.time())
            await store.settle_many([("a", settle(r, Usage(), 0.0, time.time()), None)])
            snapshot = await store.read([r.charges[0].key], [], [], time.time())
            return [int(first.admitted), *first.used, first.in_flight, *snapshot.values]
        finally:
            await store.close()

    assert asyncio.run(run()) == [1, 0, 0, 1]  # admitted, seen 0, none in flight; now 1


def test_a_new_concurrency_limit_is_the_one_enforced(server: RedisServer) -> None:
    """A reloaded configuration's limits, though the team has no counter to change."""

    async def run() -> list[bool]:
        store = RedisStore(server.url, 0.5)
        admitted = []
        try:
            for limits in (Limits(concurrency=1), Limits(concurrency=3)):
                for lease in "ab":
                    r = reserve(
                        "c", limits, prompt_tokens=0, max_tokens=0, price=None,
                        lease_id=f"{limits.concurrency}{lease}", lease_seconds=30, now=time.time(),
                    )  # fmt: skip
                    admitted.append((await store.reserve(r, time.time())).admitted)
        finally:
            await store.close()
        return admitted

    assert asyncio.run(run()) == [True, False, True, True]


def test_a_reservation_survives_a_server_that_lost_its_scripts(server: RedisServer) -> None:
    """A restarted Redis answers NOSCRIPT: the script is loaded and the call sent once more;
    any other error reply is the store's failure, and is not sent again (a script that failed
    midway is not undone)."""
    client = server.client()
    client.flushdb()

    async def run() -> tuple[list[int], bool, int]:
        store = RedisStore(server.url, 0.5)
        try:
            seen = []
            for n in range(3):
                if n == 1:
                    client.script_flush()
                r = reserve(
                    "s", Limits(requests_per_minute=10, concurrency=5), prompt_tokens=0,
                    max_tokens=0, price=None, lease_id=f"l{n}", lease_seconds=30, now=time.time(),
                )  # fmt: skip
                seen.append((await store.reserve(r, time.time())).used[0])
            # The lease set as a string: the script's ZREMRANGEBYSCORE fails (WRONGTYPE).
            assert r.lease is not None
            client.set(r.lease.key, "not a set")
            with pytest.raises(StoreUnavailable, match="WRONGTYPE") as failed:
                await store.reserve(r, time.time())
            return seen, failed.value.sent, int(client.get(r.charges[0].key) or 0)
        finally:
            await store.close()

    # Each reservation counted once, the one after the flush included; the failed one not.
    assert asyncio.run(run()) == ([0, 1, 2], True, 3)


def test_a_redis_that_is_gone_is_unavailable_within_the_timeout() -> None:
    async def run() -> float:
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", 0.2)
        started = time.monotonic()
        try:
            r = reserve(
                "a", Limits(requests_per_minute=2), prompt_tokens=0, max_tokens=0, price=None,
                lease_id="l", lease_seconds=1, now=time.time(),
            )  # fmt: skip
            with pytest.raises(StoreUnavailable) as failed:
                await store.reserve(r, time.time())
            assert not failed.value.sent  # refused: nothing was applied
            return time.monotonic() - started
        finally:
            await store.close()

    assert asyncio.run(run()) < 1.0
