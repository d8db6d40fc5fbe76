"""``RedisStore``: team limits and the ledger in Redis, shared by every replica (docs/limits.md).

The scripts of ``proxy.core.limits.scripts`` by EVALSHA, through the ``redis`` package's asyncio
client (``proxy.http.limits.redis_client``): a server named by URL, or the master that Sentinel
names, found again after a failover. A request's reservation waits for the turn of the loop to
end, and goes out with the others made in that turn: one pipeline, one RESERVE call per team.

The client's exceptions become the store's in ``RedisClient``. An error reply is the store's
failure only when it says the server serves nobody now (``down``: loading, busy, out of memory,
a replica, ...); any other is the call's, from what its team's keys hold (``StoreDataError``):
the other teams are not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Coroutine, Sequence

from redis.exceptions import NoScriptError, ResponseError

from proxy.core.limits.admission import Decision, Reservation, release
from proxy.core.limits.config import SentinelConfig
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
from proxy.http.limits.redis_client import Command, RedisClient, down
from proxy.http.limits.stores import (
    Settle,
    Shape,
    StoreDataError,
    StoreUnavailable,
    same_shape,
    shape,
)

# A waiter's part of a RESERVE reply: its run's integers (``limits_lua``).
Waiters = list["asyncio.Future[list[int]]"]


class _Batch:
    """The runs of one team's window made in one turn of the loop (``limits_lua.Run``: a
    request's own reservation, or a pool's fill): one RESERVE call, and a future for each
    run, waiting for its part of the reply."""

    __slots__ = ("head", "runs", "waiters")

    def __init__(self, head: Command) -> None:
        self.head = head  # EVALSHA, its KEYS and the window's ARGV
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
                part, held = _Batch(self.head), 0
                parts.append(part)
            part.waiters.append(waiter)
            part.runs.append(run)
            held += len(run)
        return parts

    def command(self, now: float) -> Command:
        return (*self.head, *reserve_tail(self.runs, now))


class RedisStore:
    """Redis (a URL, or Sentinel's master): the scripts by EVALSHA, loaded again when a
    restarted server has lost them (NOSCRIPT). Nothing is retried otherwise: the limiter's
    failure policy decides, within ``timeout``.

    The reservations made in one turn of the loop go out together, one RESERVE call per team
    that admits them in turn, as calls of their own would: one pipeline once the turn is over,
    and one script for Redis to run, not one a request."""

    kind = "redis"
    name = "Redis"
    prefetch = True

    def __init__(self, where: str | SentinelConfig, timeout: float) -> None:
        self.timeout = timeout
        self._client = RedisClient(where, timeout)
        self._sha = {
            script: hashlib.sha1(script.encode()).hexdigest() for script in (RESERVE, SETTLE)
        }
        # Per team, RESERVE up to the batch's own ARGV, and what it holds.
        self._reserve: dict[str, tuple[Shape, Command]] = {}
        self._batches: dict[Command, _Batch] = {}  # by their head: this turn's, not yet sent
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
            keys, static = reserve_static(first)
            head: Command = ("EVALSHA", self._sha[RESERVE], len(keys), *keys, *static)
            kept = self._reserve[first.team] = (shape(first), head)
        batches = self._batches
        batch = batches.get(kept[1])
        loop = asyncio.get_running_loop()
        if batch is None:
            if not batches:
                loop.call_soon(self._send_reservations)
            batch = batches[kept[1]] = _Batch(kept[1])
        waiter: asyncio.Future[list[int]] = loop.create_future()
        batch.waiters.append(waiter)
        batch.runs.append(run)
        return waiter

    def _send_reservations(self) -> None:
        """This turn's reservations: a call per team, of at most ``RESERVE_BATCH``."""
        batches, self._batches = self._batches, {}
        self._later_task(self._reserve_all([p for b in batches.values() for p in b.parts()]))

    async def _reserve_all(self, batches: list[_Batch]) -> None:
        try:
            now = time.time()
            replies = await self._scripts(RESERVE, [batch.command(now) for batch in batches])
        except StoreUnavailable as exc:
            for batch in batches:
                _fail(batch.waiters, exc)
            return
        except BaseException:
            # Cancelled, the store closing: no request waits for ever.
            for batch in batches:
                _fail(batch.waiters, StoreUnavailable(f"{self.name}: closed", sent=True))
            raise
        for batch, reply in zip(batches, replies, strict=True):
            if isinstance(reply, ResponseError):
                # A script that failed midway is not undone: not sent again.
                _fail(batch.waiters, refusal(reply, _teams(batch)))
            else:
                self._answer(batch, reply)

    def _answer(self, batch: _Batch, reply: object) -> None:
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
        if self._later:
            await asyncio.wait(list(self._later))
        batches, self._batches = self._batches, {}
        for batch in batches.values():
            _fail(batch.waiters, StoreUnavailable(f"{self.name}: closed"))
        await self._client.close()

    def _later_task(self, coroutine: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._later.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._later.discard)

    async def settle_many(self, tally: Tally) -> None:
        """Each team's SETTLE. A server down for every call: ``StoreUnavailable`` (a marked
        tally may be sent again whole: what was applied is not applied twice). A team's call
        refused, or keys of its left alone: ``StoreDataError``, once the others are applied."""
        sha = self._sha[SETTLE]
        calls = tally.calls(time.time())
        replies = await self._scripts(
            SETTLE, [("EVALSHA", sha, len(keys), *keys, *args) for keys, args in calls]
        )
        for reply in replies:
            if isinstance(reply, ResponseError) and down(reply):
                raise StoreUnavailable(f"Redis: {reply}", sent=True)
        said, teams, dropped = [], [], 0
        for (team, count), reply in zip(tally.teams(), replies, strict=True):
            if isinstance(reply, ResponseError):
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
        commands: list[Command] = [("GET", key) for key in counters]
        commands += [("ZCOUNT", key, f"({now!r}", "+inf") for key in leases]
        commands += [("HGETALL", key) for key in hashes]
        replies = _checked(await self._client.pipeline(commands))
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

    async def _scripts(self, script: str, commands: list[Command]) -> list[object]:
        """The replies to EVALSHA ``commands``: those the server refused for not having the
        script (a restart emptied it) sent once more, after the script."""
        replies = await self._client.pipeline(commands)
        again = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if again:
            loaded, *resent = await self._client.pipeline(
                [("SCRIPT", "LOAD", script), *[commands[i] for i in again]]
            )
            if isinstance(loaded, ResponseError):
                raise refusal(loaded)
            for i, reply in zip(again, resent, strict=True):
                replies[i] = reply
        return replies


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


def refusal(error: ResponseError, teams: tuple[str, ...] = ()) -> StoreUnavailable:
    """An error reply as the store's failure, or as its call's (``StoreDataError``)."""
    if down(error):
        return StoreUnavailable(f"Redis: {error}", sent=True)
    return StoreDataError(f"Redis: {error}", teams)


def _checked(replies: list[object], teams: tuple[str, ...] = ()) -> list[object]:
    for reply in replies:
        if isinstance(reply, ResponseError):
            # Answered: the other calls sent with it were applied, and a script that failed
            # midway is not undone. Sent again, they would count twice.
            raise refusal(reply, teams)
    return replies


def _integer(reply: object, key: str) -> int:
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


def _pairs(reply: object, key: str) -> dict[str, int]:
    """HGETALL's fields (the client reads them as a dict) and their integers."""
    if not isinstance(reply, dict):
        return {}
    return {
        k.decode(errors="replace") if isinstance(k, bytes) else str(k): _integer(v, key)
        for k, v in reply.items()
    }


def _shown(reply: object) -> str:
    text = repr(reply)
    return text if len(text) <= 40 else f"{text[:37]}..."
