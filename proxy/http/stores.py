"""Where a worker's limits and ledger live: ``LocalStore`` (this process alone), ``WorkerStore``
(the server's supervisor, shared by its workers) and ``RedisStore`` (every replica's).

Each runs ``proxy.core.limits_lua``'s calls: the local store on ``MemoryStore`` itself, the
supervisor's over a Unix socket (``proxy.ops.state_service``), Redis as scripts. A store that
cannot answer raises ``StoreUnavailable``; ``proxy.http.limiter`` decides what that means.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Final, Protocol

import orjson
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proxy.core.limits_lua import RESERVE, SETTLE
from proxy.core.limits_store import MemoryStore, Snapshot

# How often the local store drops expired keys (reads ignore them meanwhile).
PURGE_EVERY: Final = 60.0
# A reply line of the supervisor's at most this long (a read of every team's hashes).
LINE_LIMIT: Final = 16 * 2**20


class StoreUnavailable(Exception):
    """The store did not answer (down, unreachable, too slow, or it said it failed).
    ``sent``: the call may have reached it (timed out waiting), so may have been applied."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class Store(Protocol):
    kind: str  # "memory", "workers" or "redis", for logs and /admin/limits

    async def reserve(self, keys: list[str], args: list[str]) -> list[int]: ...

    async def settle(self, keys: list[str], args: list[str]) -> None: ...

    async def settle_many(self, calls: Sequence[tuple[list[str], list[str]]]) -> None: ...

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot: ...

    async def close(self) -> None: ...


class LocalStore:
    """``MemoryStore`` in this process: nothing to wait for, nothing that fails."""

    kind = "memory"

    def __init__(self) -> None:
        self.memory = MemoryStore()
        self._purged = time.time()

    def settle_now(self, keys: list[str], args: list[str]) -> None:
        now = time.time()
        self.memory.eval_settle(keys, args, now)
        if now - self._purged > PURGE_EVERY:
            self._purged = now
            self.memory.purge(now)

    async def reserve(self, keys: list[str], args: list[str]) -> list[int]:
        return self.memory.eval_reserve(keys, args)

    async def settle(self, keys: list[str], args: list[str]) -> None:
        self.settle_now(keys, args)

    async def settle_many(self, calls: Sequence[tuple[list[str], list[str]]]) -> None:
        for keys, args in calls:
            self.settle_now(keys, args)

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        return self.memory.read(counters, leases, hashes, now)

    async def close(self) -> None:
        pass


class WorkerStore:
    """The supervisor's ``MemoryStore``, over one Unix connection per worker: messages are
    orjson lines, answered in order, so replies are matched to calls by their order."""

    kind = "workers"

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: collections.deque[asyncio.Future[object]] = collections.deque()
        self._connecting: asyncio.Lock | None = None

    async def _call(self, message: list[object]) -> object:
        replies = await self._calls([message])
        return replies[0]

    async def _calls(self, messages: Sequence[list[object]]) -> list[object]:
        sent = False
        try:
            async with asyncio.timeout(self.timeout):
                writer = await self._connection()
                loop = asyncio.get_running_loop()
                futures: list[asyncio.Future[object]] = [loop.create_future() for _ in messages]
                self._waiting.extend(futures)
                writer.write(b"".join(orjson.dumps(m) + b"\n" for m in messages))
                sent = True
                return [await future for future in futures]
        except (OSError, TimeoutError) as exc:
            # A late reply would be taken for the next call's: start over on a new connection.
            error = StoreUnavailable(f"the supervisor's store: {exc or 'timed out'}", sent=sent)
            self._drop(error)
            raise error from None

    async def _connection(self) -> asyncio.StreamWriter:
        if self._writer is not None:
            return self._writer
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is None:
                reader, writer = await asyncio.open_unix_connection(self.path, limit=LINE_LIMIT)
                self._writer = writer
                self._reader_task = asyncio.create_task(self._replies(reader))
            return self._writer

    async def _replies(self, reader: asyncio.StreamReader) -> None:
        error = StoreUnavailable("the supervisor's store closed the connection")
        try:
            while line := await reader.readline():
                reply = orjson.loads(line)
                future = self._waiting.popleft()
                if future.done():
                    continue
                if "error" in reply:
                    future.set_exception(StoreUnavailable(str(reply["error"])))
                else:
                    future.set_result(reply.get("ok"))
        except (OSError, ValueError, IndexError) as exc:
            error = StoreUnavailable(f"the supervisor's store: {exc}")
        self._drop(error, reading=True)

    def _drop(self, error: StoreUnavailable, *, reading: bool = False) -> None:
        writer, self._writer = self._writer, None
        task, self._reader_task = self._reader_task, None
        if writer is not None:
            writer.close()
        if task is not None and not reading:
            task.cancel()
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)

    async def reserve(self, keys: list[str], args: list[str]) -> list[int]:
        reply = await self._call(["reserve", keys, args])
        if not isinstance(reply, list):
            raise StoreUnavailable("the supervisor's store answered a reservation wrongly")
        return [int(value) for value in reply]

    async def settle(self, keys: list[str], args: list[str]) -> None:
        await self._call(["settle", keys, args])

    async def settle_many(self, calls: Sequence[tuple[list[str], list[str]]]) -> None:
        await self._calls([["settle", keys, args] for keys, args in calls])

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        reply = await self._call(["read", list(counters), list(leases), list(hashes), now])
        if not isinstance(reply, list) or len(reply) != 3:
            raise StoreUnavailable("the supervisor's store answered a read wrongly")
        values, in_flight, found = reply
        return Snapshot(tuple(values), tuple(in_flight), tuple(found))

    async def close(self) -> None:
        task = self._reader_task
        self._drop(StoreUnavailable("the store is closed"))
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class RedisStore:
    """Redis, through the ``redis`` package's asyncio client. Its scripts run by EVALSHA
    (``register_script`` loads one again after a restart wiped it); the client retries
    nothing itself: the limiter's failure policy decides, within its own timeout."""

    kind = "redis"

    def __init__(self, url: str, timeout: float) -> None:
        self.timeout = timeout
        self.redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
        )
        self._reserve = self.redis.register_script(RESERVE)
        self._settle = self.redis.register_script(SETTLE)

    async def reserve(self, keys: list[str], args: list[str]) -> list[int]:
        reply = await self._run(self._reserve(keys=keys, args=args))
        return [int(value) for value in reply]

    async def settle(self, keys: list[str], args: list[str]) -> None:
        await self._run(self._settle(keys=keys, args=args))

    async def settle_many(self, calls: Sequence[tuple[list[str], list[str]]]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for keys, args in calls:
            await self._settle(keys=keys, args=args, client=pipe)  # queued, not sent
        await self._run(pipe.execute())

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        pipe = self.redis.pipeline(transaction=False)
        for key in counters:
            pipe.get(key)
        for key in leases:
            pipe.zcount(key, f"({now!r}", "+inf")  # a lease whose deadline passed is gone
        for key in hashes:
            pipe.hgetall(key)
        replies = await self._run(pipe.execute())
        values = replies[: len(counters)]
        in_flight = replies[len(counters) : len(counters) + len(leases)]
        found = replies[len(counters) + len(leases) :]
        return Snapshot(
            tuple(int(v) if v is not None else 0 for v in values),
            tuple(int(v) for v in in_flight),
            tuple({k.decode(): int(v) for k, v in h.items()} for h in found),
        )

    async def _run(self, call: Awaitable[Any]) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                return await call
        except TimeoutError:
            await self._reconnect()
            raise StoreUnavailable("Redis: timed out", sent=True) from None
        except (RedisError, OSError) as exc:
            # A reply that timed out at the socket is the same as ours; the rest (refused,
            # reset, an error reply) is taken as not applied.
            sent = isinstance(exc, RedisTimeoutError)
            if isinstance(exc, RedisConnectionError | OSError):
                await self._reconnect()
            raise StoreUnavailable(f"Redis: {exc}", sent=sent) from None

    async def _reconnect(self) -> None:
        # The pool's other connections went down with the one that failed (a restarted
        # server): every call would fail once on one of them after it is back.
        with contextlib.suppress(RedisError, OSError):
            await self.redis.connection_pool.disconnect()

    async def close(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()
