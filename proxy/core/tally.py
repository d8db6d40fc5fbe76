"""``Tally``: the settlements of ended requests, gathered until they are sent to a shared store
(sans-IO). Per team, each counter's corrections are summed, the leases to free listed and the
ledger's increments summed, so that a batch costs one SETTLE call per team however many
requests it holds (``limits_lua.SETTLE`` reads what ``calls`` gives).

Summing corrections before the floor at 0 is applied changes nothing a request can see: a
refund only meets its own reservation, which the counter still holds (the floor is for a key
the store lost).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from proxy.core.ledger import Entry
from proxy.core.limits import Settlement


@dataclass(slots=True)
class _Team:
    counters: dict[str, list[int]] = field(default_factory=dict)  # key -> [delta, expires]
    leases: dict[str, list[str]] = field(default_factory=dict)  # lease set -> members
    # An entry's hashes (its day's and month's) take the same increments: summed once for both.
    hashes: dict[tuple[str, ...], tuple[tuple[int, ...], dict[str, int]]] = field(
        default_factory=dict
    )  # keys -> their ttls, fields


class Tally:
    __slots__ = ("_teams", "count")

    def __init__(self) -> None:
        self._teams: dict[str, _Team] = {}
        self.count = 0  # the requests it holds

    @classmethod
    def of(cls, calls: Iterable[tuple[str, Settlement, Entry | None]]) -> Tally:
        """A tally of each ``(team, settlement, entry)``."""
        tally = cls()
        for team, settlement, entry in calls:
            tally.add(team, settlement, entry)
        return tally

    def add(self, team: str, settlement: Settlement, entry: Entry | None) -> None:
        held = self._teams.get(team)
        if held is None:
            held = self._teams[team] = _Team()
        self.count += 1
        counters = held.counters
        # On every request: tuples unpacked, not read by name, and no list made to be dropped.
        for key, delta, expires in settlement.corrections:
            found = counters.get(key)
            if found is None:
                counters[key] = [delta, expires]
            else:
                found[0] += delta
                if expires > found[1]:
                    found[1] = expires
        lease = settlement.lease
        if lease is not None:
            members = held.leases.get(lease.key)
            if members is None:
                held.leases[lease.key] = [lease.member]
            else:
                members.append(lease.member)
        if entry is not None and entry.fields:
            kept = held.hashes.get(entry.keys)
            if kept is None:
                kept = held.hashes[entry.keys] = (entry.ttls, {})
            fields = kept[1]
            for name, increment in entry.fields:
                fields[name] = fields.get(name, 0) + increment

    def calls(self, now: float) -> list[tuple[list[str], list[str]]]:
        """SETTLE's KEYS and ARGV, one call per team, sent at ``now`` (a counter's TTL is
        from it to the key's expiry)."""
        made = []
        for held in self._teams.values():
            counters = [(k, v) for k, v in held.counters.items() if v[0]]
            hashes = [
                (key, ttl, fields)
                for keys, (ttls, fields) in held.hashes.items()
                for key, ttl in zip(keys, ttls, strict=True)
            ]
            keys = [k for k, _ in counters] + list(held.leases) + [key for key, _, _ in hashes]
            args = [str(len(counters)), str(len(held.leases)), str(len(hashes))]
            for _, (delta, expires) in counters:
                args += [str(delta), str(max(1, math.ceil(expires - now)))]
            for members in held.leases.values():
                args.append(str(len(members)))
                args += members
            for _, ttl, fields in hashes:
                args += [str(ttl), str(len(fields))]
                for name, value in fields.items():
                    args += [name, str(value)]
            made.append((keys, args))
        return made
