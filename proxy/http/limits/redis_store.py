"""``RedisStore``: team limits and the ledger in Redis, shared by every replica (docs/limits.md).

The scripts of ``proxy.core.limits.scripts`` by EVALSHA, over one pipelined connection of our
own (``proxy.http.limits.resp``). A request's reservation waits for the turn of the loop to end,
and goes out with the others of its team made in that turn, in one RESERVE call.

An error reply is the store's failure only when it says the server serves nobody now
(``_DOWN``: loading, busy, out of memory, a replica, ...); any other is the call's, from what
its team's keys hold (``StoreDataError``): the other teams are not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Final

from proxy.core.limits.admission import Decision, Reservation, release
from proxy.core.limits.memory import Snapshot
from proxy.core.limits.scripts import (
    RESERVE,
    RESERVE_BATCH,
    SETTLE,
    Run,
    reserve_decision,
    reserve_replies,
    reserve_static,
    reserve_tail,
)
from proxy.core.limits.tally import Tally
from proxy.http.limits.channel import Pipelined
from proxy.http.limits.resp import (
    Arg,
    Reply,
    ReplyError,
    RespConnection,
    address,
    pack,
    pack_args,
    pack_texts,
)
from proxy.http.limits.stores import (
    Connected,
    Settle,
    Shape,
    StoreDataError,
    StoreUnavailable,
    same_shape,
    shape,
    unavailable,
)

# A waiter's part of a RESERVE reply: its run's integers (``limits_lua``).
Waiters = list["asyncio.Future[list[int]]"]

# The error replies of a server that serves nobody now (Redis's own prefixes): whatever the
# call, it was not run, and may be sent again once the server answers.
_DOWN: Final = frozenset(
    {"ASK", "BUSY", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "MISCONF", "MOVED", "NOAUTH",
     "NOPERM", "NOREPLICAS", "NOSCRIPT", "OOM", "READONLY", "TRYAGAIN", "WRONGPASS"}
)  # fmt: skip


class _Batch:
    """The runs of one team's window made in one turn of the loop (``limits_lua.Run``: a
    request's own reservation, or a pool's fill): one RESERVE call, and a future for each
    run, waiting for its part of the reply."""

    __slots__ = ("head", "runs", "size", "waiters")

    def __init__(self, head: bytes, size: int) -> None:
        self.head = head  # EVALSHA, its KEYS and the window's ARGV, packed: ``size`` of them
        self.size = size
        self.waiters: Waiters = []
        self.runs: list[Run] = []

    def parts(self) -> list[_Batch]:
        """The batch in calls of at most ``RESERVE_BATCH`` reservations, a run never split
        (none is longer: ``RedisStore.reserve_run``)."""
        if sum(len(run) for run in self.runs) <= RESERVE_BATCH:
            return [self]
        parts: list[_Batch] = []
        part, held = None, 0
        for waiter, run in zip(self.waiters, self.runs, strict=True):
            if part is None or held + len(run) > RESERVE_BATCH:
                part, held = _Batch(self.head, self.size), 0
                parts.append(part)
            part.waiters.append(waiter)
            part.runs.append(run)
            held += len(run)
        return parts

    def command(self, now: float) -> bytes:
        tail = reserve_tail(self.runs, now)
        return b"*%d\r\n" % (self.size + len(tail)) + self.head + pack_texts(tail)


class RedisStore(Connected[Reply]):
    """Redis, over one pipelined connection (``proxy.http.limits.resp``): the scripts by EVALSHA,
    loaded again when a restarted server has lost them (NOSCRIPT). Nothing is retried
    otherwise: the limiter's failure policy decides, within ``timeout``.

    The reservations made in one turn of the loop go out together, one RESERVE call per team
    that admits them in turn, as calls of their own would: written when the turn is over, as
    one of their own would be, and one script for Redis to run, not one a request."""

    kind = "redis"
    name = "Redis"
    prefetch = True

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(timeout)
        self._address = address(url)
        self._sha = {
            script: hashlib.sha1(script.encode()).hexdigest() for script in (RESERVE, SETTLE)
        }
        # Per team, RESERVE packed up to the batch's own ARGV, what it holds, and its length.
        self._reserve: dict[str, tuple[Shape, bytes, int]] = {}
        self._batches: dict[bytes, _Batch] = {}  # by their head: this turn's, not yet sent
        self._later: set[asyncio.Task[None]] = set()

    async def reserve(self, reservation: Reservation, now: float) -> Decision:
        reply = await self._waiter((reservation,))
        return reserve_decision(reservation, reply, now)

    async def reserve_run(self, run: Run, now: float) -> tuple[int, Decision]:
        """A run of one team's window (at most ``RESERVE_BATCH``: a pool's fill), in this
        turn's batch."""
        if not 0 < len(run) <= RESERVE_BATCH:
            raise ValueError(f"a run of {len(run)} reservations")
        waiter = self._waiter(run)
        try:
            reply = await waiter
        except BaseException:
            # Cancelled once answered: what was admitted goes back (before, ``_answer`` does).
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._release_later(list(run[: waiter.result()[0]]))
            raise
        return reply[0], reserve_decision(run[0], reply, now)

    def _waiter(self, run: Run) -> asyncio.Future[list[int]]:
        """A run of one team's window, in this turn's batch of it: its part of the reply."""
        first = run[0]
        kept = self._reserve.get(first.team)
        if kept is None or not same_shape(kept[0], first):
            kept = self._reserve[first.team] = (shape(first), *self._reserve_head(first))
        batches = self._batches
        batch = batches.get(kept[1])
        loop = asyncio.get_running_loop()
        if batch is None:
            if not batches:
                loop.call_soon(self._send_reservations)
            batch = batches[kept[1]] = _Batch(kept[1], kept[2])
        waiter: asyncio.Future[list[int]] = loop.create_future()
        batch.waiters.append(waiter)
        batch.runs.append(run)
        return waiter

    def _reserve_head(self, reservation: Reservation) -> tuple[bytes, int]:
        keys, static = reserve_static(reservation)
        head: list[Arg] = ["EVALSHA", self._sha[RESERVE], len(keys), *keys, *static]
        return pack_args(head), len(head)

    def _send_reservations(self) -> None:
        """This turn's reservations: a call per team, of at most ``RESERVE_BATCH``."""
        batches, self._batches = self._batches, {}
        now = time.time()
        connection = self._connection
        for whole in batches.values():
            for batch in whole.parts():
                command = batch.command(now)
                if connection is not None and not connection.closed:
                    connection.send_then(command, 1, partial(self._reserved, command, batch))
                else:
                    self._resend_later(command, batch, None)

    def _reserved(self, command: bytes, batch: _Batch, outcome: list[Reply] | Exception) -> None:
        if isinstance(outcome, Exception):
            self._drop()
            _fail(batch.waiters, unavailable(self.name, outcome, sent=True))
            return
        (reply,) = outcome
        if isinstance(reply, ReplyError):
            self._resend_later(command, batch, reply)
        else:
            self._answer(batch, reply)

    def _resend_later(self, command: bytes, batch: _Batch, error: ReplyError | None) -> None:
        """A batch that needs a coroutine: to connect first, or to load the script again."""
        self._later_task(self._resend(command, batch, error))

    async def _resend(self, command: bytes, batch: _Batch, error: ReplyError | None) -> None:
        try:
            reply: Reply = error
            if error is None:
                (reply,) = await self._send(command, 1)
            if isinstance(reply, ReplyError):
                (reply,) = await self._reloaded(RESERVE, command, reply, _teams(batch))
        except StoreUnavailable as exc:
            _fail(batch.waiters, exc)
        except BaseException:
            # Cancelled, the store closing: no request waits for ever.
            _fail(batch.waiters, StoreUnavailable(f"{self.name}: closed", sent=True))
            raise
        else:
            self._answer(batch, reply)

    def _answer(self, batch: _Batch, reply: Reply) -> None:
        """Each waiting run's part of RESERVE's reply, a string of integers (``limits_lua``).
        One whose waiter was cancelled meanwhile (its client left) gives back all that was
        admitted, its requests too (``limits.release``): nobody else will settle them, and
        they spent nothing."""
        runs = batch.runs
        try:
            if type(reply) is not bytes:
                raise ValueError(repr(reply))
            replies = reserve_replies([*map(int, reply.split())], runs)
        except ValueError as exc:
            _fail(batch.waiters, StoreUnavailable(f"Redis answered RESERVE with {exc}", sent=True))
            return
        left: list[Reservation] = []
        for waiter, run, values in zip(batch.waiters, runs, replies, strict=True):
            if not waiter.done():
                waiter.set_result(values)
            elif values[0]:
                left += run[: values[0]]
        self._release_later(left)

    def _release_later(self, reservations: list[Reservation]) -> None:
        if reservations:
            now = time.time()
            self._later_task(
                self._give_back([(r.team, release(r, now), None) for r in reservations])
            )

    async def _give_back(self, calls: list[Settle]) -> None:
        # Not given back, its slot frees when its lease ends, its tokens when their window does.
        with contextlib.suppress(StoreUnavailable):
            await self.settle_many(Tally.of(calls))

    async def close(self) -> None:
        """What is under way gets the store's timeout to end; the turn's reservations not yet
        sent, and what is still under way then, fail."""
        if self._later:
            await asyncio.wait(list(self._later), timeout=self.timeout)
        for task in list(self._later):
            task.cancel()
        batches, self._batches = self._batches, {}
        for batch in batches.values():
            _fail(batch.waiters, StoreUnavailable(f"{self.name}: closed"))
        await super().close()

    def _later_task(self, coroutine: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._later.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._later.discard)

    async def settle_many(self, tally: Tally) -> None:
        """Each team's SETTLE. A server down for every call: ``StoreUnavailable`` (a marked
        tally may be sent again whole: what was applied is not applied twice). A team's call
        refused, or keys of its left alone: ``StoreDataError``, once the others are applied."""
        replies = await self._scripts(SETTLE, tally.calls(time.time()))
        for reply in replies:
            if isinstance(reply, ReplyError) and _down(reply):
                raise StoreUnavailable(f"Redis: {reply}", sent=True)
        said, teams, dropped = [], [], 0
        for (team, count), reply in zip(tally.teams(), replies, strict=True):
            if isinstance(reply, ReplyError):
                said.append(f"{team}'s settlements: {reply}")
                teams.append(team)
                dropped += count
            elif isinstance(reply, list) and len(reply) == 2 and reply[1] != 0:
                said.append(f"{team}'s settlements left {reply[1]!r} keys or fields alone")
                teams.append(team)
        if said:
            raise StoreDataError(f"Redis holds what it should not: {'; '.join(said)}",
                                 tuple(teams), dropped)  # fmt: skip

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
            tuple(
                _integer(v, k) if v is not None else 0
                for k, v in zip(counters, values, strict=True)
            ),
            tuple(_integer(v, k) for k, v in zip(leases, in_flight, strict=True)),
            tuple(_pairs(h, k) for k, h in zip(hashes, found, strict=True)),
        )

    async def _reloaded(
        self, script: str, command: bytes, error: ReplyError, teams: tuple[str, ...]
    ) -> list[Reply]:
        """The replies to an EVALSHA that was answered ``error``: sent again once the script
        is loaded, if the server had lost it (NOSCRIPT); else ``StoreUnavailable``."""
        if error.kind != "NOSCRIPT":
            # A script that failed midway is not undone: not sent again.
            raise refusal(error, teams)
        _checked(await self._call([["SCRIPT", "LOAD", script]]))
        return _checked(await self._send(command, 1), teams)

    async def _scripts(
        self, script: str, calls: Sequence[tuple[list[str], list[str]]]
    ) -> list[Reply]:
        sha = self._sha[script]
        # Every KEYS and ARGV is a string: packed at one encoding a call (pack_texts).
        commands = [
            b"*%d\r\n" % (3 + len(k) + len(a)) + pack_args(["EVALSHA", sha, len(k)])
            + pack_texts([*k, *a])
            for k, a in calls
        ]  # fmt: skip
        replies = await self._send(b"".join(commands), len(commands))
        again = [
            i for i, r in enumerate(replies) if isinstance(r, ReplyError) and r.kind == "NOSCRIPT"
        ]
        if again:
            # A server restarted empty: load the script, and send what it refused once more.
            _checked(await self._call([["SCRIPT", "LOAD", script]]))
            resent = await self._send(b"".join([commands[i] for i in again]), len(again))
            for i, reply in zip(again, resent, strict=True):
                replies[i] = reply
        return replies

    async def _call(self, commands: Sequence[Sequence[Arg]]) -> list[Reply]:
        return await self._send(b"".join([pack(command) for command in commands]), len(commands))

    async def _open(self) -> Pipelined[Reply]:
        return await RespConnection.open(self._address, self.timeout)


def _fail(waiters: Waiters, failure: StoreUnavailable) -> None:
    for waiter in waiters:
        if not waiter.done():
            # One exception each: raised in several tasks, one would gather all their frames.
            if isinstance(failure, StoreDataError):
                waiter.set_exception(StoreDataError(str(failure), failure.teams))
            else:
                waiter.set_exception(StoreUnavailable(str(failure), sent=failure.sent))


def _teams(batch: _Batch) -> tuple[str, ...]:
    return (batch.runs[0][0].team,) if batch.runs else ()


def _down(error: ReplyError) -> bool:
    # Not a prefix of its own: the server took no more connections, and closes this one.
    return error.kind in _DOWN or str(error).startswith("ERR max number of clients")


def refusal(error: ReplyError, teams: tuple[str, ...] = ()) -> StoreUnavailable:
    """An error reply as the store's failure, or as its call's (``StoreDataError``)."""
    if _down(error):
        return StoreUnavailable(f"Redis: {error}", sent=True)
    return StoreDataError(f"Redis: {error}", teams)


def _checked(replies: list[Reply], teams: tuple[str, ...] = ()) -> list[Reply]:
    for reply in replies:
        if isinstance(reply, ReplyError):
            # Answered: the other calls sent with it were applied, and a script that failed
            # midway is not undone. Sent again, they would count twice.
            raise refusal(reply, teams)
    return replies


def _integer(reply: Reply, key: str) -> int:
    # What a key holds that the scripts did not write: this key's trouble (its team's), not
    # the store's failure, nor a traceback.
    if isinstance(reply, int):
        return reply
    if isinstance(reply, bytes):
        try:
            return int(reply)
        except ValueError:
            pass
    raise StoreDataError(f"Redis holds {_shown(reply)} at {key}, not an integer", ())


def _pairs(reply: Reply, key: str) -> dict[str, int]:
    """HGETALL's flat list of field, value, field, value, ... as a dict."""
    if not isinstance(reply, list) or len(reply) % 2:
        return {}
    return {
        k.decode(errors="replace") if isinstance(k, bytes) else str(k): _integer(v, key)
        for k, v in zip(reply[::2], reply[1::2], strict=True)
    }


def _shown(reply: Reply) -> str:
    text = repr(reply)
    return text if len(text) <= 40 else f"{text[:37]}..."
