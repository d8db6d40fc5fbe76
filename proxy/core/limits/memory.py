"""``MemoryStore``: the reference semantics of the limit store, in one process's dicts.

It takes the very KEYS and ARGV that ``proxy.core.limits.scripts`` gives Redis's scripts and does
what they do, so that one encoding serves every store and the tests of one hold for the other.
It serves a single worker directly, and the workers of one server through their supervisor
(``proxy.ops.limits.state_service``), which answers ``call``: one message in, one reply out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.limits.admission import COUNT_MAX, Decision, Reservation, Settlement, admit
from proxy.core.limits.ledger import FIELD_MAX, Entry


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a read saw: each counter's value, each lease set's live leases, each hash."""

    values: tuple[int, ...]
    in_flight: tuple[int, ...]
    hashes: tuple[dict[str, int], ...]


@dataclass(slots=True)
class MemoryStore:
    counters: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> value, expiry
    leases: dict[str, dict[str, float]] = field(default_factory=dict)  # key -> member -> deadline
    hashes: dict[str, tuple[dict[str, int], float]] = field(default_factory=dict)

    # --- the scripts ---------------------------------------------------------------------

    def eval_reserve(self, keys: Sequence[str], args: Sequence[str]) -> list[int]:
        """RESERVE (``limits_lua``): its reply, each run's integers one after another."""
        n = int(args[0])
        limits = [int(a) for a in args[1 : 1 + n]]
        units = [int(a) for a in args[1 + n : 1 + 2 * n]]
        expiries = [float(a) for a in args[1 + 2 * n : 1 + 3 * n]]
        lease_limit = int(args[1 + 3 * n])
        now = float(args[2 + 3 * n])
        count = int(args[3 + 3 * n])
        used = [self.value(keys[i], now) for i in range(n)]
        lease_key = keys[n] if len(keys) > n else None
        in_flight = self.in_flight(lease_key, now) if lease_key is not None else 0
        reply: list[int] = []
        taken = False
        a = 4 + 3 * n
        for _ in range(count):
            k = int(args[a])
            amounts = (1, int(args[a + 1]), int(args[a + 2]))
            deadline = float(args[a + 3])
            members = args[a + 4 : a + 4 + k] if lease_key is not None else ()
            first = [*used, in_flight]
            admitted = 0
            for j in range(k):
                fits = all(used[i] + amounts[units[i]] <= limits[i] for i in range(n))
                if not fits or (lease_key is not None and in_flight + 1 > lease_limit):
                    break
                admitted += 1
                used = [used[i] + amounts[units[i]] for i in range(n)]
                if lease_key is not None:
                    in_flight += 1
                    self.leases.setdefault(lease_key, {})[members[j]] = deadline
            reply += [admitted, *first]
            taken = taken or admitted > 0
            a += 4 + len(members)
        if taken:
            for i in range(n):
                self.counters[keys[i]] = (used[i], expiries[i])
        return reply

    def eval_settle(self, keys: Sequence[str], args: Sequence[str], now: float) -> list[int]:
        """SETTLE (``limits_lua``), at ``now`` (for the keys' expiry, as Redis's clock): its
        reply, [1 if applied (0: a marked tally applied before), keys left alone (none here:
        this store holds nothing it did not write)]."""
        n, m, h = int(args[0]), int(args[1]), int(args[2])
        sequence = int(args[3])
        if sequence > 0:
            marker = keys[n + m + h]
            if self.value(marker, now) >= sequence:
                return [0, 0]
            self.counters[marker] = (sequence, now + int(args[4]))
        a = 5
        for i in range(n):
            key = keys[i]
            value = self.value(key, now) + int(args[a])
            self.counters[key] = (min(COUNT_MAX, max(0, value)), now + int(args[a + 1]))
            a += 2
        for i in range(m):
            held = self.leases.get(keys[n + i], {})
            count = int(args[a])
            for member in args[a + 1 : a + 1 + count]:
                held.pop(member, None)
            a += count + 1
        for i in range(h):
            key = keys[n + m + i]
            ttl, count = int(args[a]), int(args[a + 1])
            a += 2
            found = self.hashes.get(key)
            fields = found[0] if found is not None and found[1] > now else {}
            for _ in range(count):
                fields[args[a]] = min(FIELD_MAX, fields.get(args[a], 0) + int(args[a + 1]))
                a += 2
            self.hashes[key] = (fields, now + ttl)
        return [1, 0]

    # --- reads -----------------------------------------------------------------------------

    def value(self, key: str, now: float) -> int:
        value, expiry = self.counters.get(key, (0, math.inf))
        return value if expiry > now else 0

    def in_flight(self, key: str, now: float) -> int:
        held = self.leases.get(key, {})
        for member in [m for m, deadline in held.items() if deadline <= now]:
            del held[member]
        return len(held)

    def read(
        self, counters: Sequence[str], leases: Sequence[str], hashes: Sequence[str], now: float
    ) -> Snapshot:
        found = []
        for key in hashes:
            fields, expiry = self.hashes.get(key, ({}, math.inf))
            found.append(dict(fields) if expiry > now else {})
        return Snapshot(
            tuple(self.value(key, now) for key in counters),
            tuple(self.in_flight(key, now) for key in leases),
            tuple(found),
        )

    def purge(self, now: float) -> None:
        """Drop every expired key (the owner calls it now and then; reads ignore them anyway)."""
        for key in [k for k, (_, expiry) in self.counters.items() if expiry <= now]:
            del self.counters[key]
        for key in list(self.leases):
            if not self.in_flight(key, now):
                del self.leases[key]
        for key in [k for k, (_, expiry) in self.hashes.items() if expiry <= now]:
            del self.hashes[key]

    # --- the same, by reservation and settlement, without the strings ----------------------
    # What a worker alone calls for every request: the scripts' semantics on the objects
    # themselves (tests/core/test_limits_store.py holds the two ways to the same results).

    def reserve(self, reservation: Reservation, now: float) -> Decision:
        charges = reservation.charges
        amounts = reservation.amounts
        counters = self.counters
        fits = True
        used = []
        for charge in charges:
            found = counters.get(charge.key)
            seen = found[0] if found is not None and found[1] > now else 0
            used.append(seen)
            if seen + amounts[charge.unit] > charge.limit:
                fits = False
        lease = reservation.lease
        in_flight = 0
        if lease is not None:
            # Expired leases are looked for only when they could make the difference: a scan
            # of every lease held, for every request, cost more than the rest of admission.
            in_flight = len(self.leases.get(lease.key, ()))
            if in_flight >= lease.limit:
                in_flight = self.in_flight(lease.key, now)
            fits = fits and in_flight < lease.limit
        if not fits:
            return admit(reservation, tuple(used), in_flight, now)
        for charge, seen in zip(charges, used, strict=True):
            counters[charge.key] = (seen + amounts[charge.unit], charge.expires)
        if lease is not None:
            self.leases.setdefault(lease.key, {})[lease.member] = lease.deadline
        return Decision(True, tuple(used), in_flight)

    def settle(self, settlement: Settlement, now: float, entry: Entry | None = None) -> None:
        counters = self.counters
        for key, delta, expires in settlement.corrections:
            counted = counters.get(key)  # ``value``, inline: on every request
            before = counted[0] if counted is not None and counted[1] > now else 0
            counters[key] = (min(COUNT_MAX, max(0, before + delta)), expires)
        lease = settlement.lease
        if lease is not None:
            held = self.leases.get(lease.key)
            if held is not None:
                held.pop(lease.member, None)
        if entry is None or not entry.fields:
            return
        for key, ttl in zip(entry.keys, entry.ttls, strict=True):
            found = self.hashes.get(key)
            fields = found[0] if found is not None and found[1] > now else {}
            for name, increment in entry.fields:
                fields[name] = min(FIELD_MAX, fields.get(name, 0) + increment)
            self.hashes[key] = (fields, now + ttl)

    # --- one message of the supervisor's protocol ------------------------------------------

    def call(self, message: Sequence[Any], now: float) -> object:
        """``["reserve", keys, shared args, own args]``, ``["settle", keys, args]`` or
        ``["read", counters, leases, hashes, now]``: the reply to send back. A malformed
        message raises ``ValueError`` (the caller answers it as an error)."""
        try:
            op = message[0]
            if op == "reserve":  # the script's ARGV in two: the team's window's, the request's
                return self.eval_reserve(message[1], [*message[2], *message[3]])
            if op == "settle":
                return self.eval_settle(message[1], message[2], now)
            if op == "read":
                snapshot = self.read(message[1], message[2], message[3], float(message[4]))
                return [snapshot.values, snapshot.in_flight, snapshot.hashes]
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed limit store message: {exc}") from None
        raise ValueError(f"unknown limit store operation: {op!r}")
