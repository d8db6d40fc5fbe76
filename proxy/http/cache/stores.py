"""Where cached answers are kept: each worker's memory (LRU), or the shared Redis.

A store never fails a request: whatever goes wrong in it (Redis down, slow, or holding
something that is no entry) is a miss, or an answer not stored."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Final, Protocol

from proxy.core.cache.config import CacheConfig
from proxy.core.cache.entry import Entry, decode_entry, encode_entry
from proxy.core.limits.config import SentinelConfig
from proxy.core.usage import Source
from proxy.http.limits.redis_client import RedisClient
from proxy.http.limits.stores import StoreUnavailable

log = logging.getLogger("proxy.cache")

# After Redis failed a call, how long it is not asked again: a Redis that hangs would otherwise
# cost every request the whole timeout before its miss.
_RESTING: Final = 1.0


class CacheStore(Protocol):
    async def get(self, key: str) -> Entry | None: ...

    def put(self, key: str, entry: Entry, ttl: int) -> None:
        """Store ``entry`` for ``ttl`` seconds; it may be stored after this returns."""

    async def close(self) -> None: ...


# An entry as the memory store holds it: (expires, stored, prompt, completion, source, body).
# A tuple of numbers, strings and bytes, which the cycle collector stops tracking: thousands
# of entries held as objects would be walked by every full collection, on every worker.
_Held = tuple[float, float, int, int, Source, bytes]


class MemoryStore:
    """Each worker's entries, least recently used first out once ``max_entries`` are held."""

    def __init__(self, max_entries: int) -> None:
        self._entries: OrderedDict[str, _Held] = OrderedDict()
        self._max = max_entries

    async def get(self, key: str) -> Entry | None:
        held = self._entries.get(key)
        if held is None:
            return None
        expires, stored, prompt, completion, source, body = held
        if expires <= time.time():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return Entry(body, stored, prompt, completion, source)

    def put(self, key: str, entry: Entry, ttl: int) -> None:
        entries = self._entries
        entries[key] = (
            entry.stored + ttl, entry.stored, entry.prompt_tokens, entry.completion_tokens,
            entry.source, entry.body,
        )  # fmt: skip
        entries.move_to_end(key)
        while len(entries) > self._max:
            entries.popitem(last=False)

    async def close(self) -> None:
        self._entries.clear()


class RedisStore:
    """Entries in Redis, compressed, under hashed keys; shared by every worker and replica.
    Nothing is kept in front of it: an entry another replica replaced or that expired is never
    served from a worker's memory."""

    def __init__(self, where: str | SentinelConfig, timeout: float) -> None:
        self._client = RedisClient(where, timeout)
        self._resting_until = 0.0
        self._writes: set[asyncio.Task[None]] = set()

    async def get(self, key: str) -> Entry | None:
        if time.monotonic() < self._resting_until:
            return None
        try:
            (raw,) = await self._client.pipeline([("GET", key)])
        except StoreUnavailable as exc:
            self._failed("lookup", exc)
            return None
        if not isinstance(raw, bytes):
            return None  # no entry (None), or an error reply for a key of another type
        return decode_entry(raw)

    def put(self, key: str, entry: Entry, ttl: int) -> None:
        if time.monotonic() < self._resting_until:
            return
        # Off the request's path: its answer has gone out, or goes out now, whatever Redis does.
        task = asyncio.ensure_future(self._put(key, encode_entry(entry), ttl))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _put(self, key: str, value: bytes, ttl: int) -> None:
        try:
            await self._client.pipeline([("SET", key, value, "EX", ttl)])
        except StoreUnavailable as exc:
            self._failed("store", exc)

    def _failed(self, operation: str, exc: StoreUnavailable) -> None:
        if time.monotonic() >= self._resting_until:
            log.warning("cache %s failed, answering without the cache for %g s: %s",
                        operation, _RESTING, exc)  # fmt: skip
        self._resting_until = time.monotonic() + _RESTING

    async def close(self) -> None:
        if self._writes:
            # Each write is bounded by the timeout already; any still running is given up.
            await asyncio.wait(self._writes, timeout=self._client.timeout)
            for task in self._writes:
                task.cancel()
            await asyncio.gather(*self._writes, return_exceptions=True)
        await self._client.close()


def store_for(cache: CacheConfig, shared: str | SentinelConfig | None) -> CacheStore:
    if cache.backend == "redis":
        assert shared is not None  # the configuration makes sure
        return RedisStore(shared, cache.timeout)
    return MemoryStore(cache.max_entries)
