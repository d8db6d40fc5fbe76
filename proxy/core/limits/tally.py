"""``Tally``: the settlements of ended requests, gathered until they are sent to a shared store
(sans-IO). Per team, each counter's corrections are summed, the leases to free listed and the
ledger's increments summed, so that a batch costs one SETTLE call per team however many
requests it holds (``limits_lua.SETTLE`` reads what ``calls`` gives).

Summing corrections before the floor at 0 is applied changes nothing a request can see: a
refund only meets its own reservation, which the counter still holds (the floor is for a key
the store lost).

An ended request is summed as it comes (``finished``): what it spent, per reservation of the
same charges and amounts, and its usage, per model, turned into corrections and ledger fields
once per batch (``calls``), not a ``Settlement`` and an ``Entry`` a request.

Every integer a call carries is at most ``limits.COUNT_MAX`` in size, however large the usage an
upstream reported: the scripts count in Lua's doubles and Redis's 64-bit integers.

A tally the limiter may send more than once (its reply lost: it may have been applied) is
``mark``-ed first with its worker's id and a sequence number: each team's call then carries a
marker that ``SETTLE`` checks, so that a tally is applied once however often it is sent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from proxy.core.limits.admission import (
    COUNT_MAX,
    NANOS,
    REQUESTS,
    Charge,
    Reservation,
    Settlement,
    Windows,
    key_prefix,
    nanos,
    settle,
    spent_tokens,
)
from proxy.core.limits.ledger import COUNTERS, TTLS, Entry, field_names
from proxy.core.usage import Usage

# Summed by ``finished``: a reservation's charges, amounts and the end of its first window
# to end, and its requests' count, tokens and nano-USD spent.
_Spent = tuple[tuple[Charge, ...], tuple[int, int, int], float, list[int]]
_NOTHING = Usage()
_Fields = tuple[tuple[int, ...], dict[str, int]]  # a ledger hash's TTLs and increments
# How long a marked tally's marker is kept: a tally sent again later than this (its store
# unreachable for a day, its worker alive) could count twice.
MARKER_SECONDS: Final = 86400


@dataclass(slots=True)
class _Team:
    counters: dict[str, list[int]] = field(default_factory=dict)  # key -> [delta, expires]
    leases: dict[str, list[str]] = field(default_factory=dict)  # lease set -> members
    # An entry's hashes (its day's and month's) take the same increments: summed once for both.
    hashes: dict[tuple[str, ...], _Fields] = field(default_factory=dict)  # keys -> ttls, fields
    # By ``finished``: per (the charges' identity, amounts); per (ledger keys, model), the
    # ledger's COUNTERS.
    spent: dict[tuple[int, tuple[int, int, int]], _Spent] = field(default_factory=dict)
    used: dict[tuple[tuple[str, str], str], list[int]] = field(default_factory=dict)
    count: int = 0  # the settlements it holds


class Tally:
    __slots__ = ("_teams", "count", "marked")

    def __init__(self) -> None:
        self._teams: dict[str, _Team] = {}
        self.count = 0  # the requests it holds
        # (its sender's id, its sequence number): set before it is first sent, after which
        # nothing may be added (``mark``).
        self.marked: tuple[str, int] | None = None

    def mark(self, sender: str, sequence: int) -> None:
        """Marked as the ``sequence``-th tally (from 1) of ``sender`` (a worker's id): each
        team's call applies it only if no later one of the sender's was applied (``SETTLE``)."""
        self.marked = (sender, sequence)

    def teams(self) -> list[tuple[str, int]]:
        """Each team of ``calls``, in their order, and the settlements it holds."""
        return [(team, held.count) for team, held in self._teams.items()]

    @classmethod
    def of(cls, calls: Iterable[tuple[str, Settlement, Entry | None]]) -> Tally:
        """A tally of each ``(team, settlement, entry)``."""
        tally = cls()
        for team, settlement, entry in calls:
            tally.add(team, settlement, entry)
        return tally

    def add(self, team: str, settlement: Settlement, entry: Entry | None) -> None:
        held = self._held(team)
        self.count += 1
        held.count += 1
        _correct(held.counters, settlement.corrections)
        lease = settlement.lease
        if lease is not None:
            _free(held, lease.key, lease.member)
        if entry is not None and entry.fields:
            kept = held.hashes.get(entry.keys)
            if kept is None:
                kept = held.hashes[entry.keys] = (entry.ttls, {})
            fields = kept[1]
            for name, increment in entry.fields:
                fields[name] = fields.get(name, 0) + increment

    def finished(
        self,
        team: str,
        reservation: Reservation | None,
        usage: Usage | None,
        cost: float | None,
        keys: tuple[str, str],
        model: str,
        now: float,
        windows: Windows,
    ) -> None:
        """An ended request, summed as ``add`` of its reservation's ``settle`` and its ledger
        entry (``keys``: its team's hashes at ``now``) would sum it; without usage, it spent
        nothing (refused upstream, or never sent)."""
        held = self._held(team)
        self.count += 1
        held.count += 1
        spent_nanos = 0 if cost is None else nanos(cost)
        if reservation is not None:
            lease = reservation.lease
            if lease is not None:
                _free(held, lease.key, lease.member)
            charges, amounts = reservation.charges, reservation.amounts
            # The charges are one tuple for a whole window (``Windows.plan``), kept alive here.
            group = (id(charges), amounts)
            found = held.spent.get(group)
            if found is None:
                end = min((charge.window.end for charge in charges), default=math.inf)
                found = held.spent[group] = (charges, amounts, end, [0, 0, 0])
            if now < found[2]:
                sums = found[3]
                sums[0] += 1
                if usage is not None:
                    sums[1] += spent_tokens(usage)
                    # Unpriced: the reservation stands, never zero (``settle``).
                    sums[2] += amounts[NANOS] if cost is None else spent_nanos
            else:
                # A window ended while it ran: ``settle`` charges the excess to the current one.
                spent = cost if usage is not None else 0.0
                _correct(
                    held.counters,
                    settle(reservation, usage or _NOTHING, spent, now, windows).corrections,
                )
        row = held.used.get((keys, model))
        if row is None:
            row = held.used[(keys, model)] = [0] * len(COUNTERS)
        row[0] += 1
        if usage is not None:
            row[1] += usage.prompt_tokens
            row[2] += usage.cached_tokens
            row[3] += usage.completion_tokens
            row[4] += usage.reasoning_tokens
            if cost is None:
                row[6] += 1
            else:
                row[5] += spent_nanos

    def calls(self, now: float) -> list[tuple[list[str], list[str]]]:
        """SETTLE's KEYS and ARGV, one call per team, sent at ``now`` (a counter's TTL is
        from it to the key's expiry)."""
        made = []
        marked = self.marked
        for team, held in self._teams.items():
            summed, ledger = _sums(held)
            # A counter whose key has expired by now is left out: correcting it would make it
            # again for a second (its TTL's least) with the correction alone in it.
            counters = [(k, v) for k, v in summed.items() if v[0] and v[1] > now]
            hashes = [
                (key, ttl, fields)
                for keys, (ttls, fields) in ledger.items()
                for key, ttl in zip(keys, ttls, strict=True)
                if fields
            ]
            keys = [k for k, _ in counters] + list(held.leases) + [key for key, _, _ in hashes]
            args = [str(len(counters)), str(len(held.leases)), str(len(hashes))]
            if marked is None:
                args += ["0", "0"]
            else:
                keys.append(marker_key(team, marked[0]))
                args += [str(marked[1]), str(MARKER_SECONDS)]
            for _, (delta, expires) in counters:
                delta = max(-COUNT_MAX, min(delta, COUNT_MAX))
                args += [str(delta), str(max(1, math.ceil(expires - now)))]
            for members in held.leases.values():
                args.append(str(len(members)))
                args += members
            for _, ttl, fields in hashes:
                args += [str(ttl), str(len(fields))]
                for name, value in fields.items():
                    args += [name, str(min(value, COUNT_MAX))]
            made.append((keys, args))
        return made

    def _held(self, team: str) -> _Team:
        held = self._teams.get(team)
        if held is None:
            held = self._teams[team] = _Team()
        return held


def marker_key(team: str, sender: str) -> str:
    """Where ``SETTLE`` keeps the sequence number of ``sender``'s last tally applied."""
    return key_prefix(team, f"settled:{sender}")


def _correct(counters: dict[str, list[int]], corrections: Iterable[tuple[str, int, int]]) -> None:
    # Tuples unpacked, not read by name: on every request that ``add`` takes.
    for key, delta, expires in corrections:
        found = counters.get(key)
        if found is None:
            counters[key] = [delta, expires]
        else:
            found[0] += delta
            if expires > found[1]:
                found[1] = expires


def _free(held: _Team, key: str, member: str) -> None:
    members = held.leases.get(key)
    if members is None:
        held.leases[key] = [member]
    else:
        members.append(member)


def _sums(held: _Team) -> tuple[dict[str, list[int]], dict[tuple[str, ...], _Fields]]:
    """``held``'s counters and ledger hashes with what ``finished`` summed added: copies, so
    that ``calls`` says the same however often it is asked."""
    counters = {key: [delta, expires] for key, (delta, expires) in held.counters.items()}
    for charges, amounts, _, (count, tokens, spent_nanos) in held.spent.values():
        # Each is settle's actual - reserved, summed: what was spent less what was reserved.
        spent = (0, tokens, spent_nanos)
        corrections = [
            (charge.key, spent[charge.unit] - count * amounts[charge.unit], charge.expires)
            for charge in charges
            if charge.unit != REQUESTS
        ]
        _correct(counters, corrections)
    hashes = {keys: (ttls, dict(fields)) for keys, (ttls, fields) in held.hashes.items()}
    for (keys, model), row in held.used.items():
        fields = hashes.setdefault(keys, (TTLS, {}))[1]
        for name, value in zip(field_names(model), row, strict=True):
            if value:
                fields[name] = fields.get(name, 0) + value
    return counters, hashes
