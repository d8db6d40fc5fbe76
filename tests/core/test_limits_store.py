"""``MemoryStore`` two ways: on the objects (what one worker calls) and on the KEYS and ARGV the
Redis scripts take (what the supervisor's store runs, and what Redis runs: tests/integration/
test_redis_scripts.py), with settlements gathered by ``Tally``. Any interleaving must leave the
same counters, leases and ledger either way."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.limits.admission import (
    COUNT_MAX,
    LIMIT_MAX,
    Budget,
    Limits,
    Reservation,
    Settlement,
    Windows,
    nanos,
    reserve,
    settle,
)
from proxy.core.limits.ledger import FIELD_MAX, Ledger, entry
from proxy.core.limits.memory import MemoryStore
from proxy.core.limits.scripts import reserve_call, reserve_decision
from proxy.core.limits.tally import Tally
from proxy.core.prices import Price
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
    # Live counters only: a tally sent after a window's key expired finds it gone (as Redis
    # would), where the direct store, settling at once, added to it while it lived.
    assert {k: v for k, (v, e) in direct.counters.items() if e > now} == {
        k: v for k, (v, e) in scripted.counters.items() if e > now
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
    assert args[:5] == ["1", "1", "2", "0", "0"]  # not marked: no sequence number
    assert args[5] == "-120"  # two refunds of 60, summed
    assert args[7:10] == ["2", "x", "y"]
    assert args[10:] == [
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


HUGE = 2**53 - 1  # the largest count ``usage`` takes from an upstream


def test_a_huge_usage_spends_the_budget_and_stays_bounded() -> None:
    """A usage of 2**53 - 1 tokens on a priced model: every integer a call carries, and every
    counter and ledger field, stays within what Lua's doubles and Redis's integers hold; the
    budget is spent, not wrapped to a negative number and cleared."""
    limits = Limits(budget=Budget("usd", 100, "month"))
    windows = Windows()
    ledger = Ledger(windows)
    tally = Tally()
    for lease in ("x", "y"):
        r = reserve("t", limits, prompt_tokens=10, max_tokens=10, price=PRICE,
                    lease_id=lease, lease_seconds=60, now=T0, windows=windows)  # fmt: skip
        usage = Usage(HUGE, HUGE, 2 * HUGE)
        keys = ledger.keys("t", T0)
        tally.finished("t", r, usage, PRICE.cost(usage), keys, "m", T0 + 1, windows)
    ((keys, args),) = tally.calls(T0 + 1)
    assert all(abs(int(a)) <= COUNT_MAX for a in args if a.lstrip("-").isdigit())
    store = MemoryStore()
    store.counters[keys[0]] = (nanos(50), T0 + 10**6)
    for _ in range(3):
        store.eval_settle(keys, args, T0 + 1)
    assert store.value(keys[0], T0 + 1) == COUNT_MAX  # spent: over any limit (LIMIT_MAX)
    assert COUNT_MAX > LIMIT_MAX
    day = store.hashes[keys[1]][0]  # the day's hash (then the month's)
    assert day["m|cost_nanos"] == 3 * COUNT_MAX and day["m|requests"] == 6
    # A field summed past Redis's largest integer is held there, as SETTLE holds it.
    store.hashes[keys[1]] = ({"m|cost_nanos": FIELD_MAX - 1}, T0 + 10**6)
    store.eval_settle(keys, args, T0 + 1)
    assert store.hashes[keys[1]][0]["m|cost_nanos"] == FIELD_MAX


@pytest.mark.parametrize("usd", [math.inf, math.nan, 1e300, 2**53 / 1e9])
def test_nanos_are_bounded(usd: float) -> None:
    assert nanos(usd) == COUNT_MAX


def test_a_marked_tally_is_applied_once_however_often_it_is_sent() -> None:
    """Its reply lost, a marked tally is sent again: the marker (its sender's last sequence
    number applied, per team) makes the second time a no-op; the sender's next one applies."""
    limits = Limits(tokens_per_minute=10_000)
    store = MemoryStore()

    def marked(sequence: int) -> list[tuple[list[str], list[str]]]:
        tally = Tally()
        for team in ("a", "b"):
            r = reserve(team, limits, prompt_tokens=10, max_tokens=100, price=None,
                        lease_id="", lease_seconds=60, now=T0)  # fmt: skip
            store.reserve(r, T0)
            tally.add(
                team, settle(r, Usage(10, 40, 50), None, T0), entry(team, "m", None, None, T0)
            )
        tally.mark("w1", sequence)
        assert tally.teams() == [("a", 1), ("b", 1)]
        return tally.calls(T0 + 1)

    first = marked(1)
    assert first[0][0][-1] == "lim:{a}:settled:w1" and first[0][1][3:5] == ["1", "86400"]
    replies = [store.eval_settle(keys, args, T0 + 1) for keys, args in first]
    again = [store.eval_settle(keys, args, T0 + 1) for keys, args in first]
    assert (replies, again) == ([[1, 0]] * 2, [[0, 0]] * 2)
    tpm = f"lim:{{a}}:tpm:{int(T0 // 60)}"
    assert store.value(tpm, T0 + 1) == 50
    for keys, args in marked(2):
        assert store.eval_settle(keys, args, T0 + 1) == [1, 0]
    assert store.value(tpm, T0 + 1) == 100
    month = entry("a", "m", None, None, T0).keys[1]
    assert store.hashes[month][0]["m|requests"] == 2
