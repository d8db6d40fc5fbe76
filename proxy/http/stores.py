"""Where a worker's limits and ledger live: ``LocalStore`` (this process alone), ``WorkerStore``
(the server's supervisor, shared by its workers) and ``RedisStore`` (every replica's).

Each runs ``proxy.core.limits_lua``'s calls: the local store on ``MemoryStore`` itself, the
supervisor's over a Unix socket (``proxy.ops.state_service``), Redis as scripts. A store that
cannot answer raises ``StoreUnavailable``; ``proxy.http.limiter`` decides what that means.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from typing import Final, Generic, Protocol, TypeVar, cast

import orjson

from proxy.core.ledger import Entry
from proxy.core.limits import Charge, Decision, Reservation, Settlement
from proxy.core.limits_lua import (
    DYNAMIC_ARGS,
    RESERVE,
    SETTLE,
    reserve_decision,
    reserve_dynamic,
    reserve_static,
)
from proxy.core.limits_store import MemoryStore, Snapshot
from proxy.core.tally import Tally
from proxy.http.pipelined import Incomplete, Pipelined
from proxy.http.resp import (
    Arg,
    Reply,
    ReplyError,
    RespConnection,
    address,
    pack,
    pack_args,
    pack_texts,
)

# How often the local store drops expired keys (reads ignore them meanwhile).
PURGE_EVERY: Final = 60.0
# A reply line of the supervisor's at most this long (a read of every team's hashes).
LINE_LIMIT: Final = 16 * 2**20


R = TypeVar("R")
_INT: Final = frozenset({int})
Settle = tuple[str, Settlement, Entry | None]  # a request's team, settlement, ledger entry


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

    def settle_now(self, team: str, settlement: Settlement, entry: Entry | None) -> None:
        now = time.time()
        self.memory.settle(settlement, now, entry)
        if now - self._purged > PURGE_EVERY:
            self._purged = now
            self.memory.purge(now)

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        return self.memory.reserve(reservation, now)

    async def settle_many(self, calls: Sequence[Settle]) -> None:
        for team, settlement, entry in calls:
            self.settle_now(team, settlement, entry)

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        return self.memory.read(counters, leases, hashes, now)

    async def close(self) -> None:
        pass


class _Connected(Generic[R]):
    """What the shared stores have in common: one pipelined connection, made when a call
    needs it (within the timeout) and dropped on any failure, for the next call to make again.
    ``name`` begins their errors."""

    name = "the store"

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._connection: Pipelined[R] | None = None
        self._connecting: asyncio.Lock | None = None

    async def _open(self) -> Pipelined[R]:
        raise NotImplementedError

    async def _send(self, data: bytes, count: int) -> list[R]:
        """The replies to the ``count`` calls packed in ``data``; ``StoreUnavailable`` if
        they do not come."""
        if not count:
            return []  # a call of nothing would wait for replies that never come
        sent = False
        try:
            connection = self._connection
            if connection is None or connection.closed:
                async with asyncio.timeout(self.timeout):
                    connection = await self._connect()
            # Bounded by the connection's watchdog (its timeout is ours), not a timer per call.
            replies = connection.send(data, count)
            sent = True
            return await replies
        except TimeoutError:
            # A store that does not answer: its replies, if they ever come, are not read (a
            # late one would be taken for the next call's).
            self._drop()
            raise StoreUnavailable(f"{self.name}: timed out", sent=sent) from None
        except (ConnectionError, OSError, ReplyError) as exc:
            self._drop()
            raise StoreUnavailable(f"{self.name}: {exc}", sent=sent) from None

    async def _connect(self) -> Pipelined[R]:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            connection = self._connection
            if connection is None or connection.closed:
                connection = self._connection = await self._open()
            return connection

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    async def close(self) -> None:
        self._drop()


class _Lines(Pipelined[object]):
    """The supervisor's store, on one pipelined connection (``Pipelined``): each reply is an
    orjson line, ``{"ok": ...}`` or ``{"error": "..."}``."""

    name = "the supervisor's store"

    def parse(self, buffer: bytearray, start: int) -> tuple[object, int]:
        end = buffer.find(b"\n", start)
        if end < 0:
            raise Incomplete
        return orjson.loads(buffer[start:end]), end + 1


class WorkerStore(_Connected[object]):
    """The supervisor's ``MemoryStore``, over one Unix connection per worker: messages are
    orjson lines, answered in order (``proxy.ops.state_service``)."""

    kind = "workers"
    name = "the supervisor's store"

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(timeout)
        self.path = path
        # Per team, a reservation's message up to the request's own ARGV, and what it holds.
        self._reserve: dict[str, tuple[Shape, bytes]] = {}

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        kept = self._reserve.get(reservation.team)
        if kept is None or not _same(kept[0], reservation):
            keys, static = reserve_static(reservation)
            # The message without its closing bracket: ["reserve",keys,shared args,
            head = orjson.dumps(["reserve", keys, static])[:-1] + b","
            kept = self._reserve[reservation.team] = (_shape(reservation), head)
        (reply,) = await self._oks(
            kept[1] + orjson.dumps(reserve_dynamic(reservation, now)) + b"]\n", 1
        )
        if not isinstance(reply, list) or not all(type(value) is int for value in reply):
            raise StoreUnavailable("the supervisor's store answered a reservation wrongly")
        return reserve_decision(reservation, reply, now)

    async def settle_many(self, calls: Sequence[Settle]) -> None:
        messages = [["settle", keys, args] for keys, args in _tallied(calls)]
        await self._oks(b"".join([orjson.dumps(m) + b"\n" for m in messages]), len(messages))

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        message = ["read", list(counters), list(leases), list(hashes), now]
        (reply,) = await self._oks(orjson.dumps(message) + b"\n", 1)
        if not isinstance(reply, list) or len(reply) != 3:
            raise StoreUnavailable("the supervisor's store answered a read wrongly")
        values, in_flight, found = reply
        return Snapshot(tuple(values), tuple(in_flight), tuple(found))

    async def _oks(self, data: bytes, count: int) -> list[object]:
        """The ``ok`` of each reply; ``StoreUnavailable`` for an error reply, or none."""
        oks = []
        for reply in await self._send(data, count):
            if not isinstance(reply, dict) or "error" in reply:
                error = reply.get("error") if isinstance(reply, dict) else reply
                # Answered: the other messages sent with it were applied (not to send again).
                raise StoreUnavailable(f"{self.name}: {error}", sent=True)
            oks.append(reply.get("ok"))
        return oks

    async def _open(self) -> Pipelined[object]:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_unix_connection(
            lambda: _Lines(self.timeout, LINE_LIMIT), self.path
        )
        return connection


class RedisStore(_Connected[Reply]):
    """Redis, over one pipelined connection (``proxy.http.resp``): the scripts by EVALSHA,
    loaded again when a restarted server has lost them (NOSCRIPT). Nothing is retried
    otherwise: the limiter's failure policy decides, within ``timeout``."""

    kind = "redis"
    name = "Redis"

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(timeout)
        self._address = address(url)
        self._sha = {
            script: hashlib.sha1(script.encode()).hexdigest() for script in (RESERVE, SETTLE)
        }
        # Per team, RESERVE packed up to the request's own ARGV, and what it holds.
        self._reserve: dict[str, tuple[Shape, bytes]] = {}

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        kept = self._reserve.get(reservation.team)
        if kept is None or not _same(kept[0], reservation):
            kept = self._reserve[reservation.team] = (
                _shape(reservation),
                self._reserve_head(reservation),
            )
        command = kept[1] + pack_texts(reserve_dynamic(reservation, now))
        # Awaited here, not through a helper: one coroutine fewer to resume on every request.
        (reply,) = await self._send(command, 1)
        if isinstance(reply, ReplyError):
            (reply,) = await self._reloaded(RESERVE, command, reply)
        # An array of integers, and nothing else (a set of their types: no loop in Python).
        if type(reply) is not list or not reply or {*map(type, reply)} != _INT:
            raise StoreUnavailable(f"Redis answered RESERVE with {reply!r}")
        return reserve_decision(reservation, cast(list[int], reply), now)

    def _reserve_head(self, reservation: Reservation) -> bytes:
        keys, static = reserve_static(reservation)
        head: list[Arg] = ["EVALSHA", self._sha[RESERVE], len(keys), *keys, *static]
        return b"*%d\r\n" % (len(head) + DYNAMIC_ARGS) + pack_args(head)

    async def settle_many(self, calls: Sequence[Settle]) -> None:
        await self._scripts(SETTLE, _tallied(calls))

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        commands: list[list[Arg]] = [["GET", key] for key in counters]
        commands += [["ZCOUNT", key, f"({now!r}", "+inf"] for key in leases]
        commands += [["HGETALL", key] for key in hashes]
        replies = _checked(await self._call(commands))
        values = replies[: len(counters)]
        in_flight = replies[len(counters) : len(counters) + len(leases)]
        found = replies[len(counters) + len(leases) :]
        return Snapshot(
            tuple(_integer(v) if v is not None else 0 for v in values),
            tuple(_integer(v) for v in in_flight),
            tuple(_pairs(h) for h in found),
        )

    async def _reloaded(self, script: str, command: bytes, error: ReplyError) -> list[Reply]:
        """The replies to an EVALSHA that was answered ``error``: sent again once the script
        is loaded, if the server had lost it (NOSCRIPT); else ``StoreUnavailable``."""
        if error.kind != "NOSCRIPT":
            # A script that failed midway is not undone: not sent again.
            raise StoreUnavailable(f"Redis: {error}", sent=True)
        _checked(await self._call([["SCRIPT", "LOAD", script]]))
        return _checked(await self._send(command, 1))

    async def _scripts(
        self, script: str, calls: Sequence[tuple[list[str], list[str]]]
    ) -> list[Reply]:
        sha = self._sha[script]
        commands: list[list[Arg]] = [["EVALSHA", sha, len(k), *k, *a] for k, a in calls]
        replies = await self._call(commands)
        again = [
            i for i, r in enumerate(replies) if isinstance(r, ReplyError) and r.kind == "NOSCRIPT"
        ]
        if again:
            # A server restarted empty: load the script, and send what it refused once more.
            _checked(await self._call([["SCRIPT", "LOAD", script]]))
            for i, reply in zip(again, await self._call([commands[i] for i in again]), strict=True):
                replies[i] = reply
        return _checked(replies)

    async def _call(self, commands: Sequence[Sequence[Arg]]) -> list[Reply]:
        return await self._send(b"".join([pack(command) for command in commands]), len(commands))

    async def _open(self) -> Pipelined[Reply]:
        return await RespConnection.open(self._address, self.timeout)


def _tallied(calls: Sequence[Settle]) -> list[tuple[list[str], list[str]]]:
    tally = Tally()
    for team, settlement, entry in calls:
        tally.add(team, settlement, entry)
    return tally.calls(time.time())


def _checked(replies: list[Reply]) -> list[Reply]:
    for reply in replies:
        if isinstance(reply, ReplyError):
            # Answered: the other calls sent with it were applied, and a script that failed
            # midway is not undone. Sent again, they would count twice.
            raise StoreUnavailable(f"Redis: {reply}", sent=True)
    return replies


# What a packed reservation's head holds: the charges of a team's window, and its lease limit.
Shape = tuple[tuple[Charge, ...], int | None]


def _shape(reservation: Reservation) -> Shape:
    lease = reservation.lease
    return reservation.charges, None if lease is None else lease.limit


def _same(shape: Shape, reservation: Reservation) -> bool:
    # The charges are the same objects for a whole window (limits.Windows.plan); the lease
    # limit is compared too, as a team with no counter has the same (empty) charges always.
    lease = reservation.lease
    return shape[0] is reservation.charges and shape[1] == (None if lease is None else lease.limit)


def _integer(reply: Reply) -> int:
    if isinstance(reply, int):
        return reply
    if isinstance(reply, bytes):
        return int(reply)
    raise StoreUnavailable(f"Redis answered {reply!r} for a number")


def _pairs(reply: Reply) -> dict[str, int]:
    """HGETALL's flat list of field, value, field, value, ... as a dict."""
    if not isinstance(reply, list):
        return {}
    return {
        k.decode() if isinstance(k, bytes) else str(k): _integer(v)
        for k, v in zip(reply[::2], reply[1::2], strict=True)
    }
