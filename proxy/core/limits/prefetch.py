"""``Pool``: the reservations a worker makes ahead for one team, to admit its next requests
without waiting for the shared store (sans-IO; docs/limits.md, "Reservations made ahead").

With Redis or the supervisor's store, a request waits one round trip to be admitted. While a
team is far from every limit, the worker reserves a few requests' worth ahead in one call,
each an ordinary reservation (``limits.Reservation``) the size of the largest request it saw
lately: a run of them alike (``limits_lua.Run``), which the store admits in turn up to the
first it refuses and answers with the counters the first saw, so that a fill costs the store's
reply and the pool one entry, not one a reservation. They are counted in the store before any
is used, so no limit is ever passed. A
request that fits one (the same windows; no more tokens, nano-USD or lease time) takes it and
is admitted at once; it is settled as that reservation, with its real usage. One never used is
released (``limits.release``): everything it took is given back, its request too.

Only far from the limits: the pool is filled only while every limit has ``FACTOR`` times what
the pool would hold left. Near a limit every request waits for the store's answer, so each
other worker's reservations held ahead can make a request be refused early by at most
1/``FACTOR`` of what remained when it made them; unused, they are released once
``IDLE_SECONDS`` old.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Final, NamedTuple

from proxy.core.limits.admission import Charge, Decision, Lease, Reservation

# A pool is filled only while every limit has this many times what it would hold left.
FACTOR: Final = 16
# The reservations a pool aims to hold: from FIRST, doubled when requests find it empty, halved
# when some go unused; never more than MOST (one RESERVE call, ``limits_lua.RESERVE_BATCH``).
# A fill is a round trip to a store that every worker's calls share, in which a busy worker
# admits more requests than a smaller pool's half holds: each of them would wait for the store.
FIRST: Final = 4
MOST: Final = 256
# A reservation made ahead and not used within this long is released.
IDLE_SECONDS: Final = 1.0


class Ahead(NamedTuple):
    """A reservation made ahead, as a request takes it: with the store's decision on the first
    of its run (the counters it saw) and how many of the run were taken up to it, itself
    included (its counters were the first's plus that many less one times the amounts)."""

    reservation: Reservation
    decision: Decision
    taken: int


class _Made:
    """One call's reservations made ahead: a run (``limits_lua.Run``), its first ``count``
    admitted, the next to take at ``next``."""

    __slots__ = ("count", "decision", "made", "next", "run")

    def __init__(self, run: list[Reservation], count: int, decision: Decision, made: float):
        self.run = run
        self.count = count
        self.decision = decision  # the store's, on the run's first
        self.made = made  # epoch seconds
        self.next = 0


class Pool:
    """One team's reservations made ahead, oldest first, and what the next ones should be."""

    __slots__ = ("_nanos", "_seconds", "_seen", "_tokens", "filling", "held", "ready", "size")

    def __init__(self) -> None:
        self.ready: collections.deque[_Made] = collections.deque()
        self.held = 0  # the reservations ``ready`` holds, not yet taken
        self.size = FIRST
        self.filling = False  # a call that makes more is on its way
        # The largest request since the last fill: its tokens, nano-USD and lease seconds.
        self._tokens = self._nanos = 0
        self._seconds = 0.0
        # The latest answer of the store: a reservation and its decision (the counters then).
        self._seen: tuple[Reservation, Decision] | None = None

    def take(self, reservation: Reservation, now: float) -> Ahead | None:
        """The oldest reservation made ahead, if ``reservation`` fits in it (then it is the
        request's), else None; ``reservation`` counts toward the size of the next ones. The
        limiter asks ``take_for``, with the parts of a reservation it has not made."""
        lease = reservation.lease
        if lease is None:
            return self.take_for(reservation.charges, reservation.amounts, None, 0.0, now)
        return self.take_for(
            reservation.charges, reservation.amounts, lease.limit, lease.deadline, now
        )

    def take_for(
        self,
        charges: tuple[Charge, ...],
        amounts: tuple[int, int, int],
        lease_limit: int | None,
        deadline: float,
        now: float,
    ) -> Ahead | None:
        """``take`` of a request not made a ``Reservation`` (on a hit, it never is): its
        plan's charges, its amounts, its concurrency limit (None: none) and lease deadline."""
        _, tokens, nanos = amounts
        self._note(tokens, nanos, None if lease_limit is None else deadline - now)
        ready = self.ready
        if not ready:
            if self.filling and self.size < MOST:
                self.size = min(MOST, 2 * self.size)  # asked faster than it fills
            return None
        made = ready[0]
        # It stands for the request if of the same plan (the same charges and concurrency
        # limit) and holding at least as many tokens, nano-USD and lease time.
        index = made.next
        reservation = made.run[index]
        theirs, held = reservation.amounts, reservation.lease
        if tokens > theirs[1] or nanos > theirs[2] or reservation.charges is not charges:
            return None
        if held is None:
            if lease_limit is not None:
                return None
        elif lease_limit != held.limit or deadline > held.deadline:
            return None
        made.next = index + 1
        self.held -= 1
        if made.next == made.count:
            ready.popleft()
        return Ahead(reservation, made.decision, index + 1)

    def saw(self, reservation: Reservation, decision: Decision, now: float) -> None:
        """The store's answer to a request's own reservation: how far the limits are."""
        self._seen = (reservation, decision)
        _, tokens, nanos = reservation.amounts
        lease = reservation.lease
        self._note(tokens, nanos, None if lease is None else lease.deadline - now)

    def _note(self, tokens: int, nanos: int, lease_seconds: float | None) -> None:
        """A request seen: the next ones made ahead are made the size of the largest."""
        if tokens > self._tokens:
            self._tokens = tokens
        if nanos > self._nanos:
            self._nanos = nanos
        if lease_seconds is not None and lease_seconds > self._seconds:
            self._seconds = lease_seconds

    def wanted(
        self, request: Reservation, team_lease: Callable[[], str], now: float
    ) -> list[Reservation]:
        """The reservations to make ahead now, a run (``limits_lua.Run``), if any (then the
        pool is ``filling`` until ``filled``): when it is down to half its size, as many as
        bring it back, or fewer, to what every limit has ``FACTOR`` times left; none if that
        is under ``FIRST``, or the store's last answer was a refusal, or not of ``request``'s
        plan (the request just admitted: its windows and limits are the current ones).
        ``team_lease``: a new lease's member."""
        if self.filling or self._seen is None or self.held > self.size // 2:
            return []
        template, decision = self._seen
        if not decision.admitted or not same_plan(request, template):
            return []
        tokens, nanos, lease_seconds = self._tokens, self._nanos, self._seconds
        amounts = (1, tokens, nanos)
        size = self.size
        for charge, used in zip(template.charges, decision.used, strict=True):
            left = charge.limit - used - template.amounts[charge.unit]
            size = min(size, left // (FACTOR * max(1, amounts[charge.unit])))
        lease = template.lease
        if lease is not None:
            size = min(size, (lease.limit - decision.in_flight - 1) // FACTOR)
        count = size - self.held
        if size < FIRST or count <= 0:
            return []
        self.filling = True
        self._tokens = self._nanos = 0
        self._seconds = 0.0
        team, charges, shown = template.team, template.charges, template.shown
        if lease is None:
            alike = Reservation(team, tokens, None, charges, amounts, None, shown)
            return [alike] * count
        # Long enough for a request as long as the longest seen, taken at its idlest.
        deadline = now + max(lease_seconds, 1.0) + IDLE_SECONDS
        key, limit = lease.key, lease.limit
        return [
            Reservation(
                team,
                tokens,
                None,
                charges,
                amounts,
                Lease(key, team_lease(), limit, deadline),
                shown,
            )
            for _ in range(count)
        ]

    def filled(
        self, run: list[Reservation], answer: tuple[int, Decision] | None, now: float
    ) -> None:
        """What the store answered to ``wanted``'s run (None, if it failed): how many it
        admitted, the first of them in turn, and its decision on the first. Those admitted
        join the pool; one refused took nothing."""
        self.filling = False
        if answer is None:
            return
        count, first = answer
        if count:
            self.ready.append(_Made(run, count, first, now))
            self.held += count
        if count == len(run):
            self._seen = (run[-1], _nth(run, first, count - 1, admitted=True))
        elif count:
            # Refused (all after it would be too): no more made until a request is admitted.
            self._seen = (run[count], _nth(run, first, count, admitted=False))
        else:
            self._seen = (run[0], first)

    def retire(self, now: float, reservation: Reservation | None = None) -> list[Reservation]:
        """The reservations to release: those made more than ``IDLE_SECONDS`` ago, and with
        ``reservation`` (a request of the team's now), those that could never fit one like it
        again (its windows or its limits have changed). Unused ones halve the pool's size."""
        ready = self.ready
        gone: list[Reservation] = []
        while ready and (
            ready[0].made + IDLE_SECONDS <= now
            or (reservation is not None and not same_plan(reservation, ready[0].run[0]))
        ):
            gone += self._untaken(ready.popleft())
        if gone:
            self.size = max(FIRST, self.size // 2)
        return gone

    def drain(self) -> list[Reservation]:
        """Every reservation held, to release (the store failed, or the worker stops)."""
        gone = [reservation for made in self.ready for reservation in self._untaken(made)]
        self.ready.clear()
        return gone

    def _untaken(self, made: _Made) -> list[Reservation]:
        untaken = made.run[made.next : made.count]
        self.held -= len(untaken)
        return untaken


def _nth(run: list[Reservation], first: Decision, index: int, *, admitted: bool) -> Decision:
    """The decision on a run's ``index``-th, ``admitted`` or not: the first's counters plus
    what each before it added."""
    amounts, charges = run[0].amounts, run[0].charges
    used = tuple(u + index * amounts[c.unit] for u, c in zip(first.used, charges, strict=True))
    return Decision(admitted, used, first.in_flight + index)


def same_plan(reservation: Reservation, ahead: Reservation) -> bool:
    """Both of the team's same windows and limits. The charges are one tuple for a whole
    window (``limits.Windows.plan``); a team with none has the same empty one always, and its
    concurrency limit tells a reloaded configuration apart."""
    lease, held = reservation.lease, ahead.lease
    if ahead.charges is not reservation.charges or (lease is None) != (held is None):
        return False
    return lease is None or held is None or lease.limit == held.limit
