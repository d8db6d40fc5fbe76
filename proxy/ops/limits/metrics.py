"""``LimitMetrics``: team limits and budgets, and their state store, as Prometheus metrics
(docs/limits.md, docs/metrics.md).

The allowances are gauges read from the store every ``limiter.GAUGE_SECONDS`` by each worker:
every worker sees the same shared counters, so the most recent reading of a live worker is the
team's (``livemostrecent``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from proxy.core.config import Team
from proxy.core.errors import RateLimited
from proxy.core.exchange import Exchange
from proxy.http.limits.limiter import Shown
from proxy.http.state import Observer

LIMIT_NAMES = ("requests_per_minute", "tokens_per_minute", "concurrency", "budget")
OPERATIONS = ("reserve", "settle", "read")


def configured(team: Team) -> dict[str, float]:
    """Each of a team's limits that is set, by name; a budget in its unit (USD or tokens)."""
    limits = team.limits
    found: dict[str, float | None] = {
        "requests_per_minute": limits.requests_per_minute,
        "tokens_per_minute": limits.tokens_per_minute,
        "concurrency": limits.concurrency,
        "budget": limits.budget.amount if limits.budget is not None else None,
    }
    return {name: value for name, value in found.items() if value is not None}


class LimitMetrics(Observer):
    def __init__(self, registry: CollectorRegistry, teams: Iterable[Team]) -> None:
        self.limited = Counter(
            "llm_proxy_limited_requests_total",
            "Requests refused (429) by a team's limit or budget, by the limit.",
            ("team", "limit"),
            registry=registry,
        )
        self.limit = Gauge(
            "llm_proxy_limit",
            "A team's configured limit: per minute, in flight, or its budget (USD or tokens).",
            ("team", "limit"),
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.remaining = Gauge(
            "llm_proxy_limit_remaining",
            "What remains of a team's limit now: this minute's, in flight, or the budget's.",
            ("team", "limit"),
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.state_up = Gauge(
            "llm_proxy_state_up",
            "1 while the limits' state store answers, 0 while it is failing (any worker).",
            (),
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.state_errors = Counter(
            "llm_proxy_state_errors_total",
            "Calls to the limits' state store that failed or timed out, by operation.",
            ("operation",),
            registry=registry,
        )
        self.dropped = Counter(
            "llm_proxy_settlements_dropped_total",
            "Settlements of ended requests that never reached the state store.",
            (),
            registry=registry,
        )
        self.state_up.set(1)
        for operation in OPERATIONS:
            self.state_errors.labels(operation)
        for team in teams:
            for name, value in configured(team).items():
                self.limited.labels(team.name, name)
                self.limit.labels(team.name, name).set(value)

    def finished(self, exchange: Exchange) -> None:
        failure = exchange.failure
        if isinstance(failure, RateLimited) and failure.code in LIMIT_NAMES:
            self.limited.labels(exchange.team, failure.code).inc()

    def state_changed(self, up: bool) -> None:
        self.state_up.set(1 if up else 0)

    def state_failed(self, operation: str) -> None:
        self.state_errors.labels(operation).inc()

    def settlements_dropped(self, count: int) -> None:
        self.dropped.inc(count)

    def limits_seen(self, shown: Shown) -> None:
        for team, limits in shown.items():
            for name, figures in limits.items():
                self._set(team, name, figures)

    def _set(self, team: str, name: str, figures: Mapping[str, object]) -> None:
        limit, remaining = figures.get("limit"), figures.get("remaining")
        if isinstance(limit, int | float) and isinstance(remaining, int | float):
            self.limit.labels(team, name).set(limit)
            self.remaining.labels(team, name).set(remaining)
