"""What a team's limits stand at now (sans-IO): the keys to read, and the view of what they held,
for ``GET /admin/limits`` and the remaining-allowance gauges (docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.limits.admission import NANOS_PER_USD, Limits, key_prefix, window


@dataclass(frozen=True, slots=True)
class Probe:
    """The keys that hold a team's limits now: its counters (per-minute ones, the budget's)
    and its lease set, if it has a concurrency limit."""

    team: str
    limits: Limits
    counters: tuple[str, ...]
    lease: str | None
    now: float


def probe(team: str, limits: Limits, now: float) -> Probe:
    counters: list[str] = []
    if limits.requests_per_minute is not None:
        counters.append(f"{key_prefix(team, 'rpm')}:{window('minute', now).id}")
    if limits.tokens_per_minute is not None:
        counters.append(f"{key_prefix(team, 'tpm')}:{window('minute', now).id}")
    budget = limits.budget
    if budget is not None:
        counters.append(
            f"{key_prefix(team, f'budget:{budget.kind}')}:{window(budget.period, now).id}"
        )
    lease = key_prefix(team, "inflight") if limits.concurrency is not None else None
    return Probe(team, limits, tuple(counters), lease, now)


def view(probe: Probe, values: tuple[int, ...], in_flight: int) -> dict[str, dict[str, object]]:
    """Each of the team's limits: its limit, what is used and what remains, and when its window
    resets (seconds). A USD budget is shown in USD."""
    limits, now = probe.limits, probe.now
    shown: dict[str, dict[str, object]] = {}
    found = iter(values)
    minute_left = round(window("minute", now).end - now, 3)
    for code, limit in (
        ("requests_per_minute", limits.requests_per_minute),
        ("tokens_per_minute", limits.tokens_per_minute),
    ):
        if limit is not None:
            used = next(found)
            shown[code] = {
                "limit": limit,
                "used": used,
                "remaining": max(0, limit - used),
                "reset_seconds": minute_left,
            }
    if limits.concurrency is not None:
        shown["concurrency"] = {
            "limit": limits.concurrency,
            "used": in_flight,
            "remaining": max(0, limits.concurrency - in_flight),
        }
    budget = limits.budget
    if budget is not None:
        used_raw = next(found)
        current = window(budget.period, now)
        if budget.kind == "usd":
            amount: float = round(used_raw / NANOS_PER_USD, 9)
            remaining: float = round(max(0.0, budget.amount - amount), 9)
        else:
            amount, remaining = used_raw, max(0, int(budget.amount) - used_raw)
        shown["budget"] = {
            "kind": budget.kind,
            "period": budget.period,
            "window": current.id,
            "limit": budget.amount if budget.kind == "usd" else int(budget.amount),
            "used": amount,
            "remaining": remaining,
            "reset_seconds": round(current.end - now, 3),
        }
    return shown
