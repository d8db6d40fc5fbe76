"""``LocalStore``: a tally settled at once leaves the store as each of its settlements settled
one by one would (``settle_now``), ledger included; a run is reserved as the shared stores
reserve one."""

from __future__ import annotations

import asyncio
import time

from proxy.core.limits.admission import Budget, Limits, Reservation, reserve, settle
from proxy.core.limits.ledger import entry
from proxy.core.limits.tally import Tally
from proxy.core.usage import Usage
from proxy.http.limits.stores import LocalStore

LIMITS = Limits(requests_per_minute=10, tokens_per_minute=1000, concurrency=5,
                budget=Budget("tokens", 10_000, "month"))  # fmt: skip


def ask(lease: str, now: float) -> Reservation:
    return reserve("t", LIMITS, prompt_tokens=10, max_tokens=90, price=None, lease_id=lease,
                   lease_seconds=30, now=now)  # fmt: skip


def test_a_tally_settled_at_once_leaves_what_settling_one_by_one_does() -> None:
    async def run() -> None:
        now = time.time()
        stores = LocalStore(), LocalStore()
        reservations = [ask(f"l{i}", now) for i in range(3)]
        for store in stores:
            for reservation in reservations:
                assert (await store.reserve(reservation, now)).admitted
        usages = [Usage(10, 5, 15), Usage(10, 200, 210), Usage()]
        calls = [
            ("t", settle(r, u, None, now), entry("t", "m", u, None, now))
            for r, u in zip(reservations, usages, strict=True)
        ]
        for call in calls:
            stores[0].settle_now(*call)
        await stores[1].settle_many(Tally.of(calls))
        first = reservations[0]
        assert first.lease is not None
        keys = [c.key for c in first.charges]
        hashes = list(calls[0][2].keys)
        seen = [await s.read(keys, [first.lease.key], hashes, time.time()) for s in stores]
        assert seen[0] == seen[1]
        # Three requests; their tokens as used: 15 + 210 + 0 (the reservation of 100 each
        # corrected); every lease freed; the ledger's requests and completion tokens.
        assert seen[1].values == (3, 225, 225)
        assert seen[1].in_flight == (0,)
        assert seen[1].hashes[0]["m|requests"] == 3
        assert seen[1].hashes[0]["m|completion_tokens"] == 205

    asyncio.run(run())


def test_a_run_is_admitted_in_turn_up_to_the_first_refused() -> None:
    """``reserve_run`` as the shared stores' RESERVE does it: of 8 alike against a
    concurrency of 5, the first 5, answered with the counters the first saw."""

    async def run() -> tuple[int, bool, tuple[int, ...], int, int]:
        now = time.time()
        store = LocalStore()
        first = ask("m0", now)
        assert first.lease is not None
        alike = [first._replace(lease=first.lease._replace(member=f"m{i}")) for i in range(8)]
        count, decision = await store.reserve_run(alike, now)
        held = (await store.read([], [first.lease.key], [], now)).in_flight[0]
        return count, decision.admitted, decision.used, decision.in_flight, held

    assert asyncio.run(run()) == (5, True, (0, 0, 0), 0, 5)
