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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from proxy.core.limits import NANOS_PER_USD, nanos, window
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
# Kept for reports well past their period: two months of days, two years of months.
DAY_TTL: Final = 62 * 86400
MONTH_TTL: Final = 25 * 31 * 86400
_PERIOD: Final = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")

PeriodKind = Literal["day", "month"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One request's increments, written to its team's day and month hashes."""

    keys: tuple[str, str]
    ttls: tuple[int, int]
    fields: tuple[tuple[str, int], ...]


def ledger_key(team: str, kind: PeriodKind, period: str) -> str:
    return f"use:{{{team}}}:{kind}:{period}"


def entry(team: str, model: str, usage: Usage | None, cost: float | None, now: float) -> Entry:
    """The increments of one request of ``team`` to ``model`` that ended at ``now``: its usage
    (none: it spent nothing, as a request refused upstream), and its cost (None: unpriced)."""
    used = usage if usage is not None else Usage()
    counts = {
        "requests": 1,
        "prompt_tokens": used.prompt_tokens,
        "cached_tokens": used.cached_tokens,
        "completion_tokens": used.completion_tokens,
        "reasoning_tokens": used.reasoning_tokens,
        "cost_nanos": nanos(cost) if cost is not None else 0,
        "unpriced_requests": 1 if cost is None and usage is not None else 0,
    }
    fields = tuple((f"{model}|{name}", value) for name, value in counts.items() if value)
    day, month = window("day", now).id, window("month", now).id
    return Entry(
        (ledger_key(team, "day", day), ledger_key(team, "month", month)),
        (DAY_TTL, MONTH_TTL),
        fields,
    )


def parse_period(text: str | None, now: float) -> tuple[PeriodKind, str] | None:
    """``2026-12`` (a month) or ``2026-12-02`` (a day), UTC; none given: this month. None when
    it is neither."""
    if text is None:
        return "month", window("month", now).id
    match = _PERIOD.match(text)
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
