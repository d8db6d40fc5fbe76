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
import hashlib
import time
from collections.abc import Sequence
from typing import Final, Protocol

import orjson
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from proxy.core.ledger import Entry
from proxy.core.limits import Decision, Reservation, Settlement
from proxy.core.limits_lua import RESERVE, SETTLE, reserve_call, reserve_decision, settle_call
from proxy.core.limits_store import MemoryStore, Snapshot

# How often the local store drops expired keys (reads ignore them meanwhile).
PURGE_EVERY: Final = 60.0
# A reply line of the supervisor's at most this long (a read of every team's hashes).
LINE_LIMIT: Final = 16 * 2**20


Command = tuple[str | int, ...]
Settle = tuple[Settlement, Entry | None]  # a request's settlement and its ledger entry


class StoreUnavailable(Exception):
    """The store did not answer (down, unreachable, too slow, or it said it failed).
    ``sent``: the call may have reached it (timed out waiting), so may have been applied."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class Store(Protocol):
    kind: str  # "memory", "workers" or "redis", for logs and /admin/limits

    async def reserve(self, reservation: Reservation, now: float) -> Decision: ...

    async def settle_many(self, calls: Sequence[Settle]) -> None: ...

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

    def settle_now(self, settlement: Settlement, entry: Entry | None) -> None:
        now = time.time()
        self.memory.settle(settlement, now, entry)
        if now - self._purged > PURGE_EVERY:
            self._purged = now
            self.memory.purge(now)

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        return self.memory.reserve(reservation, now)

    async def settle_many(self, calls: Sequence[Settle]) -> None:
        for settlement, entry in calls:
            self.settle_now(settlement, entry)

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
        self._out: list[bytes] = []
        self._flush_soon = False

    def _flush(self, writer: asyncio.StreamWriter) -> None:
        self._flush_soon = False
        out, self._out = self._out, []
        if writer is self._writer and not writer.is_closing():
            writer.write(b"".join(out))

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
                # Written once the loop's turn is over, with every other call made in it.
                self._out.extend(orjson.dumps(m) + b"\n" for m in messages)
                if not self._flush_soon:
                    self._flush_soon = True
                    loop.call_soon(self._flush, writer)
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
        self._out = []
        task, self._reader_task = self._reader_task, None
        if writer is not None:
            writer.close()
        if task is not None and not reading:
            task.cancel()
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        reply = await self._call(["reserve", *reserve_call(reservation, now)])
        if not isinstance(reply, list):
            raise StoreUnavailable("the supervisor's store answered a reservation wrongly")
        return reserve_decision(reservation, [int(value) for value in reply], now)

    async def settle_many(self, calls: Sequence[Settle]) -> None:
        await self._calls([["settle", *settle_call(s, e)] for s, e in calls])

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
    """Redis, over one connection of the ``redis`` package's asyncio client, pipelined: the
    calls made while the connection is busy go out together in one write, and their replies
    are read in order. One EVALSHA at a time through the client's own methods cost several
    times a whole request's CPU (docs/performance.md). Scripts are loaded again when a
    restarted server has lost them (NOSCRIPT); nothing is retried otherwise: the limiter's
    failure policy decides, within ``timeout``."""

    kind = "redis"

    def __init__(self, url: str, timeout: float) -> None:
        self.timeout = timeout
        self._pool = ConnectionPool.from_url(
            url, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )
        self._sha = {
            script: hashlib.sha1(script.encode()).hexdigest() for script in (RESERVE, SETTLE)
        }
        self._queue: list[tuple[list[Command], asyncio.Future[list[object]]]] = []
        self._wake: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._connection: AbstractConnection | None = None

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        (reply,) = await self._scripts(RESERVE, [reserve_call(reservation, now)])
        if not isinstance(reply, list):
            raise StoreUnavailable(f"Redis answered RESERVE with {reply!r}")
        return reserve_decision(reservation, [int(value) for value in reply], now)

    async def settle_many(self, calls: Sequence[Settle]) -> None:
        await self._scripts(SETTLE, [settle_call(s, e) for s, e in calls])

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        commands: list[Command] = [("GET", key) for key in counters]
        commands += [("ZCOUNT", key, f"({now!r}", "+inf") for key in leases]
        commands += [("HGETALL", key) for key in hashes]
        replies = await self._call(commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise StoreUnavailable(f"Redis: {reply}")
        values = replies[: len(counters)]
        in_flight = replies[len(counters) : len(counters) + len(leases)]
        found = replies[len(counters) + len(leases) :]
        return Snapshot(
            tuple(int(v) if v is not None else 0 for v in values),  # type: ignore[call-overload]
            tuple(int(v) for v in in_flight),  # type: ignore[call-overload]
            tuple(_pairs(h) for h in found),
        )

    async def _scripts(
        self, script: str, calls: Sequence[tuple[list[str], list[str]]]
    ) -> list[object]:
        sha = self._sha[script]
        commands: list[Command] = [("EVALSHA", sha, len(k), *k, *a) for k, a in calls]
        replies = await self._call(commands)
        if any(isinstance(r, NoScriptError) for r in replies):
            # A server restarted empty: load the script, and send what it refused once more.
            await self._call([("SCRIPT", "LOAD", script)])
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            for i, reply in zip(again, await self._call([commands[i] for i in again]), strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise StoreUnavailable(f"Redis: {reply}")
        return replies

    async def _call(self, commands: list[Command]) -> list[object]:
        """The replies to ``commands``, sent together (an error reply is its exception)."""
        future: asyncio.Future[list[object]] = asyncio.get_running_loop().create_future()
        self._queue.append((commands, future))
        if self._runner is None or self._wake is None:
            self._wake = asyncio.Event()
            self._runner = asyncio.create_task(self._run(self._wake))
        self._wake.set()
        try:
            async with asyncio.timeout(self.timeout):
                return await future
        except TimeoutError:
            # A server that does not answer: its replies, if they ever come, are not read.
            self._reset(StoreUnavailable("Redis: timed out", sent=True))
            raise StoreUnavailable("Redis: timed out", sent=True) from None

    async def _run(self, wake: asyncio.Event) -> None:
        batch: list[tuple[list[Command], asyncio.Future[list[object]]]] = []
        sent = False
        try:
            # make_connection is public but untyped in the package.
            connection = self._connection = self._pool.make_connection()  # type: ignore[no-untyped-call]
            await connection.connect()
            while True:
                if not self._queue:
                    wake.clear()
                    await wake.wait()
                batch, self._queue = self._queue, []
                sent = False
                packed = connection.pack_commands([c for commands, _ in batch for c in commands])
                await connection.send_packed_command(packed, check_health=False)
                sent = True
                for commands, future in batch:
                    replies: list[object] = []
                    for _ in commands:
                        try:
                            replies.append(await connection.read_response())
                        except ResponseError as exc:  # the command's, not the connection's
                            replies.append(exc)
                    if not future.done():
                        future.set_result(replies)
                batch = []
        except (RedisError, OSError) as exc:
            error = StoreUnavailable(
                f"Redis: {exc}", sent=sent and not isinstance(exc, RedisConnectionError)
            )
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            self._reset(error, running=False)

    def _reset(self, error: StoreUnavailable, *, running: bool = True) -> None:
        runner, self._runner = self._runner, None
        connection, self._connection = self._connection, None
        queue, self._queue = self._queue, []
        self._wake = None
        if runner is not None and running:
            runner.cancel()
        for _, future in queue:
            if not future.done():
                future.set_exception(error)
        if connection is not None:
            # Closed without waiting: nothing more is read from it.
            asyncio.get_running_loop().create_task(connection.disconnect(nowait=True))

    async def close(self) -> None:
        runner = self._runner
        self._reset(StoreUnavailable("the store is closed"))
        if runner is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        with contextlib.suppress(RedisError, OSError):
            await self._pool.disconnect()


def _pairs(reply: object) -> dict[str, int]:
    """HGETALL's reply as a dict: a flat list of field, value, ... (RESP2, the pure-Python
    parser), or a map already (the hiredis parser)."""
    if isinstance(reply, dict):
        items = list(reply.items())
    elif isinstance(reply, list):
        items = list(zip(reply[::2], reply[1::2], strict=True))
    else:
        return {}
    return {bytes(k).decode(): int(v) for k, v in items}
