"""Where a worker's limits and ledger live: ``LocalStore`` (this process alone), ``WorkerStore``
(the server's supervisor, shared by its workers) and ``RedisStore`` (every replica's, in
``proxy.http.limits.redis_store``).

Each runs ``proxy.core.limits.scripts``'s calls: the local store on ``MemoryStore`` itself, the
supervisor's over a Unix socket (``proxy.ops.limits.state_service``), Redis as scripts (through
the ``redis`` package: ``proxy.http.limits.redis_client``). A store that
cannot answer raises ``StoreUnavailable``; ``proxy.http.limits.limiter`` decides what that means.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Final, Generic, Protocol, TypeVar

import orjson

from proxy.core.limits.admission import Charge, Decision, Reservation, Settlement
from proxy.core.limits.ledger import Entry
from proxy.core.limits.memory import MemoryStore, Snapshot
from proxy.core.limits.scripts import (
    Run,
    reserve_decision,
    reserve_replies,
    reserve_static,
    reserve_tail,
)
from proxy.core.limits.tally import Tally
from proxy.http.limits.channel import Incomplete, Pipelined

# How often the local store drops expired keys (reads ignore them meanwhile).
PURGE_EVERY: Final = 60.0
# A reply line of the supervisor's at most this long (a read of every team's hashes).
LINE_LIMIT: Final = 16 * 2**20


R = TypeVar("R")
Settle = tuple[str, Settlement, Entry | None]  # a request's team, settlement, ledger entry


class StoreUnavailable(Exception):
    """The store did not answer (down, unreachable, too slow, or it said it failed).
    ``sent``: the call may have reached it (timed out waiting), so may have been applied."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class StoreDataError(StoreUnavailable):
    """The store answered, but refused a call, or left a key of it alone, for what one team's
    keys hold (not an integer the proxy wrote, a key of another type): that team's trouble, not
    the store's failure, which the limiter reports without taking the store for down.
    ``teams``: whose keys; ``dropped``: the settlements whose calls failed whole."""

    def __init__(self, message: str, teams: tuple[str, ...], dropped: int = 0) -> None:
        super().__init__(message, sent=True)
        self.teams = teams
        self.dropped = dropped


class Store(Protocol):
    kind: str  # "memory", "workers" or "redis", for logs and /admin/limits
    prefetch: bool  # a round trip away: worth reserving ahead (``proxy.core.limits.prefetch``)

    async def reserve(self, reservation: Reservation, now: float) -> Decision: ...

    async def reserve_run(self, run: Run, now: float) -> tuple[int, Decision]:
        """Reservations alike, admitted in turn up to the first refused: how many were, and
        the decision on the first (its counters, as a store saw them)."""

    async def settle_many(self, tally: Tally) -> None:
        """The settlements summed in ``tally``: one call per team."""

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot: ...

    async def close(self) -> None: ...


class LocalStore:
    """``MemoryStore`` in this process: nothing to wait for, nothing that fails."""

    kind = "memory"
    prefetch = False

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

    async def reserve_run(self, run: Run, now: float) -> tuple[int, Decision]:
        first = self.memory.reserve(run[0], now)
        admitted = int(first.admitted)
        while admitted and admitted < len(run):
            if not self.memory.reserve(run[admitted], now).admitted:
                break
            admitted += 1
        return admitted, first

    async def settle_many(self, tally: Tally) -> None:
        now = time.time()
        for keys, args in tally.calls(now):
            self.memory.eval_settle(keys, args, now)

    async def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        return self.memory.read(counters, leases, hashes, now)

    async def close(self) -> None:
        pass


class Connected(Generic[R]):
    """A store on one pipelined connection of its own (the supervisor's), made when a call
    needs it (within the timeout) and dropped on any failure, for the next call to make again.
    ``name`` begins its errors."""

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
        except (TimeoutError, ConnectionError, OSError) as exc:
            # A store that does not answer: its replies, if they ever come, are not read (a
            # late one would be taken for the next call's).
            self._drop()
            raise unavailable(self.name, exc, sent=sent) from None

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


class WorkerStore(Connected[object]):
    """The supervisor's ``MemoryStore``, over one Unix connection per worker: messages are
    orjson lines, answered in order (``proxy.ops.limits.state_service``)."""

    kind = "workers"
    name = "the supervisor's store"
    prefetch = True

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(timeout)
        self.path = path
        # Per team, a reservation's message up to the request's own ARGV, and what it holds.
        self._reserve: dict[str, tuple[Shape, bytes]] = {}

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        return (await self.reserve_run((reservation,), now))[1]

    async def reserve_run(self, run: Run, now: float) -> tuple[int, Decision]:
        """One message for a run of one team's window (``limits_lua``)."""
        first = run[0]
        kept = self._reserve.get(first.team)
        if kept is None or not same_shape(kept[0], first):
            keys, static = reserve_static(first)
            # The message without its closing bracket: ["reserve",keys,shared args,
            head = orjson.dumps(["reserve", keys, static])[:-1] + b","
            kept = self._reserve[first.team] = (shape(first), head)
        tail = reserve_tail((run,), now)
        (reply,) = await self._oks(kept[1] + orjson.dumps(tail) + b"]\n", 1)
        try:
            if not isinstance(reply, list) or not all(type(value) is int for value in reply):
                raise ValueError(repr(reply)[:100])
            (values,) = reserve_replies(reply, (run,))
            return values[0], reserve_decision(first, values, now)
        except ValueError as exc:
            raise StoreUnavailable(
                f"the supervisor's store answered a reservation wrongly: {exc}"
            ) from None

    async def settle_many(self, tally: Tally) -> None:
        messages = [["settle", keys, args] for keys, args in tally.calls(time.time())]
        data = b"".join([orjson.dumps(m) + b"\n" for m in messages])
        said, teams, dropped = [], [], 0
        replies = await self._send(data, len(messages))
        for (team, count), reply in zip(tally.teams(), replies, strict=True):
            if not isinstance(reply, dict) or "error" in reply:
                said.append(f"{team}: {reply.get('error') if isinstance(reply, dict) else reply}")
                teams.append(team)
                dropped += count
        if said:
            # Answered: the others were applied; this one would be refused again.
            raise StoreDataError(f"{self.name} refused settlements: {'; '.join(said)}",
                                 tuple(teams), dropped)  # fmt: skip

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


def unavailable(name: str, exc: BaseException, *, sent: bool) -> StoreUnavailable:
    if isinstance(exc, TimeoutError):
        return StoreUnavailable(f"{name}: timed out", sent=sent)
    return StoreUnavailable(f"{name}: {exc}", sent=sent)


# What a packed reservation's head holds: the charges of a team's window, and its lease limit.
Shape = tuple[tuple[Charge, ...], int | None]


def shape(reservation: Reservation) -> Shape:
    lease = reservation.lease
    return reservation.charges, None if lease is None else lease.limit


def same_shape(shape: Shape, reservation: Reservation) -> bool:
    # The charges are the same objects for a whole window (limits.Windows.plan); the lease
    # limit is compared too, as a team with no counter has the same (empty) charges always.
    lease = reservation.lease
    return shape[0] is reservation.charges and shape[1] == (None if lease is None else lease.limit)
