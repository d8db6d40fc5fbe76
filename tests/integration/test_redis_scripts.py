"""The Redis scripts against ``MemoryStore``, on a real redis-server: the same KEYS and ARGV must
give the same replies and leave the same counters, leases and ledger, step by step, for any
interleaving of reservations and settlements (``proxy.core.limits.scripts`` says they do)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.limits.admission import COUNT_MAX, Budget, Limits, Reservation, reserve, settle
from proxy.core.limits.ledger import FIELD_MAX, entry
from proxy.core.limits.memory import MemoryStore
from proxy.core.limits.scripts import RESERVE, RESERVE_BATCH, SETTLE, reserve_call, reserve_replies
from proxy.core.limits.tally import Tally
from proxy.core.prices import Price
from proxy.core.usage import Usage
from proxy.http.limits.redis_store import RedisStore
from proxy.http.limits.stores import StoreDataError, StoreUnavailable
from tests.support.harness import free_port
from tests.support.redis_server import RedisServer, redis_server

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
    st.integers(1, 3),  # reservations in one call (a loop turn's, in the proxy)
    st.booleans(),  # they are alike, one run (a pool's fill), or each its own
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=40))
def test_the_scripts_do_what_memory_store_does(
    server: RedisServer, steps: list[tuple[str, int, int, bool, int, bool]]
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
        for n, (op, prompt, tokens, known, batch, alike) in enumerate(steps):
            now = time.time()
            if op == "reserve" or not held:
                rs = [
                    reserve(
                        team,
                        LIMITS,
                        prompt_tokens=prompt if alike else prompt + i,
                        max_tokens=tokens,
                        price=PRICE,
                        lease_id=f"lease-{n}-{i}",
                        lease_seconds=30,
                        now=now,
                    )
                    for i in range(batch)
                ]
                runs = [rs] if alike else [[r] for r in rs]
                keys, args = reserve_call(runs, now)
                expected = memory.eval_reserve(keys, args)
                reply = reserve_script(keys=keys, args=args)
                assert [int(v) for v in reply.split()] == expected
                for run, one in zip(runs, reserve_replies(expected, runs), strict=True):
                    held += run[: one[0]]
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
        keys, args = reserve_call([[r]], time.time())
        script = client.register_script(RESERVE)
        assert int(script(keys=keys, args=args).split()[0]) == 1
        assert int(client.get(keys[0])) == 10**15  # 1 million USD, exactly
        # And in the reply, as %d: Lua's tostring would write 1e+15.
        assert script(keys=keys, args=reserve_call([[r]], time.time())[1]).split()[1] == str(10**15)
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
            await store.settle_many(Tally.of([("a", settle(r, Usage(), 0.0, time.time()), None)]))
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


def _calls(client: object, command: str = "evalsha") -> int:
    stats = client.info("commandstats")  # type: ignore[attr-defined]
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_the_reservations_of_one_turn_are_one_call_and_admitted_in_turn(
    server: RedisServer,
) -> None:
    """300 requests at once against 250 a minute: exactly 250 admitted, each seeing the count
    before it, in two RESERVE calls (a batch holds at most RESERVE_BATCH), not 300."""
    client = server.client()
    client.flushdb()
    # Loaded already, whichever tests this server ran before (NOSCRIPT would count twice).
    client.script_load(RESERVE)
    client.config_resetstat()
    limits = Limits(requests_per_minute=250, tokens_per_minute=10**6, concurrency=1000)

    async def run() -> list[tuple[bool, int, int]]:
        store = RedisStore(server.url, 2.0)
        try:
            now = time.time()
            rs = [
                reserve(
                    "b",
                    limits,
                    prompt_tokens=1,
                    max_tokens=9,
                    price=None,
                    lease_id=f"l{i}",
                    lease_seconds=30,
                    now=now,
                )
                for i in range(300)
            ]
            decisions = await asyncio.gather(*[store.reserve(r, now) for r in rs])
            return [(d.admitted, d.used[0], d.in_flight) for d in decisions]
        finally:
            await store.close()

    seen = asyncio.run(run())
    assert RESERVE_BATCH == 256 and _calls(client) == 2
    assert [s for s in seen if s[0]] == [(True, i, i) for i in range(250)]
    assert all(used == 250 and held == 250 for admitted, used, held in seen if not admitted)
    assert len(seen) == 300
    assert int(client.get(rs_key(limits, "b"))) == 250
    assert client.zcard("lim:{b}:inflight") == 250
    assert int(client.get(rs_key(limits, "b", 1))) == 250 * 10
    client.close()


def test_a_run_reserved_at_once_is_admitted_in_turn_and_never_split(server: RedisServer) -> None:
    """Requests' reservations and runs of 256 and 44 made at once (pools' fills; a run holds
    at most RESERVE_BATCH) in one turn: each admitted in turn, in three RESERVE calls, none
    splitting a run; a run cancelled once sent gives back what it was admitted."""
    client = server.client()
    client.flushdb()
    client.script_load(RESERVE)
    client.config_resetstat()
    limits = Limits(requests_per_minute=10_000, concurrency=10_000)

    async def run() -> tuple[list[int], list[tuple[int, int]], int]:
        store = RedisStore(server.url, 2.0)
        now = time.time()

        def made(name: str, count: int) -> list[Reservation]:
            return [reserve("m", limits, prompt_tokens=0, max_tokens=0, price=None,
                            lease_id=f"{name}{i}", lease_seconds=30, now=now)
                    for i in range(count)]  # fmt: skip

        try:
            before = [asyncio.ensure_future(store.reserve(r, now)) for r in made("a", 10)]
            many = [
                asyncio.ensure_future(store.reserve_run(made(name, count), now))
                for name, count in [("m", RESERVE_BATCH), ("n", 44)]
            ]
            after = [asyncio.ensure_future(store.reserve(r, now)) for r in made("z", 10)]
            singles = await asyncio.gather(*before, *after)
            seen = [(count, first.used[0]) for count, first in await asyncio.gather(*many)]
            calls = _calls(client)
            with pytest.raises(ValueError):
                await store.reserve_run(made("x", RESERVE_BATCH + 1), now)
            gone = asyncio.ensure_future(store.reserve_run(made("g", 5), time.time()))
            await asyncio.sleep(0)
            await asyncio.sleep(0)  # sent: then cancelled, as a worker closing does
            gone.cancel()
            with pytest.raises(asyncio.CancelledError):
                await gone
            for _ in range(50):
                if int(client.get(rs_key(limits, "m"))) == 320:
                    break
                await asyncio.sleep(0.02)
            return [d.used[0] for d in singles], seen, calls
        finally:
            await store.close()

    singles, seen, calls = asyncio.run(run())
    assert singles == [*range(10), *range(310, 320)]
    assert seen == [(256, 10), (44, 266)]
    assert calls == 3  # 10 requests; the run of 256; the run of 44 and 10 requests
    assert int(client.get(rs_key(limits, "m"))) == 320  # the cancelled run's 5 given back
    assert client.zcard("lim:{m}:inflight") == 320
    client.close()


def rs_key(limits: Limits, team: str, charge: int = 0) -> str:
    r = reserve(team, limits, prompt_tokens=0, max_tokens=0, price=None, lease_id="k",
                lease_seconds=1, now=time.time())  # fmt: skip
    return r.charges[charge].key


def test_a_batch_that_fails_fails_each_of_its_requests(server: RedisServer) -> None:
    """A batch refused whole (WRONGTYPE), one whose server lost the script (NOSCRIPT), and
    one whose requests were partly cancelled: each request gets its own answer."""
    client = server.client()
    client.flushdb()
    limits = Limits(requests_per_minute=100, concurrency=100)

    async def run() -> tuple[list[object], list[object], list[object]]:
        store = RedisStore(server.url, 2.0)

        def reserving(i: int) -> asyncio.Task[object]:
            r = reserve("f", limits, prompt_tokens=0, max_tokens=0, price=None,
                        lease_id=f"l{i}", lease_seconds=30, now=time.time())  # fmt: skip
            return asyncio.ensure_future(store.reserve(r, time.time()))

        try:
            await reserving(0)  # connected, the script loaded
            client.set("lim:{f}:inflight", "not a set")
            wrong = await asyncio.gather(*[reserving(i) for i in range(3)], return_exceptions=True)
            client.delete("lim:{f}:inflight")
            client.script_flush()
            lost = await asyncio.gather(*[reserving(i) for i in range(3, 6)])
            tasks = [reserving(i) for i in range(6, 10)]
            await asyncio.sleep(0)
            tasks[1].cancel()
            left = await asyncio.gather(*tasks, return_exceptions=True)
            return wrong, [d.used[0] for d in lost], left  # type: ignore[attr-defined]
        finally:
            await store.close()

    wrong, lost, left = asyncio.run(run())
    assert all(isinstance(w, StoreUnavailable) and "WRONGTYPE" in str(w) for w in wrong)
    assert len({id(w) for w in wrong}) == 3  # one exception each, not one shared
    assert lost == [1, 2, 3]  # the failed batch took nothing; the reloaded one counted once
    assert isinstance(left[1], asyncio.CancelledError)
    # The cancelled request was admitted: nobody settles it, so the store gave it all back.
    assert client.zscore("lim:{f}:inflight", "l7") is None
    assert int(client.get(rs_key(limits, "f"))) == 7  # 1, 3 and 4 admitted, less it
    assert client.zscore("lim:{f}:inflight", "l8") is not None
    assert [d.used[0] for i, d in enumerate(left) if i != 1] == [4, 6, 7]  # type: ignore[union-attr]
    client.close()


def test_requests_waiting_on_a_redis_that_is_gone_all_fail_unsent() -> None:
    async def run() -> list[BaseException | object]:
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", 0.2)
        try:
            rs = [
                reserve(
                    "a",
                    Limits(requests_per_minute=2),
                    prompt_tokens=0,
                    max_tokens=0,
                    price=None,
                    lease_id=f"l{i}",
                    lease_seconds=1,
                    now=time.time(),
                )
                for i in range(4)
            ]
            return await asyncio.gather(
                *[store.reserve(r, time.time()) for r in rs], return_exceptions=True
            )
        finally:
            await store.close()

    failed = asyncio.run(run())
    assert all(isinstance(f, StoreUnavailable) and not f.sent for f in failed), failed


def test_a_connection_lost_under_a_batch_fails_each_request_as_sent() -> None:
    """A server that answers one reservation, then drops the connection under the next batch:
    each request of the batch fails (sent: it may have been applied), and none hangs."""

    async def run() -> tuple[bool, list[BaseException | object]]:
        reads = 0

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal reads
            while data := await reader.read(65536):
                writer.write(b"+OK\r\n" * data.count(b"SETINFO"))  # the client's greeting
                if b"EVALSHA" in data:
                    reads += 1
                    if reads > 1:
                        break
                    writer.write(b"$5\r\n1 0 0\r\n")  # RESERVE: admitted, seen 0, none held
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = RedisStore(f"redis://127.0.0.1:{port}/0", 1.0)

        def ask(i: int) -> Reservation:
            limits = Limits(requests_per_minute=5)
            return reserve("a", limits, prompt_tokens=0, max_tokens=0, price=None,
                           lease_id=f"l{i}", lease_seconds=1, now=time.time())  # fmt: skip

        try:
            first = await store.reserve(ask(0), time.time())
            batch = [store.reserve(ask(i), time.time()) for i in range(1, 4)]
            return first.admitted, await asyncio.gather(*batch, return_exceptions=True)
        finally:
            await store.close()
            server.close()

    admitted, failed = asyncio.run(asyncio.wait_for(run(), 5))
    assert admitted
    assert all(isinstance(f, StoreUnavailable) and f.sent for f in failed), failed
    assert len({id(f) for f in failed}) == 3


def test_the_scripts_hold_their_integers_and_leave_what_is_not_theirs(server: RedisServer) -> None:
    """Counters held within COUNT_MAX, ledger fields at Redis's largest integer; a key that holds
    no integer is left alone by SETTLE (and counted in its reply) and refused by RESERVE before
    it writes anything: a ``StoreDataError``, that team's, not the store's failure."""
    client = server.client()
    client.flushdb()
    garbage, near, ledger = "lim:{g}:tpm:1", "lim:{g}:budget:tokens:x", "use:{g}:month:x"
    client.set(garbage, "garbage")
    client.set(near, str(COUNT_MAX - 5))
    client.hset(ledger, "m|cost_nanos", str(FIELD_MAX - 1))
    settle_script = client.register_script(SETTLE)
    args = ["2", "0", "1", "0", "0", "5", "100", str(COUNT_MAX), "100"]
    args += ["100", "2", "m|cost_nanos", str(COUNT_MAX), "m|requests", "1"]
    assert settle_script(keys=[garbage, near, ledger], args=args) == [1, 1]
    assert client.get(garbage) == "garbage"
    assert client.get(near) == str(COUNT_MAX)
    assert client.hgetall(ledger) == {"m|cost_nanos": str(FIELD_MAX), "m|requests": "1"}

    async def run() -> tuple[StoreDataError, StoreDataError]:
        store = RedisStore(server.url, 0.5)
        try:
            r = reserve(
                "g", Limits(budget=Budget("tokens", 100, "month")), prompt_tokens=0,
                max_tokens=1, price=None, lease_id="l", lease_seconds=1, now=time.time(),
            )  # fmt: skip
            client.set(r.charges[0].key, "garbage")
            with pytest.raises(StoreDataError, match="NOTCOUNTER") as refused:
                await store.reserve(r, time.time())
            tally = Tally.of([("g", settle(r, Usage(1, 1, 2), None, time.time()), None)])
            with pytest.raises(StoreDataError, match="left 1 keys") as left:
                await store.settle_many(tally)
            return refused.value, left.value
        finally:
            await store.close()

    refused, left = asyncio.run(run())
    assert refused.teams == ("g",) and left.teams == ("g",) and left.dropped == 0
    client.close()
