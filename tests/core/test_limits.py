from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import to_openai_error
from proxy.core.limits.admission import (
    GRACE_SECONDS,
    Budget,
    Limits,
    Reservation,
    Windows,
    admit,
    duration,
    expires,
    key_prefix,
    nanos,
    prompt_estimate,
    rate_limit_headers,
    reserve,
    settle,
    unchecked_in,
    window,
)
from proxy.core.limits.memory import MemoryStore
from proxy.core.limits.scripts import RESERVE, reserve_call, reserve_decision, reserve_replies
from proxy.core.prices import Price
from proxy.core.usage import Usage

T0 = datetime(2025, 6, 14, 12, 30, 0, tzinfo=UTC).timestamp()  # on a minute's start
PRICE = Price(input=1.0, cached_input=0.5, output=2.0)  # USD per million tokens


def ask(
    limits: Limits,
    now: float = T0,
    *,
    prompt: int = 10,
    max_tokens: int = 40,
    lease: str = "r",
    price: Price | None = PRICE,
) -> Reservation:
    return reserve(
        "t",
        limits,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        price=price,
        lease_id=lease,
        lease_seconds=900,
        now=now,
    )


# --- windows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "moment", "wid", "end"),
    [
        ("minute", datetime(2025, 6, 14, 12, 30, 0), "29165070", datetime(2025, 6, 14, 12, 31)),
        (
            "minute",
            datetime(2025, 6, 14, 12, 30, 59, 999000),
            "29165070",
            datetime(2025, 6, 14, 12, 31),
        ),
        ("day", datetime(2025, 6, 14, 0, 0), "2025-06-14", datetime(2025, 6, 15)),
        ("day", datetime(2025, 6, 14, 23, 59, 59), "2025-06-14", datetime(2025, 6, 15)),
        ("month", datetime(2025, 6, 1), "2025-06", datetime(2025, 7, 1)),
        ("month", datetime(2025, 12, 31, 23, 59), "2025-12", datetime(2026, 1, 1)),
        ("month", datetime(2024, 2, 29, 12), "2024-02", datetime(2024, 3, 1)),
    ],
)
def test_window(period: str, moment: datetime, wid: str, end: datetime) -> None:
    found = window(period, moment.replace(tzinfo=UTC).timestamp())  # type: ignore[arg-type]
    assert (found.id, found.end) == (wid, end.replace(tzinfo=UTC).timestamp())


def test_a_windows_keys_last_to_its_end_and_a_grace() -> None:
    assert expires(window("minute", T0 + 45.5)) == T0 + 60 + GRACE_SECONDS
    assert expires(window("minute", T0)) == T0 + 60 + GRACE_SECONDS


def test_keys_name_the_team_in_a_hash_tag_and_the_window() -> None:
    r = ask(Limits(1, 100, 2, Budget("usd", 5, "month")))
    assert [c.key for c in r.charges] == [
        "lim:{t}:rpm:29165070",
        "lim:{t}:tpm:29165070",
        "lim:{t}:budget:usd:2025-06",
    ]
    assert r.lease is not None
    assert (r.lease.key, r.lease.member, r.lease.deadline) == ("lim:{t}:inflight", "r", T0 + 900)
    assert key_prefix("a}b", "rpm") == "lim:{a}b}:rpm"


# --- reservations ----------------------------------------------------------------------------


def test_reservation_takes_prompt_and_max_tokens_at_the_price() -> None:
    r = ask(Limits(budget=Budget("usd", 1, "day")), prompt=1000, max_tokens=500)
    assert r.tokens == 1500
    assert r.usd == pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6)
    assert [r.amount(c) for c in r.charges] == [2000 * 1000]  # nano-USD
    assert [c.limit for c in r.charges] == [10**9]


def test_no_limits_no_charges() -> None:
    r = ask(Limits())
    assert (r.charges, r.lease) == ((), None)
    assert MemoryStore().reserve(r, T0).admitted


# The whole body at four bytes a token (rounded up), and each token id of a completions
# prompt or embeddings input as one more: what goes upstream besides the messages (tools,
# schemas, instructions, images) is prompt too.
PROMPTS = [
    (8, None, 2),
    (0, None, 0),
    (401, None, 101),
    (9, [1, 2, 3], 3 + 3),
    (14, [[1, 2], [3]], 4 + 3),
    (13, ["abc", "abcdef"], 4),
    (20, [{"content": [1, 2]}], 5),  # chat's messages hold no ids
    (4, "abcd", 1),
]


@pytest.mark.parametrize(("size", "prompt", "tokens"), PROMPTS)
def test_prompt_estimate_counts_the_whole_body(size: int, prompt: object, tokens: int) -> None:
    assert prompt_estimate(size, prompt) == tokens


@pytest.mark.parametrize(("usd", "expected"), [(0.0003, 300_000), (1e-10, 1), (0.0, 0), (1, 10**9)])
def test_nanos_round_up_but_not_past_float_error(usd: float, expected: int) -> None:
    assert nanos(usd) == expected


# --- admission at and past each limit --------------------------------------------------------

# (limits, admitted before the first refusal, its code, its Retry-After), every request at
# T0 + 15 s, reserving 50 tokens (0.00009 USD); the day ends 11.5 hours after T0.
DAY_LEFT = 11 * 3600 + 29 * 60 + 45
LIMIT_TABLE = [
    (Limits(requests_per_minute=3), 3, "requests_per_minute", 45),
    (Limits(tokens_per_minute=150), 3, "tokens_per_minute", 45),
    (Limits(tokens_per_minute=149), 2, "tokens_per_minute", 45),
    (Limits(concurrency=2), 2, "concurrency", 1),
    (Limits(budget=Budget("tokens", 100, "day")), 2, "budget", DAY_LEFT),
    (Limits(budget=Budget("usd", 0.00027, "day")), 3, "budget", DAY_LEFT),
    (Limits(budget=Budget("usd", 0.00026, "month")), 2, "budget", (16 * 24 + 11) * 3600 + 1785),
    # Several reached at once: the longest wait is the one to report.
    (Limits(requests_per_minute=2, budget=Budget("tokens", 100, "day")), 2, "budget", DAY_LEFT),
    (Limits(requests_per_minute=2, concurrency=2), 2, "requests_per_minute", 45),
]


@pytest.mark.parametrize(("limits", "admitted", "code", "retry_after"), LIMIT_TABLE)
def test_admission_at_and_past_the_limit(
    limits: Limits, admitted: int, code: str, retry_after: int
) -> None:
    store, now = MemoryStore(), T0 + 15
    for i in range(admitted):
        assert store.reserve(ask(limits, now, lease=f"r{i}"), now).admitted, i
    refused = store.reserve(ask(limits, now, lease="next"), now)
    assert (refused.admitted, refused.code, refused.retry_after) == (False, code, retry_after)
    status, body = to_openai_error(refused.error())
    assert status == 429
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == code
    assert refused.error().retry_after == retry_after


def test_a_refused_request_takes_nothing() -> None:
    store = MemoryStore()
    limits = Limits(requests_per_minute=5, tokens_per_minute=100, concurrency=5)
    assert store.reserve(ask(limits, max_tokens=90), T0).admitted
    assert not store.reserve(ask(limits, max_tokens=90, lease="b"), T0).admitted
    r = ask(limits)
    assert [store.value(c.key, T0) for c in r.charges] == [1, 100]
    assert store.in_flight("lim:{t}:inflight", T0) == 1


def test_a_request_larger_than_the_whole_limit_says_so() -> None:
    decision = MemoryStore().reserve(ask(Limits(tokens_per_minute=100), max_tokens=200), T0)
    assert decision.code == "tokens_per_minute"
    assert "more than the whole limit" in decision.message


def test_windows_roll_over() -> None:
    store, limits = MemoryStore(), Limits(requests_per_minute=1, budget=Budget("tokens", 50, "day"))
    late = T0 + 59.999
    assert store.reserve(ask(limits, late), late).admitted
    refused = store.reserve(ask(limits, late), late)
    assert (refused.code, refused.retry_after) == ("budget", DAY_LEFT + 15 - 59)
    # The next minute has room for requests; the day's budget is still spent.
    assert store.reserve(ask(Limits(requests_per_minute=1), T0 + 60), T0 + 60).admitted
    assert not store.reserve(ask(limits, T0 + 60), T0 + 60).admitted
    tomorrow = datetime(2025, 6, 15, tzinfo=UTC).timestamp()
    assert store.reserve(ask(limits, tomorrow), tomorrow).admitted


def test_counters_expire_with_their_window() -> None:
    store = MemoryStore()
    r = ask(Limits(requests_per_minute=1))
    store.reserve(r, T0)
    key = r.charges[0].key
    assert store.value(key, T0 + 60 + GRACE_SECONDS - 0.001) == 1
    assert store.value(key, T0 + 60 + GRACE_SECONDS) == 0
    store.purge(T0 + 60 + GRACE_SECONDS)
    assert store.counters == {}
    assert store.leases == {}


def test_a_lease_past_its_deadline_frees_its_slot() -> None:
    store, limits = MemoryStore(), Limits(concurrency=1)
    assert store.reserve(ask(limits), T0).admitted
    assert not store.reserve(ask(limits, T0 + 899, lease="b"), T0 + 899).admitted
    assert store.reserve(ask(limits, T0 + 900, lease="b"), T0 + 900).admitted


# --- settlement ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "completion", "tokens_after", "nanos_after"),
    [
        (10, 40, 50, 90_000),  # exactly the reservation: nothing to correct
        (10, 5, 15, 20_000),  # under it: the rest is given back
        (30, 200, 230, 430_000),  # over it: charged in full
    ],
)
def test_settle_makes_counters_hold_the_actual_usage(
    prompt: int, completion: int, tokens_after: int, nanos_after: int
) -> None:
    store = MemoryStore()
    limits = Limits(tokens_per_minute=1000, concurrency=1, budget=Budget("usd", 1, "month"))
    r = ask(limits)
    store.reserve(r, T0)
    usage = Usage(prompt, completion, prompt + completion)
    store.settle(settle(r, usage, PRICE.cost(usage), T0 + 5), T0 + 5)
    assert [store.value(c.key, T0 + 5) for c in r.charges] == [tokens_after, nanos_after]
    assert store.in_flight("lim:{t}:inflight", T0 + 5) == 0


def test_settle_after_the_window_ended_charges_the_excess_now() -> None:
    limits = Limits(tokens_per_minute=1000)
    r = ask(limits)  # 50 tokens in T0's minute
    over = settle(r, Usage(10, 290, 300), None, T0 + 130)
    later = window("minute", T0 + 130)
    assert [(c.key, c.delta) for c in over.corrections] == [(f"lim:{{t}}:tpm:{later.id}", 250)]
    # A refund to an ended window admits nothing more: dropped.
    assert settle(r, Usage(10, 0, 10), None, T0 + 130).corrections == ()


def test_settle_of_unknown_cost_keeps_the_usd_reservation() -> None:
    r = ask(Limits(budget=Budget("usd", 1, "month")))
    assert settle(r, Usage(10, 900, 910), None, T0).corrections == ()


def test_an_unchecked_request_is_charged_all_it_spent_in_the_windows_it_ran_in() -> None:
    """Admitted while the store was down: it took nothing, so settling charges everything."""
    limits = Limits(requests_per_minute=10, tokens_per_minute=1000, concurrency=1,
                    budget=Budget("usd", 1, "month"))  # fmt: skip
    r = unchecked_in(Windows().plan("t", limits, T0), "t")
    assert (r.amounts, r.lease) == ((0, 0, 0), None)
    usage = Usage(30, 200, 230)
    store = MemoryStore()
    store.settle(settle(r, usage, PRICE.cost(usage), T0 + 5), T0 + 5)
    assert [store.value(c.key, T0 + 5) for c in r.charges] == [0, 230, 430_000]
    # Ended past its minute: the minute it ends in is charged, the month as it ran.
    late = settle(r, usage, PRICE.cost(usage), T0 + 70)
    later = window("minute", T0 + 70)
    assert [(c.key, c.delta) for c in late.corrections] == [
        (f"lim:{{t}}:tpm:{later.id}", 230),
        (r.charges[2].key, 430_000),
    ]


def test_counters_never_go_below_zero() -> None:
    store = MemoryStore()
    r = ask(Limits(tokens_per_minute=1000))
    store.reserve(r, T0)
    store.counters.clear()  # a store that lost its key
    store.settle(settle(r, Usage(0, 0, 0), None, T0), T0)
    assert store.value(r.charges[0].key, T0) == 0


@pytest.mark.parametrize("n", [1, 5, 20])
@pytest.mark.parametrize("excess", [0, 7, 300])
def test_overshoot_is_bounded_by_what_was_reserved_and_not_known(n: int, excess: int) -> None:
    """N concurrent requests, each reserving 50 tokens and using 50 + excess: the budget is
    passed by at most the sum of (actual - reserved) over those admitted."""
    budget = 120
    store, limits = MemoryStore(), Limits(budget=Budget("tokens", budget, "day"))
    admitted = []
    for i in range(n):
        r = ask(limits, lease=f"r{i}")
        if store.reserve(r, T0).admitted:
            admitted.append(r)
    for r in admitted:
        store.settle(settle(r, Usage(10, 40 + excess, 50 + excess), None, T0), T0)
    spent = store.value(admitted[0].charges[0].key, T0)
    assert spent == len(admitted) * (50 + excess)  # every token charged
    assert len(admitted) == min(n, budget // 50)
    assert spent - budget <= sum(excess for _ in admitted)
    assert store.reserve(ask(limits), T0).admitted == (spent + 50 <= budget)


# --- headers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0ms"),
        (0.02, "20ms"),
        (1, "1s"),
        (0.9996, "1s"),  # to the millisecond
        (1.5, "1.5s"),
        (10.01, "10.01s"),
        (12.345, "12.345s"),
        (30.1, "30.1s"),
        (59.999, "59.999s"),
        (59.9996, "1m0s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (3723.25, "1h2m3.25s"),
        (86400, "24h0m0s"),
    ],
)
def test_duration_as_openai_spells_it(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_rate_limit_headers() -> None:
    store, limits = MemoryStore(), Limits(60, 1000, 5, Budget("tokens", 10**6, "day"))
    store.reserve(ask(limits, lease="a"), T0)
    r = ask(limits, T0 + 54, lease="b")
    decision = store.reserve(r, T0 + 54)
    assert rate_limit_headers(r, decision, T0 + 54) == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "58",
        "x-ratelimit-reset-requests": "6s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "6s",
    }
    refused = admit(ask(Limits(requests_per_minute=2)), (2,), 0, T0 + 0.5)
    headers = rate_limit_headers(ask(Limits(requests_per_minute=2)), refused, T0 + 0.5)
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "59.5s"


def test_rate_limit_headers_only_for_the_per_minute_limits_a_team_has() -> None:
    store = MemoryStore()
    tokens_only = ask(Limits(tokens_per_minute=100, concurrency=2), T0 + 30)
    decision = store.reserve(tokens_only, T0 + 30)
    assert rate_limit_headers(tokens_only, decision, T0 + 30.25) == {
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-remaining-tokens": "50",
        "x-ratelimit-reset-tokens": "29.75s",
    }
    # A budget and slots are not per-minute limits: OpenAI's headers have none for them.
    others = ask(Limits(concurrency=2, budget=Budget("tokens", 10**6, "day")))
    assert rate_limit_headers(others, store.reserve(others, T0), T0) == {}
    # The headers' template is shared by a window's answers: filling one leaves it alone.
    limits = Limits(tokens_per_minute=100, concurrency=2)
    windows = Windows()
    first, second = (reserve("u", limits, prompt_tokens=10, max_tokens=40, price=None,
                             lease_id=lease, lease_seconds=600, now=T0, windows=windows)
                     for lease in "ab")  # fmt: skip
    assert first.shown is second.shown and first.shown is not None
    rate_limit_headers(first, store.reserve(first, T0), T0)
    assert (
        rate_limit_headers(second, store.reserve(second, T0), T0)["x-ratelimit-remaining-tokens"]
        == "0"
    )
    assert first.shown.fixed == {"x-ratelimit-limit-tokens": "100"}
    assert tokens_only.shown is not None
    assert tokens_only.shown.fixed == {"x-ratelimit-limit-tokens": "100"}


# --- the Lua scripts' KEYS and ARGV ---------------------------------------------------------

# Every script read of KEYS or ARGV is a `local <name> = ...[<index>]`; the index evaluated for
# each i and n must land where the Python side put the value of that name.
_READ = re.compile(r"local (\w+) = (?:tonumber\()?(KEYS|ARGV)\[([^\]]+)\]")


def _reads(script: str) -> list[tuple[str, str, str]]:
    reads = _READ.findall(script)
    assert reads, "no KEYS or ARGV reads found"
    return reads


def _check(
    script: str,
    keys: list[str],
    args: list[str],
    expected: dict[str, list[str]],
    names: dict[str, int] | None = None,
) -> None:
    n = int(args[0])
    seen = set()
    for name, table, index in _reads(script):
        values = expected[name]
        for i, value in enumerate(values, start=1):
            # The Lua arithmetic is Python's too; ``names``: the script's other locals.
            position = eval(index, {"i": i, "n": n, **(names or {})})
            assert (keys if table == "KEYS" else args)[position - 1] == value, (name, i)
        seen.add(name)
    assert seen == set(expected)


def test_reserve_script_reads_what_reserve_call_gives() -> None:
    now = T0 + 15.25
    limits = Limits(600, 9000, 50, Budget("usd", 100, "month"))
    r = ask(limits, now, lease="lease-id")
    later = ask(limits, now + 1, lease="other", max_tokens=7)
    keys, args = reserve_call([[r], [later]], now + 2)
    c = r.charges
    window = {
        "n": ["3"],
        "now": [repr(now + 2)],
        "count": ["2"],
        "key": [ch.key for ch in c],
        "limit": [str(ch.limit) for ch in c],
        "unit": ["0", "1", "2"],
        "expires": [str(int(T0) + 60 + GRACE_SECONDS)] * 2 + [str(r.charges[2].expires)],
        "lease_key": ["lim:{t}:inflight"],
        "lease_limit": ["50"],
    }
    # Each run's four and its one member, after the window's and the batch's: ``a`` for the
    # first, then on.
    a = 3 * 3 + 5
    for one, deadline in [(r, now + 900), (later, now + 901)]:
        own = {
            "k": ["1"],
            "tokens": [str(one.tokens)],
            "nanos": [str(nanos(one.usd or 0))],
            "deadline": [repr(deadline)],
            "member": [one.lease.member if one.lease else ""],
        }
        _check(RESERVE, keys, args, window | own, {"a": a, "j": 1})
        a += 4 + 1
    assert len(keys) == 4 and len(args) == 3 * 3 + 2 + 2 + 2 * 5
    # The same for every request of the window but the batch's and the runs' own.
    alone = reserve_call([[later]], now + 1)[1]
    assert alone[: 3 * 3 + 2] == args[: 3 * 3 + 2]
    assert alone[-5:] == args[-5:]


def test_a_run_spells_its_numbers_once_then_each_member() -> None:
    limits = Limits(requests_per_minute=100, tokens_per_minute=10**6, concurrency=50)
    first = ask(limits, lease="m0")
    assert first.lease is not None
    run = [first._replace(lease=first.lease._replace(member=f"m{i}")) for i in range(3)]
    big = ask(limits, T0 + 0.5, lease="big", max_tokens=400)
    keys, args = reserve_call([run, [big]], T0 + 1)
    a = 3 * 2 + 5 - 1  # ARGV[a], from 0
    deadline = repr(T0 + 900)
    assert args[a - 1] == "2"  # runs
    nanos_each, nanos_big = str(first.amounts[2]), str(big.amounts[2])
    assert args[a : a + 7] == ["3", "50", nanos_each, deadline, "m0", "m1", "m2"]
    assert args[a + 7 :] == ["1", "410", nanos_big, repr(T0 + 900.5), "big"]
    # The script reads the j-th member of the first run where it is (its ``a`` counts from 1).
    ((_, _, index),) = [read for read in _reads(RESERVE) if read[0] == "member"]
    for j, member in enumerate(["m0", "m1", "m2"], start=1):
        assert args[eval(index, {"a": a + 1, "j": j}) - 1] == member
    assert len(keys) == 3


def test_reserve_script_without_a_lease_reads_no_lease() -> None:
    # KEYS[n + 1] is nil, no lease set: no members follow a run's four.
    keys, args = reserve_call([[ask(Limits(requests_per_minute=1))] * 2], T0)
    assert (len(keys), len(args)) == (1, 5 + 2 + 4)
    assert args[-4] == "2"


def test_reserve_replies_are_cut_per_run() -> None:
    one = ask(Limits(requests_per_minute=10))
    assert reserve_replies([1, 0, 2, 3, 1, 3], [[one], [one] * 3]) == [[1, 0, 2], [3, 1, 3]]
    for reply, runs in [
        ([1, 0, 2, 1, 5], [[one], [one]]),
        ([1], [[one]]),
        ([], []),
        ([1, 2], []),
        ([2, 0, 2], [[one]]),  # more admitted than the run holds
        ([-1, 0, 2], [[one]]),
    ]:
        with pytest.raises(ValueError):
            reserve_replies(reply, runs)


def test_reserve_decision_reads_the_scripts_reply() -> None:
    r = ask(Limits(requests_per_minute=2, concurrency=3))
    assert reserve_decision(r, [1, 1, 2], T0).admitted
    refused = reserve_decision(r, [0, 2, 0], T0)
    assert (refused.code, refused.used, refused.in_flight) == ("requests_per_minute", (2,), 0)
    with pytest.raises(ValueError, match="disagree"):
        reserve_decision(r, [0, 1, 0], T0)


# --- the property -------------------------------------------------------------------------

STEP = st.tuples(
    st.sampled_from(["admit", "settle"]),
    st.integers(0, 3),  # seconds to advance
    st.integers(0, 60),  # prompt tokens
    st.integers(0, 80),  # max_tokens, and the usage's completion tokens
)


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, max_size=60))
def test_any_interleaving_keeps_counters_sane(steps: list[tuple[str, int, int, int]]) -> None:
    limits = Limits(4, 300, 3, Budget("usd", 0.002, "day"))
    store, now = MemoryStore(), T0 + 40
    open_: list[Reservation] = []
    excess = 0
    admitted_per_minute: dict[str, int] = {}
    for n, (op, advance, prompt, tokens) in enumerate(steps):
        now += advance
        if op == "admit":
            r = ask(limits, now, prompt=prompt, max_tokens=tokens, lease=str(n))
            if store.reserve(r, now).admitted:
                open_.append(r)
                minute = r.charges[0].window.id
                admitted_per_minute[minute] = admitted_per_minute.get(minute, 0) + 1
        elif open_:
            r = open_.pop(0)
            usage = Usage(prompt, tokens, prompt + tokens)
            store.settle(settle(r, usage, PRICE.cost(usage), now), now)
            excess += max(0, nanos(PRICE.cost(usage)) - r.amount(r.charges[2]))
        assert all(value >= 0 for value, _ in store.counters.values())
        # The overshoot bound: the budget is passed by no more than what was not reserved.
        assert store.value("lim:{t}:budget:usd:2025-06-14", now) <= nanos(0.002) + excess
        assert store.in_flight("lim:{t}:inflight", now) <= 3
        assert all(count <= 4 for count in admitted_per_minute.values())
