"""``Limiter``: a worker's side of team limits, budgets and the usage ledger (docs/limits.md).

Admission reserves in the store (one atomic call) before a request goes upstream; ``finish``
settles what it spent once it has ended, off the request's path: settlements are summed into
a queue of tallies (``proxy.core.limits.tally``) of up to ``BATCH`` requests, and one task sends
each as one call per team. A store that fails is left alone for ``RETRY_SECONDS`` (no request
waits on it meanwhile) while ``state.on_failure`` decides: open admits unchecked, closed answers
503. Settlements made meanwhile wait in the queue and go out once it answers again; so do those
whose call was cut or timed out: each tally is marked with the worker's id and a sequence
number before it is first sent, and the store applies a marked tally once however often it
comes (``tally.Tally.mark``). A call refused for what one team's keys hold (``StoreDataError``)
is that team's: logged, counted, answered by ``on_failure`` for its request alone; the store
is not taken for down.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Protocol

from proxy.core.config import Team
from proxy.core.errors import ServiceUnavailable
from proxy.core.exchange import Exchange
from proxy.core.limits.admission import (
    Limits,
    Reservation,
    Settlement,
    Windows,
    rate_limit_headers,
    request_amounts,
    requests_only,
    reservation_in,
    settle,
    unchecked_in,
)
from proxy.core.limits.config import State
from proxy.core.limits.ledger import Ledger, PeriodKind, ledger_key, report
from proxy.core.limits.tally import Tally
from proxy.core.limits.view import probe, view
from proxy.core.prices import Price
from proxy.core.usage import Usage
from proxy.http.limits.prefetcher import Prefetcher
from proxy.http.limits.redis_store import RedisStore
from proxy.http.limits.stores import (
    LocalStore,
    Settle,
    Store,
    StoreDataError,
    StoreUnavailable,
    WorkerStore,
)

log = logging.getLogger("proxy.limits")

# After a failure, how long the store is left alone before a call tries it again.
RETRY_SECONDS: Final = 1.0
# Settlements summed into one tally (sent at once), and the most that wait for a store that
# is down: beyond it, the oldest tally is dropped whole, and said so.
BATCH: Final = 256
QUEUE_MAX: Final = 100_000
# How long the first settlement after a quiet spell waits for others to go in its call.
SETTLE_LINGER: Final = 0.02
# How often the remaining allowances are read for the gauges.
GAUGE_SECONDS: Final = 15.0
# A team's keys that hold what they should not are logged at most this often (each call is
# counted in ``llm_proxy_state_errors_total``).
SAY_SECONDS: Final = 60.0
_NO_SETTLEMENT: Final = Settlement((), None)
_NOTHING: Final = Usage()

Shown = Mapping[str, Mapping[str, Mapping[str, object]]]  # team -> limit -> its figures


class Events(Protocol):
    """What the limiter tells the observers (``proxy.http.state.Observer``)."""

    def state_changed(self, up: bool) -> None: ...

    def state_failed(self, operation: str) -> None: ...

    def settlements_dropped(self, count: int) -> None: ...

    def limits_seen(self, shown: Shown) -> None: ...


def store_for(state: State, worker_socket: str | None) -> Store:
    """Redis when configured (a URL, or Sentinel); else the supervisor's store when there are
    several workers; else this process's."""
    if state.shared is not None:
        return RedisStore(state.shared, state.timeout)
    if worker_socket is not None:
        return WorkerStore(worker_socket, state.timeout)
    return LocalStore()


class Limiter:
    def __init__(
        self, store: Store, state: State, events: Events, *, queue_max: int = QUEUE_MAX
    ) -> None:
        self.store = store
        self.state = state
        self.events = events
        self.up = True
        self._retry_at = 0.0
        # Tallies to send, oldest first; settlements are added to the last while it has room.
        self._queue: collections.deque[Tally] = collections.deque()
        self._queued = 0  # the settlements they hold
        self._queue_max = queue_max
        # Set while the sender waits for settlements: the first to come wakes it (a check per
        # request, not an Event's set).
        self._idle: asyncio.Future[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._local = store if isinstance(store, LocalStore) else None
        self._rng = random.Random()
        # This worker's tallies' marks: who sent them, and how many it has (``Tally.mark``).
        self._sender = self.lease_member()
        self._sequence = 0
        self._said: dict[str, float] = {}  # configured team -> when its trouble may be said again
        self.windows = Windows()
        self.ledger = Ledger(self.windows)
        # With a shared store, the reservations made ahead (``proxy.core.limits.prefetch``).
        self._ahead = (
            Prefetcher(
                store,
                self._enqueue,
                self._failed,
                lambda: self.up,
                state.timeout,
                self.lease_member,
            )
            if store.prefetch
            else None
        )

    def start(self, teams: Callable[[], Iterable[Team]]) -> None:
        if self._local is None:
            self._tasks.append(asyncio.create_task(self._send_settlements()))
        if self._ahead is not None:
            self._tasks.append(asyncio.create_task(self._ahead.retire_idle()))
        self._tasks.append(asyncio.create_task(self._watch_gauges(teams)))

    async def close(self) -> None:
        """Send what is still queued (within the store's timeout), then close the store."""
        for task in self._tasks:
            task.cancel()
        # Whatever a task died of, what is queued is still sent: shutdown goes on.
        for ended in await asyncio.gather(*self._tasks, return_exceptions=True):
            if isinstance(ended, Exception):
                log.error("a limits task had failed", exc_info=ended)
        self._tasks.clear()
        if self._ahead is not None:
            # Reservations under way are awaited, to be given back, rather than lost.
            await self._ahead.close()
        if self._queue and self._usable():
            try:
                await self._send_batches()
            except StoreUnavailable as exc:
                self._failed("settle", exc)
        if self._queue:
            log.warning("%d settlements were not sent: the state store is down", len(self._queue))
        await self.store.close()

    # --- admission and settlement -----------------------------------------------------------

    async def admit(
        self,
        team: Team,
        exchange: Exchange,
        *,
        prompt_tokens: int,
        max_tokens: int,
        price: Price | None,
        lease_seconds: float,
        spends: bool = True,
    ) -> Reservation:
        """The request's reservation; admitted unchecked (the store down and on_failure open),
        one that took nothing (``unchecked_in``), so that what it spends is charged when it is
        settled. Over a limit: ``RateLimited``; the store down and on_failure closed:
        ``ServiceUnavailable``. Sets the x-ratelimit headers.

        ``spends``: False for a request that spends no tokens (a cache hit), which counts against
        requests per minute and concurrency alone."""
        now = time.time()
        limits = team.limits
        usd, amounts = request_amounts(prompt_tokens, max_tokens, price)
        plan = self.windows.plan(team.name, limits, now)
        deadline = now + lease_seconds
        ahead = self._ahead
        if not spends:
            plan = requests_only(plan)
            ahead = None  # reservations made ahead hold tokens
        counted = 1  # the reservations counted up to this one, by the decision's counters
        if self._local is not None:
            # Nothing to wait for: no coroutine, on every request.
            reservation = reservation_in(
                plan, team.name, usd, amounts, self._member(limits), deadline
            )
            decision = self._local.memory.reserve(reservation, now)
        elif not self._usable():
            self._unchecked(False)
            return unchecked_in(plan, team.name)
        else:
            taken = None
            if ahead is not None and self.up:
                concurrency = limits.concurrency
                taken = ahead.take(team.name, plan.charges, amounts, concurrency, deadline, now)
            if taken is not None:
                # Made ahead, counted in the store already: the request takes it, and its
                # run's answer (its own reservation is never made).
                reservation, decision, counted = taken
            else:
                member = self._member(limits)
                reservation = reservation_in(plan, team.name, usd, amounts, member, deadline)
                try:
                    decision = await self.store.reserve(reservation, now)
                except StoreUnavailable as exc:
                    self._failed("reserve", exc)
                    self._unchecked(isinstance(exc, StoreDataError))
                    return unchecked_in(plan, team.name)
                if ahead is not None:
                    ahead.answered(reservation, decision, now)
        if not self.up:
            self._answered()
        elif ahead is not None and decision.admitted:
            ahead.fill(reservation, now)
        headers = rate_limit_headers(reservation, decision, now, counted)
        if headers:
            if exchange.headers is None:
                exchange.headers = headers
            else:
                exchange.headers.update(headers)  # X-Cache, set before admission
        if not decision.admitted:
            raise decision.error()
        return reservation

    def finish(self, exchange: Exchange, reservation: Reservation | None) -> None:
        """Settle an ended request: its reservation, and its line in the ledger."""
        now = time.time()
        usage = exchange.usage
        cost = exchange.cost_usd
        team = exchange.team
        local = self._local
        if local is None:
            # Summed into the tally as it is: no Settlement nor Entry made per request.
            keys = self.ledger.keys(team, now)
            tally = self._tally()
            tally.finished(team, reservation, usage, cost, keys, exchange.model, now, self.windows)
            return
        settlement = _NO_SETTLEMENT
        if reservation is not None:
            # No usage: nothing was spent (refused upstream, or never sent).
            spent = cost if usage is not None else 0.0
            settlement = settle(reservation, usage or _NOTHING, spent, now, self.windows)
        local.settle_now(
            team, settlement, self.ledger.entry(team, exchange.model, usage, cost, now)
        )

    def lease_member(self) -> str:
        """A new lease's member in the team's set of requests in flight: random, so that no
        two of any worker or replica meet (a reservation made ahead's too)."""
        return self._rng.getrandbits(64).to_bytes(8).hex()

    def _member(self, limits: Limits) -> str:
        # Made only for a lease a request holds of its own: not when taken from one made ahead.
        return self.lease_member() if limits.concurrency is not None else ""

    def _enqueue(self, call: Settle) -> None:
        self._tally().add(*call)

    def _tally(self) -> Tally:
        """The tally a settlement is added to: the queue's last, or a new one when it is full.
        Counted as added: the caller adds one."""
        queue = self._queue
        self._queued += 1
        if queue:
            last = queue[-1]
            if last.count < BATCH and last.marked is None:  # marked: sent, maybe applied
                return last
        if self._queued > self._queue_max and queue:
            dropped = queue.popleft()
            self._queued -= dropped.count
            self.events.settlements_dropped(dropped.count)
        last = Tally()
        queue.append(last)
        if self._idle is not None:
            self._wake()
        return last

    def _unchecked(self, refused: bool) -> None:
        """Admitted unchecked (on_failure open), or refused (closed); ``refused``: the store
        answered, but not for this team's keys (``StoreDataError``)."""
        if self.state.on_failure == "closed":
            why = "refused this team's counters" if refused else "is unreachable"
            raise ServiceUnavailable(
                f"Team limits cannot be checked now: the state store {why}",
                code="limits_unavailable",
            )

    # --- the store's health -------------------------------------------------------------------

    def _usable(self) -> bool:
        return self.up or time.monotonic() >= self._retry_at

    def _failed(self, operation: str, exc: StoreUnavailable) -> None:
        self.events.state_failed(operation)
        if isinstance(exc, StoreDataError):
            self._refused(operation, exc)
            return
        self._retry_at = time.monotonic() + RETRY_SECONDS
        if self.up:
            self.up = False
            if self._ahead is not None:
                self._ahead.drain()
            log.warning(
                "state store (%s) failed on %s: %s; requests are %s until it answers",
                self.store.kind,
                operation,
                exc,
                "admitted unchecked" if self.state.on_failure == "open" else "refused (503)",
            )
            self.events.state_changed(False)

    def _refused(self, operation: str, exc: StoreDataError) -> None:
        """One team's keys hold what they should not: said (at most every ``SAY_SECONDS``
        per team), and the settlements it lost counted; the store stays up for the others."""
        if exc.dropped:
            self.events.settlements_dropped(exc.dropped)
        now = time.monotonic()
        said = self._said
        fresh = [team for team in exc.teams or ("",) if now >= said.get(team, -math.inf)]
        if fresh:
            for team in fresh:
                said[team] = now + SAY_SECONDS
            log.warning("state store (%s) refused %s: %s", self.store.kind, operation, exc)

    def _answered(self) -> None:
        if not self.up:
            self.up = True
            log.warning("state store (%s) answers again; limits are enforced", self.store.kind)
            self.events.state_changed(True)
            self._wake()

    def _wake(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None and not idle.done():
            idle.set_result(None)

    async def _send_settlements(self) -> None:
        while True:
            if not self._queue:
                self._idle = asyncio.get_running_loop().create_future()
                await self._idle
                if self._queue and self._queue[0].count < BATCH:
                    # A request ended alone: those that end in the next moment go in the same
                    # call, not one call each (what a store call costs, at one request a time).
                    await asyncio.sleep(SETTLE_LINGER)
            while self._queue:
                if not self._usable():
                    await asyncio.sleep(max(0.0, self._retry_at - time.monotonic()))
                try:
                    await self._send_batches()
                except StoreUnavailable as exc:
                    self._failed("settle", exc)

    async def _send_batches(self) -> None:
        while self._queue:
            # Taken out of the queue while it is sent: what ends meanwhile goes to a new one.
            tally = self._queue.popleft()
            self._queued -= tally.count
            if tally.marked is None:
                # Marked before it is first sent: a call cut or timed out, perhaps applied, is
                # sent again, and the store applies it once (``Tally.mark``).
                self._sequence += 1
                tally.mark(self._sender, self._sequence)
            try:
                await self.store.settle_many(tally)
            except StoreDataError as exc:
                self._failed("settle", exc)  # the others' were applied; this team's said
            except BaseException:
                # Cut, timed out, or cancelled (closing): in front again, for the next try.
                self._queue.appendleft(tally)
                self._queued += tally.count
                raise
            self._answered()

    # --- reads: /admin/limits, /admin/usage, the gauges ---------------------------------------

    async def limits(self, teams: Sequence[Team]) -> dict[str, dict[str, dict[str, object]]]:
        """Each limited team's limits now (``limits_view``); ``StoreUnavailable`` if the
        store cannot say."""
        now = time.time()
        probes = [probe(team.name, team.limits, now) for team in teams if team.limits.checked]
        counters = [key for p in probes for key in p.counters]
        leases = [p.lease for p in probes if p.lease is not None]
        snapshot = await self.store.read(counters, leases, (), now)
        values, in_flight = iter(snapshot.values), iter(snapshot.in_flight)
        shown = {}
        for p in probes:
            found = tuple(next(values) for _ in p.counters)
            shown[p.team] = view(p, found, next(in_flight) if p.lease else 0)
        return shown

    async def usage(
        self, teams: Sequence[str], kind: PeriodKind, period: str
    ) -> dict[str, dict[str, dict[str, int | float]]]:
        """Each team's ledger for the day or month ``period``, by model."""
        keys = [ledger_key(team, kind, period) for team in teams]
        snapshot = await self.store.read((), (), keys, time.time())
        return {team: report(found) for team, found in zip(teams, snapshot.hashes, strict=True)}

    async def _watch_gauges(self, teams: Callable[[], Iterable[Team]]) -> None:
        while True:
            limited = [team for team in teams() if team.limits.checked]
            if limited and self._usable():
                try:
                    shown = await self.limits(limited)
                    self._answered()
                    self.events.limits_seen(shown)
                except StoreUnavailable as exc:
                    self._failed("read", exc)
                except Exception:
                    # Never the end of the gauges: the next reading may do.
                    log.exception("reading the limits for the gauges failed")
            await asyncio.sleep(GAUGE_SECONDS)
