"""Reservations made ahead (``proxy.core.limits.prefetch``), against the store's reference semantics
(``MemoryStore``): workers' pools sharing one store never pass a limit, fill only far from the
limits, and give back all they did not use."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.core.limits.admission import (
    Budget,
    Decision,
    Limits,
    Reservation,
    Windows,
    rate_limit_headers,
    release,
    reserve,
    settle,
)
from proxy.core.limits.memory import MemoryStore
from proxy.core.limits.prefetch import FACTOR, FIRST, IDLE_SECONDS, MOST, Pool
from proxy.core.prices import Price
from proxy.core.usage import Usage

T0 = 1_750_000_020.0  # a minute's start
PRICE = Price(input=1.0, cached_input=0.5, output=2.0)
BIG = Limits(10**6, 10**9, 10**4, Budget("tokens", 10**12, "month"))
_ids = itertools.count()


def member() -> str:
    return f"ahead-{next(_ids)}"


def ask(
    limits: Limits,
    now: float = T0,
    *,
    tokens: int = 50,
    lease_seconds: float = 30.0,
    windows: Windows | None = None,
    price: Price | None = None,
) -> Reservation:
    return reserve(
        "t",
        limits,
        prompt_tokens=10,
        max_tokens=tokens - 10,
        price=price,
        lease_id=member(),
        lease_seconds=lease_seconds,
        now=now,
        windows=windows,
    )


def admitted(store: MemoryStore, pool: Pool, request: Reservation, now: float) -> Reservation:
    """What a worker does: the pool's if it fits, else the store's (noted by the pool); then
    whatever the pool wants made, made at once."""
    ahead = pool.take(request, now)
    if ahead is not None:
        taken = ahead.reservation
    else:
        decision = store.reserve(request, now)
        assert decision.admitted
        pool.saw(request, decision, now)
        taken = request
    fill(store, pool, now, taken)
    return taken


def fill(store: MemoryStore, pool: Pool, now: float, request: Reservation) -> list[Reservation]:
    wanted = pool.wanted(request, member, now)
    if wanted:
        pool.filled(wanted, made(store, wanted, now), now)
    return wanted


def made(store: MemoryStore, run: list[Reservation], now: float) -> tuple[int, Decision]:
    """A run reserved as a store does: in turn, up to the first refused."""
    first = store.reserve(run[0], now)
    count = int(first.admitted)
    while count and count < len(run) and store.reserve(run[count], now).admitted:
        count += 1
    return count, first


def test_far_from_the_limits_requests_are_admitted_from_the_pool() -> None:
    store, pool, windows = MemoryStore(), Pool(), Windows()
    first = admitted(store, pool, ask(BIG, windows=windows), T0)
    assert pool.held == FIRST  # made in one call, after the first answer
    rpm = first.charges[0].key
    assert store.value(rpm, T0) == 1 + FIRST
    second = admitted(store, pool, ask(BIG, T0 + 0.01, windows=windows), T0 + 0.01)
    assert second is not first and second.lease is not None
    assert second.lease.member.startswith("ahead-")
    assert store.value(rpm, T0) == 1 + FIRST  # no call: counted already
    # Settled as the reservation made ahead, with the request's own usage.
    store.settle(settle(second, Usage(10, 5, 15), None, T0 + 0.02), T0 + 0.02)
    store.settle(settle(first, Usage(10, 5, 15), None, T0 + 0.02), T0 + 0.02)
    for unused in pool.drain():
        store.settle(release(unused, T0 + 0.03), T0 + 0.03)
    tpm, budget = first.charges[1].key, first.charges[2].key
    assert (store.value(rpm, T0), store.value(tpm, T0), store.value(budget, T0)) == (2, 30, 30)
    assert store.in_flight(first.lease.key if first.lease else "", T0) == 0


# Each limit at the edge: FACTOR (16) times a first pool (4) of the first request's amounts
# (1 request, 50 tokens, a slot, 90 micro-USD) must be left once that request is counted.
EDGES = {
    "rpm": lambda extra: Limits(requests_per_minute=65 + extra),
    "tpm": lambda extra: Limits(tokens_per_minute=3250 + extra * 50),
    "concurrency": lambda extra: Limits(concurrency=65 + extra),
    "budget-tokens": lambda extra: Limits(budget=Budget("tokens", 3250 + extra * 50, "day")),
    # A request: 10 prompt tokens at 1 USD per million, 40 completion tokens at 2.
    "budget-usd": lambda extra: Limits(budget=Budget("usd", (5850 + extra * 90) / 1e6, "month")),
}


@pytest.mark.parametrize("name", EDGES)
@pytest.mark.parametrize("extra", [-1, 0])
def test_nothing_is_made_ahead_near_a_limit(name: str, extra: int) -> None:
    # Just short of the edge, every request is the store's to admit, so a limit holds exactly
    # whatever the other workers hold; at the edge, a pool is made.
    assert (FACTOR, FIRST) == (16, 4)
    limits = EDGES[name](extra)
    store, pool = MemoryStore(), Pool()
    price = PRICE if name == "budget-usd" else None
    admitted(store, pool, ask(limits, price=price), T0)
    assert pool.held == (FIRST if extra == 0 else 0)
    for i in range(1, 3):
        admitted(store, pool, ask(limits, T0 + i, price=price), T0 + i)
        if extra:
            assert not pool.held and not pool.filling


def test_a_request_larger_than_those_made_ahead_waits_for_the_store() -> None:
    store, pool, windows = MemoryStore(), Pool(), Windows()
    admitted(store, pool, ask(BIG, windows=windows), T0)
    assert pool.held
    large = ask(BIG, T0 + 0.1, tokens=500, windows=windows)
    assert pool.take(large, T0 + 0.1) is None and pool.held == FIRST
    longer = ask(BIG, T0 + 0.1, lease_seconds=300, windows=windows)
    assert pool.take(longer, T0 + 0.1) is None
    # The next ones are made the size of the largest seen since.
    pool.drain()
    fill(store, pool, T0 + 0.2, large)
    assert pool.held >= 2
    assert pool.take(large, T0 + 0.2) is not None and pool.take(longer, T0 + 0.2) is not None


def test_a_new_window_or_new_limits_retire_the_pool() -> None:
    store, pool, windows = MemoryStore(), Pool(), Windows()
    admitted(store, pool, ask(BIG, lease_seconds=120, windows=windows), T0)
    next_minute = ask(BIG, T0 + 60, windows=windows)
    assert pool.take(next_minute, T0 + 60) is None
    gone = pool.retire(T0 + 60, next_minute)
    assert len(gone) == FIRST and not pool.held
    for unused in gone:
        store.settle(release(unused, T0 + 60), T0 + 60)
    # The ended minute keeps what it counted; the month's budget and the slots come back.
    rpm, _, budget = (c.key for c in gone[0].charges)
    assert store.value(rpm, T0 + 60) == 1 + FIRST and store.value(budget, T0 + 60) == 50
    assert gone[0].lease is not None and store.in_flight(gone[0].lease.key, T0 + 60) == 1
    # A reload's limits (new objects) with the same windows: retired too.
    admitted(store, pool, ask(BIG, T0 + 61, windows=windows), T0 + 61)
    reloaded = Limits(10**6, 10**9, 10**4 + 1, BIG.budget)
    again = ask(reloaded, T0 + 61, windows=windows)
    assert pool.take(again, T0 + 61) is None and len(pool.retire(T0 + 61, again)) == FIRST


def test_concurrency_only_limits_changed_by_a_reload_retire_the_pool() -> None:
    # No counter: every plan's charges are the same empty tuple; the lease's limit differs.
    store, pool = MemoryStore(), Pool()
    admitted(store, pool, ask(Limits(concurrency=10**4)), T0)
    other = ask(Limits(concurrency=10**4 + 1), T0)
    assert pool.held and pool.take(other, T0) is None
    assert len(pool.retire(T0, other)) == FIRST
    # Made without a lease (no concurrency limit then), they cannot stand for one that holds
    # a slot, nor made with one for one that has none.
    bare = Pool()
    admitted(store, bare, ask(Limits()), T0)
    assert bare.held and bare.take(ask(Limits(concurrency=10**4)), T0) is None
    admitted(store, pool, ask(Limits(concurrency=10**4)), T0)
    assert pool.held and pool.take(ask(Limits()), T0) is None


def test_the_pool_grows_when_asked_faster_than_it_fills_and_shrinks_when_idle() -> None:
    store, pool, windows = MemoryStore(), Pool(), Windows()
    admitted(store, pool, ask(BIG, windows=windows), T0)
    pool.drain()
    pool.filling = True  # a fill on its way, and requests find the pool empty
    sizes = []
    for _ in range(8):
        pool.take(ask(BIG, windows=windows), T0)
        sizes.append(pool.size)
    assert sizes == [min(MOST, FIRST * 2**doubled) for doubled in range(1, 9)]
    assert sizes[-2:] == [MOST, MOST]
    pool.filled([], None, T0)
    run = fill(store, pool, T0, ask(BIG, windows=windows))
    assert len(run) == MOST
    assert pool.retire(T0 + IDLE_SECONDS / 2) == []
    assert len(pool.retire(T0 + IDLE_SECONDS)) == MOST and pool.size == MOST // 2


def test_a_pool_the_store_refused_is_not_filled_again_until_it_admits() -> None:
    store, pool = MemoryStore(), Pool()
    admitted(store, pool, ask(BIG), T0)
    pool.drain()
    request = ask(BIG)
    refusal = Decision(False, (10**6, 0, 0), 0, "requests_per_minute", 40, "over")
    pool.filled([request], (0, refusal), T0)
    assert not pool.held and pool.wanted(request, member, T0) == []


def test_a_fill_partly_admitted_holds_what_was_and_waits_for_a_request() -> None:
    """Another worker took most of the room while a run of FIRST was on its way: the store
    admits two, in turn; the pool hands out those two, each with the counters it would have
    seen alone (its x-ratelimit headers), then makes no more until a request is admitted."""
    store, pool, windows = MemoryStore(), Pool(), Windows()
    limits = Limits(requests_per_minute=70)
    request = ask(limits, windows=windows)
    pool.saw(request, store.reserve(request, T0), T0)
    run = pool.wanted(request, member, T0)
    assert len(run) == FIRST
    for _ in range(67):
        assert store.reserve(ask(limits, windows=windows), T0).admitted
    count, first = made(store, run, T0)
    assert (count, first.used) == (2, (68,))
    pool.filled(run, (count, first), T0)
    assert pool.held == 2
    taken = [pool.take(ask(limits, windows=windows), T0) for _ in range(3)]
    assert taken[2] is None and pool.held == 0
    remaining = [
        rate_limit_headers(a.reservation, a.decision, T0, a.taken)["x-ratelimit-remaining-requests"]
        for a in taken
        if a is not None
    ]
    assert remaining == ["1", "0"]  # the 69th and the 70th of the minute
    assert [a.reservation for a in taken if a is not None] == run[:2]
    assert pool.wanted(request, member, T0) == []
    again = ask(limits, T0 + 60, windows=windows)
    pool.saw(again, store.reserve(again, T0 + 60), T0 + 60)
    assert pool.wanted(again, member, T0 + 60)


def test_release_gives_back_everything_in_the_windows_still_open() -> None:
    limits = Limits(100, 10_000, 10, Budget("usd", 10.0, "month"))
    taken = ask(limits, price=PRICE)
    _, tokens, nanos = taken.amounts
    settlement = release(taken, T0 + 1)
    assert [c.delta for c in settlement.corrections] == [-1, -tokens, -nanos]
    assert settlement.lease == taken.lease
    later = release(taken, T0 + 60)  # the minute ended: only the month's budget
    assert [c.key for c in later.corrections] == [taken.charges[2].key]


@settings(max_examples=150, deadline=None)
@given(
    rpm=st.integers(1, 400),
    tpm=st.integers(50, 1_000_000),
    concurrency=st.integers(1, 200),
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.integers(10, 2000), st.booleans()), max_size=300
    ),
)
# A request far larger than the pool's reservations, right after they were made: it must wait
# for the store (which refuses it), not take one and be charged past the limit at its end.
@example(rpm=400, tpm=1000, concurrency=200, steps=[(0, 10, False), (0, 2000, True)])
def test_workers_with_pools_never_pass_a_limit_and_give_all_back(
    rpm: int, tpm: int, concurrency: int, steps: list[tuple[int, int, bool]]
) -> None:
    """Three workers, each with its pool, on one store: whatever the requests, every counter
    stays within its limit, and once every request is settled and every pool released, the
    counters hold exactly what the admitted requests spent."""
    limits = Limits(rpm, tpm, concurrency)
    store = MemoryStore()
    pools = [Pool() for _ in range(3)]
    windows = [Windows() for _ in range(3)]
    # What was taken, and what the request spends: all it asked for, so a request admitted on
    # a reservation smaller than itself would be charged past the limit when settled.
    in_flight: list[tuple[Reservation, int]] = []
    spent = requests = 0
    now = T0
    key = ask(limits, now).charges

    def end(done: Reservation, tokens: int) -> None:
        store.settle(settle(done, Usage(5, tokens - 5, tokens), None, now), now)
        assert store.value(key[1].key, now) <= tpm

    for worker, tokens, end_one in steps:
        now += 0.001
        pool = pools[worker]
        request = ask(limits, now, tokens=tokens, windows=windows[worker])
        ahead = pool.take(request, now)
        if ahead is not None:
            in_flight.append((ahead.reservation, tokens))
            requests += 1
        else:
            decision = store.reserve(request, now)
            if decision.admitted:
                pool.saw(request, decision, now)
                in_flight.append((request, tokens))
                requests += 1
        fill(store, pool, now, request)
        assert store.value(key[0].key, now) <= rpm
        assert store.value(key[1].key, now) <= tpm
        assert request.lease is not None
        assert store.in_flight(request.lease.key, now) <= concurrency
        if end_one and in_flight:
            done, used = in_flight.pop(0)
            end(done, used)
            spent += used
    for done, used in in_flight:
        end(done, used)
        spent += used
    for pool in pools:
        for unused in pool.drain():
            store.settle(release(unused, now), now)
    assert store.value(key[0].key, now) == requests
    assert store.value(key[1].key, now) == spent


def test_a_grown_pool_is_filled_only_to_what_the_limits_leave_room_for() -> None:
    store, pool = MemoryStore(), Pool()
    limits = Limits(requests_per_minute=FACTOR * 10 + 1)  # room for 10 once one is counted
    pool.size = MOST
    admitted(store, pool, ask(limits), T0)
    assert pool.held == 10


def test_nothing_is_made_ahead_but_for_the_current_plan() -> None:
    store, pool, windows = MemoryStore(), Pool(), Windows()
    request = ask(BIG, windows=windows)
    pool.saw(request, store.reserve(request, T0), T0)
    same = ask(BIG, T0 + 59, windows=windows)
    # The store's last answer was of last minute's windows, or of limits since reloaded.
    assert pool.wanted(ask(BIG, T0 + 60, windows=windows), member, T0 + 60) == []
    assert pool.wanted(ask(Limits(10**6, 10**9), T0, windows=windows), member, T0) == []
    assert len(pool.wanted(same, member, T0 + 59)) == FIRST


def test_limits_reloaded_lower_are_never_passed_by_reservations_made_ahead() -> None:
    """Far from the old limit, near the new one: the worker's next requests are refused, and
    nothing is made ahead on the old limit's terms (it would pass the new one)."""
    store, pool, windows = MemoryStore(), Pool(), Windows()
    for i in range(8):
        admitted(store, pool, ask(BIG, T0 + i / 100, windows=windows), T0 + i / 100)
    lower = Limits(requests_per_minute=8, budget=BIG.budget)  # a reload, in the same minute
    key = ask(lower, T0).charges[0].key
    assert store.value(key, T0) > 8  # what was made ahead on the old terms, unused
    for i in range(3):
        now = T0 + 1 + i
        request = ask(lower, now, windows=windows)
        assert pool.take(request, now) is None
        decision = store.reserve(request, now)
        assert not decision.admitted
        for unused in pool.drain():  # what the limiter does on a refusal
            store.settle(release(unused, now), now)
        pool.saw(request, decision, now)
        assert fill(store, pool, now, request) == []
        assert store.value(key, now) == 8
