"""``MemoryStore`` two ways: on the objects (what one worker calls) and on the KEYS and ARGV the
Redis scripts take (what the supervisor's store runs, and what Redis runs: tests/integration/
test_redis_scripts.py), with settlements gathered by ``Tally``. Any interleaving must leave the
same counters, leases and ledger either way."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.ledger import Ledger, entry
from proxy.core.limits import (
    Budget,
    Limits,
    Reservation,
    Settlement,
    Windows,
    reserve,
    settle,
)
from proxy.core.limits_lua import reserve_call, reserve_decision
from proxy.core.limits_store import MemoryStore
from proxy.core.prices import Price
from proxy.core.tally import Tally
from proxy.core.usage import Usage

T0 = datetime(2025, 6, 14, 12, 30, 0, tzinfo=UTC).timestamp()
PRICE = Price(1.0, 0.5, 2.0)
LIMITS = Limits(6, 900, 3, Budget("usd", 0.004, "day"))
STEP = st.tuples(
    st.sampled_from(["reserve", "settle", "flush"]),
    st.sampled_from(["a", "b{x}"]),  # two teams, one with braces in its name
    st.integers(0, 40),  # prompt tokens
    st.integers(0, 150),  # max_tokens, and the completion tokens used
    st.integers(0, 30),  # seconds later
    # How a settled request ended: priced, unpriced (no cost), or without usage.
    st.sampled_from(["priced", "unpriced", "refused"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=50))
def test_objects_and_scripts_agree(steps: list[tuple[str, str, int, int, int, str]]) -> None:
    """The scripted store's settlements are summed by ``Tally.finished``, as the limiter sums
    them with a shared store; the direct store's are ``settle`` and ``entry``, one by one."""
    direct, scripted = MemoryStore(), MemoryStore()
    held: list[Reservation] = []
    tally = Tally()
    windows = Windows()
    ledger = Ledger(windows)
    now = T0
    for n, (op, team, prompt, tokens, later, ending) in enumerate(steps):
        now += later
        if op == "reserve" or (op == "settle" and not held):
            # What was settled reaches the scripted store first, in one tally of any number.
            for keys, args in tally.calls(now):
                scripted.eval_settle(keys, args, now)
            tally = Tally()
            r = reserve(team, LIMITS, prompt_tokens=prompt, max_tokens=tokens, price=PRICE,
                        lease_id=f"l{n}", lease_seconds=60, now=now)  # fmt: skip
            decision = direct.reserve(r, now)
            reply = scripted.eval_reserve(*reserve_call([[r]], now))
            # The same decision; below the limit, the direct store counts expired leases too.
            expected = reserve_decision(r, reply, now)
            assert decision._replace(in_flight=0) == expected._replace(in_flight=0)
            assert decision.in_flight >= expected.in_flight
            if decision.admitted:
                held.append(r)
        elif op == "settle":
            r = held.pop(0)
            usage = None
            cost = None
            if ending != "refused":
                usage = Usage(prompt, tokens, prompt + tokens, cached_tokens=prompt // 2)
                cost = PRICE.cost(usage) if ending == "priced" else None
            line = entry(r.team, "gpt", usage, cost, now)
            s = settle(r, usage or Usage(), cost if usage is not None else 0.0, now)
            direct.settle(s, now, line)
            keys = ledger.keys(r.team, now)
            tally.finished(r.team, r, usage, cost, keys, "gpt", now, windows)
        else:
            for keys, args in tally.calls(now):
                scripted.eval_settle(keys, args, now)
            tally = Tally()
    for keys, args in tally.calls(now):
        scripted.eval_settle(keys, args, now)
    assert {k: v for k, (v, _) in direct.counters.items()} == {
        k: v for k, (v, _) in scripted.counters.items()
    }

    def live(store: MemoryStore) -> dict[str, set[str]]:
        leases = {
            k: {m for m, deadline in v.items() if deadline > now} for k, v in store.leases.items()
        }
        return {k: v for k, v in leases.items() if v}

    assert live(direct) == live(scripted)
    assert {k: v for k, (v, _) in direct.hashes.items()} == {
        k: v for k, (v, _) in scripted.hashes.items()
    }


def test_a_tally_sums_per_team_and_lists_its_leases() -> None:
    tally = Tally()
    limits = Limits(tokens_per_minute=1000, concurrency=5)
    for lease in ("x", "y"):
        r = reserve("t", limits, prompt_tokens=10, max_tokens=100, price=None,
                    lease_id=lease, lease_seconds=60, now=T0)  # fmt: skip
        tally.add("t", settle(r, Usage(10, 40, 50), None, T0 + 1), entry("t", "m", None, None, T0))
    ((keys, args),) = tally.calls(T0 + 1)
    assert keys == [
        f"lim:{{t}}:tpm:{int(T0 // 60)}",
        "lim:{t}:inflight",
        *entry("t", "m", None, None, T0).keys,
    ]
    assert args[:3] == ["1", "1", "2"]
    assert args[3] == "-120"  # two refunds of 60, summed
    assert args[5:8] == ["2", "x", "y"]
    assert args[8:] == [
        "5356800",
        "1",
        "m|requests",
        "2",
        str(25 * 31 * 86400),
        "1",
        "m|requests",
        "2",
    ]
    assert tally.count == 2


@pytest.mark.parametrize("message", [[], ["nothing"], ["reserve", ["k"]], ["read", [], [], []], 7])
def test_a_malformed_message_is_a_value_error(message: object) -> None:
    with pytest.raises(ValueError):
        MemoryStore().call(message, T0)  # type: ignore[arg-type]


def test_a_settlement_with_nothing_to_do() -> None:
    store = MemoryStore()
    store.settle(Settlement((), None), T0, None)
    assert Tally().calls(T0) == []
    assert (store.counters, store.leases, store.hashes) == ({}, {}, {})
