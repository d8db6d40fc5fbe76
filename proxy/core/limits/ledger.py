"""The usage ledger (sans-IO): what each team's requests spent, per model, per UTC day and month,
kept in the state store beside the limits for ``GET /admin/usage`` (docs/limits.md).

One hash per team and period, ``use:{team}:day:2026-12-02`` and ``use:{team}:month:2026-12``
(the team's hash tag, as its limit keys have: one settlement writes both in one script), whose
fields are ``<model>|<counter>``. Every counter is an integer, USD in nano-dollars, so that
every process's increments add up exactly, whatever their order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, Literal, NamedTuple

from proxy.core.limits.admission import NANOS_PER_USD, Windows, nanos, window
from proxy.core.usage import Usage

COUNTERS: Final = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "cost_nanos",
    "unpriced_requests",
)
# Redis's largest integer: a field summed past it (``HINCRBY`` would refuse) is held there.
FIELD_MAX: Final = 2**63 - 1
# Kept for reports well past their period: two months of days, two years of months.
DAY_TTL: Final = 62 * 86400
MONTH_TTL: Final = 25 * 31 * 86400
_PERIOD: Final = re.compile(r"([0-9]{4})-([0-9]{2})(?:-([0-9]{2}))?", re.ASCII)

PeriodKind = Literal["day", "month"]


class Entry(NamedTuple):
    """One request's increments, written to its team's day and month hashes."""

    keys: tuple[str, str]
    ttls: tuple[int, int]
    fields: tuple[tuple[str, int], ...]


def ledger_key(team: str, kind: PeriodKind, period: str) -> str:
    return f"use:{{{team}}}:{kind}:{period}"


def entry(team: str, model: str, usage: Usage | None, cost: float | None, now: float) -> Entry:
    """The increments of one request of ``team`` to ``model`` that ended at ``now``: its usage
    (none: it spent nothing, as a request refused upstream), and its cost (None: unpriced)."""
    return Ledger(Windows()).entry(team, model, usage, cost, now)


class Ledger:
    """Makes entries, with what repeats from one to the next kept: the day's and month's keys
    of each team, and each model's field names (teams and models are the configured ones)."""

    __slots__ = ("_fields", "_keys", "_windows")

    def __init__(self, windows: Windows) -> None:
        self._windows = windows
        self._keys: dict[str, tuple[str, str, tuple[str, str]]] = {}  # team -> day, month, keys
        self._fields: dict[str, tuple[str, ...]] = {}

    def keys(self, team: str, now: float) -> tuple[str, str]:
        """The team's hashes for ``now``: its day's and its month's."""
        day, month = self._windows("day", now).id, self._windows("month", now).id
        known = self._keys.get(team)
        if known is None or known[0] != day or known[1] != month:
            keys = (ledger_key(team, "day", day), ledger_key(team, "month", month))
            known = self._keys[team] = (day, month, keys)
        return known[2]

    def entry(
        self, team: str, model: str, usage: Usage | None, cost: float | None, now: float
    ) -> Entry:
        keys = self.keys(team, now)
        names = self._fields.get(model)
        if names is None:
            names = self._fields[model] = field_names(model)
        if usage is None:
            counts: tuple[int, ...] = (1, 0, 0, 0, 0, 0, 0)
        else:
            counts = (
                1,
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.completion_tokens,
                usage.reasoning_tokens,
                nanos(cost) if cost is not None else 0,
                1 if cost is None else 0,
            )
        fields = tuple((name, value) for name, value in zip(names, counts, strict=True) if value)
        return Entry(keys, TTLS, fields)


def field_names(model: str) -> tuple[str, ...]:
    """A model's fields in a hash, in the order of ``COUNTERS``."""
    return tuple(f"{model}|{name}" for name in COUNTERS)


TTLS: Final = (DAY_TTL, MONTH_TTL)


def parse_period(text: str | None, now: float) -> tuple[PeriodKind, str] | None:
    """``2026-12`` (a month) or ``2026-12-02`` (a day), UTC; none given: this month. None when
    it is neither."""
    if text is None:
        return "month", window("month", now).id
    match = _PERIOD.fullmatch(text)  # not match with $: it also takes a final newline
    if match is None:
        return None
    year, month, day = match.groups()
    try:
        datetime(int(year), int(month), int(day or 1), tzinfo=UTC)
    except ValueError:
        return None
    return ("day" if day else "month"), text


def report(hash_: Mapping[str, int]) -> dict[str, dict[str, int | float]]:
    """A team's hash as model -> its counters, cost in USD; unknown fields are left out (a
    newer version's, sharing the store)."""
    models: dict[str, dict[str, int]] = {}
    for name, value in hash_.items():
        model, _, counter = name.rpartition("|")
        if model and counter in COUNTERS:
            models.setdefault(model, dict.fromkeys(COUNTERS, 0))[counter] = value
    return {model: _shown(counts) for model, counts in sorted(models.items())}


def total(models: Mapping[str, Mapping[str, int | float]]) -> dict[str, int | float]:
    """The sum over a team's models."""
    summed: dict[str, int | float] = dict.fromkeys(_SHOWN, 0)
    for counts in models.values():
        for name in _SHOWN:
            summed[name] += counts[name]
    summed["cost_usd"] = round(summed["cost_usd"], 9)
    return summed


_SHOWN: Final = (*(c for c in COUNTERS if c != "cost_nanos"), "cost_usd")


def _shown(counts: Mapping[str, int]) -> dict[str, int | float]:
    shown: dict[str, int | float] = {
        name: counts[name] for name in COUNTERS if name != "cost_nanos"
    }
    shown["cost_usd"] = counts["cost_nanos"] / NANOS_PER_USD
    return shown
