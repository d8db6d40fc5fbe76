"""The memory store of the response cache: least recently used out first, entries past their
TTL never served."""

from __future__ import annotations

import gc
import time

from proxy.core.cache.entry import Entry
from proxy.http.cache.stores import MemoryStore


def entry(body: bytes, stored: float | None = None) -> Entry:
    return Entry(body, time.time() if stored is None else stored, 3, 4, "upstream")


async def test_the_least_recently_used_goes_first() -> None:
    store = MemoryStore(max_entries=2)
    store.put("a", entry(b"A"), 60)
    store.put("b", entry(b"B"), 60)
    assert await store.get("a") is not None  # now b is the least recently used
    store.put("c", entry(b"C"), 60)
    assert await store.get("b") is None
    assert [(await store.get(k)) is not None for k in ("a", "c")] == [True, True]


async def test_an_entry_past_its_ttl_is_a_miss() -> None:
    store = MemoryStore(max_entries=10)
    store.put("old", entry(b"O", stored=time.time() - 61), 60)
    store.put("new", entry(b"N", stored=time.time() - 59), 60)
    assert await store.get("old") is None
    found = await store.get("new")
    assert found is not None and found.body == b"N" and found.usage.total_tokens == 7


async def test_replacing_an_entry_keeps_one() -> None:
    store = MemoryStore(max_entries=1)
    store.put("k", entry(b"1"), 60)
    store.put("k", entry(b"2"), 60)
    found = await store.get("k")
    assert found is not None and found.body == b"2"


def test_held_entries_are_not_walked_by_the_cycle_collector() -> None:
    store = MemoryStore(max_entries=100)
    for i in range(100):
        store.put(str(i), entry(b"x" * 10), 60)
    gc.collect()  # a tuple of numbers, strings and bytes is untracked by the first collection
    held = list(store._entries.values())
    assert len(held) == 100
    assert not any(gc.is_tracked(value) for value in held)
