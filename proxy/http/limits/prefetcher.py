"""``Prefetcher``: a worker's reservations made ahead, per team, over a shared store
(``proxy.core.limits.prefetch``; docs/limits.md). Each pool is filled by a task of its own; what
goes back is settled through the limiter's queue, as every settlement is."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from proxy.core.limits.admission import Charge, Decision, Reservation, release
from proxy.core.limits.prefetch import IDLE_SECONDS, Ahead, Pool
from proxy.http.limits.stores import Settle, Store, StoreUnavailable

log = logging.getLogger("proxy.limits")


class Prefetcher:
    """``settle`` queues a settlement; ``failed`` reports the store's failure (the limiter's
    policy, which drains the pools); ``up`` says whether the store answers; ``timeout``
    bounds the wait for fills under way when closing."""

    def __init__(
        self,
        store: Store,
        settle: Callable[[Settle], None],
        failed: Callable[[str, StoreUnavailable], None],
        up: Callable[[], bool],
        timeout: float,
        lease_member: Callable[[], str],
    ) -> None:
        self._store = store
        self._timeout = timeout
        self._settle = settle
        self._failed = failed
        self._up = up
        self._pools: dict[str, Pool] = {}
        self._filling: set[asyncio.Task[None]] = set()
        self._lease_member = lease_member  # a new lease's member: the limiter's

    def take(
        self,
        team: str,
        charges: tuple[Charge, ...],
        amounts: tuple[int, int, int],
        lease_limit: int | None,
        deadline: float,
        now: float,
    ) -> Ahead | None:
        """One made ahead that a request fits in, if its team's pool has one (``Pool.take_for``)."""
        pool = self._pools.get(team)
        return (
            pool.take_for(charges, amounts, lease_limit, deadline, now)
            if pool is not None
            else None
        )

    def answered(self, reservation: Reservation, decision: Decision, now: float) -> None:
        """The store's answer to a request's own reservation: a pool for a team it admits; a
        refusal sends what the pool holds back to the others, an admission what no request
        can use any more (other windows or limits)."""
        pool = self._pools.get(reservation.team)
        if pool is None:
            if not decision.admitted:
                return
            pool = self._pools[reservation.team] = Pool()
        elif not decision.admitted:
            self._release(pool.drain(), now)
        elif pool.ready:
            self._release(pool.retire(now, reservation), now)
        pool.saw(reservation, decision, now)

    def fill(self, request: Reservation, now: float) -> None:
        """After ``request`` was admitted: more made ahead, if its team's pool wants them."""
        pool = self._pools.get(request.team)
        if pool is None or pool.filling:
            return
        wanted = pool.wanted(request, self._lease_member, now)
        if wanted:
            task = asyncio.get_running_loop().create_task(self._made(pool, wanted, now))
            self._filling.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._filling.discard)

    async def _made(self, pool: Pool, wanted: list[Reservation], now: float) -> None:
        answer: tuple[int, Decision] | None = None
        try:
            answer = await self._store.reserve_run(wanted, now)
        except StoreUnavailable as exc:
            self._failed("reserve", exc)
        except Exception:
            log.exception("reservations made ahead failed")
        finally:
            pool.filled(wanted, answer, now)
        if not self._up():
            self.drain()  # the store failed meanwhile: what was made goes back

    def _release(self, reservations: list[Reservation], now: float) -> None:
        for reservation in reservations:
            self._settle((reservation.team, release(reservation, now), None))

    def drain(self) -> None:
        """Every reservation held goes back (the store failed, or the worker stops): while
        the store is down, requests are admitted as ``on_failure`` says."""
        now = time.time()
        for pool in self._pools.values():
            self._release(pool.drain(), now)

    async def retire_idle(self) -> None:
        """For ever: what has waited ``IDLE_SECONDS`` unused goes back."""
        while True:
            await asyncio.sleep(IDLE_SECONDS / 4)
            now = time.time()
            for pool in self._pools.values():
                if pool.ready:
                    self._release(pool.retire(now), now)

    async def close(self) -> None:
        """The fills under way are awaited (within the timeout), then everything goes back."""
        if self._filling:
            await asyncio.wait(list(self._filling), timeout=self._timeout)
            for task in list(self._filling):
                task.cancel()
        self.drain()
