"""The Prometheus collectors, built on an injected registry, and their exposition on /metrics.

``ProxyMetrics`` is an ``Observer``: it counts each API request once, when it finishes, in the
label values of ``proxy.core.metering``. docs/metrics.md lists every metric; the names are
a contract with dashboards and alert rules, so they change only with them.

With several workers, prometheus_client's multiprocess mode keeps each worker's values in files
of its own under one per-run directory (``PROMETHEUS_MULTIPROC_DIR``, made by the supervisor);
a scrape answered by any worker merges all of them (``Exposition``), so it reports the exact
totals of the run. In-flight gauges are ``livesum``: a dead worker's part is dropped
(``mark_process_dead``) while its counters stay, so no counter goes backwards.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Generic, Literal, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.multiprocess import MultiProcessCollector

from proxy.core.config import Deployment
from proxy.core.errors import AuthenticationFailed
from proxy.core.exchange import Exchange
from proxy.core.fix_names import FIXES
from proxy.core.metering import (
    ENDPOINTS,
    TOKEN_TYPES,
    UPSTREAM_ERROR_KINDS,
    counted_fixes,
    endpoint_label,
    metered_usage,
    status_class,
    status_of,
    stream_label,
    time_to_first_token,
    token_amounts,
    upstream_error_kind,
)
from proxy.http.app import Handler, error_response
from proxy.http.batch import Batch
from proxy.http.state import Observer

# The format generate_latest writes. prometheus_client's CONTENT_TYPE_LATEST follows its newest
# text format (version=1.0.0 in 0.26), which is not what this body is.
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

# A whole request: from a cached answer in milliseconds to a long reasoning stream that hits the
# default total timeout of 900 s.
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 900.0,
)  # fmt: skip
# First byte of a stream: a few ms from a cache up to a 120 s first-byte timeout.
TTFT_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# The proxy's own work per request is tens to hundreds of microseconds; the upper buckets
# catch a stalled event loop.
OVERHEAD_BUCKETS: Final = (
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip

# The cycle collector's pauses: a tick's young collection takes well under a millisecond to a
# few; a full one, tens of milliseconds with thousands of requests in flight.
GC_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


_CIRCUIT_VALUES: Final = {"closed": 0, "half_open": 1, "open": 2}

# How long increments are held before they are written. A flush costs a locked write per series
# it touches, however many requests touched it: flushed at each proxy.http.batch.REPORT_DELAY, that
# took a measurable share of a worker's time (docs/performance.md), for figures no scrape reads
# that soon. A scrape on the main listener writes out its worker's first; the other workers' are at
# most this late (after the REPORT_DELAY before they are told).
FLUSH_DELAY: Final = 0.05

M = TypeVar("M", bound=MetricWrapperBase)


class _Children(Generic[M]):
    """A metric's labelled children, each made once: ``labels()`` validates and locks on every
    call, and label values are bounded, so the cache is too."""

    __slots__ = ("_made", "_metric")

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._made: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self._made.get(values)
        if child is None:
            child = self._made[values] = self._metric.labels(*values)
        return child


@dataclass(slots=True)
class _Route:
    """What every request of one (team, model, provider, endpoint, stream, status class)
    updates: found with one lookup per request instead of one per metric."""

    requests: Counter
    duration: Histogram
    overhead: Histogram
    in_flight: Gauge
    # The token counters by source, each (prompt, completion, cached, reasoning); made on first use.
    tokens: dict[str, tuple[Counter, Counter, Counter, Counter]] = field(default_factory=dict)


_Kind = Literal["counter", "gauge", "histogram"]
_GaugeMode = Literal["livesum", "livemax"]


@dataclass(frozen=True, slots=True)
class _Spec:
    """One metric of ``ProxyMetrics``: the attribute that holds it, and what it is made of."""

    attribute: str
    kind: _Kind
    name: str
    doc: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()  # a histogram's
    # A gauge's value across workers. livesum: the sum over live workers (a dead worker's
    # requests are no longer in flight).
    mode: _GaugeMode = "livesum"
    # Label values whose series exist from the start, at zero, whatever the configuration.
    zeros: tuple[tuple[str, ...], ...] = ()

    def make(self, registry: CollectorRegistry) -> MetricWrapperBase:
        if self.kind == "histogram":
            return Histogram(
                self.name, self.doc, self.labels, registry=registry, buckets=self.buckets
            )
        if self.kind == "gauge":
            return Gauge(
                self.name, self.doc, self.labels, registry=registry, multiprocess_mode=self.mode
            )
        return Counter(self.name, self.doc, self.labels, registry=registry)


# Every metric of ProxyMetrics (docs/metrics.md lists them; the names are a contract).
_METRICS: Final = (
    _Spec(
        "requests",
        "counter",
        "llm_proxy_requests_total",
        "API requests finished, by status class.",
        ("team", "model", "provider", "endpoint", "stream", "status_class"),
    ),
    _Spec(
        "tokens",
        "counter",
        "llm_proxy_tokens_total",
        "Tokens used, upstream-reported or estimated.",
        ("team", "model", "provider", "type", "source"),
    ),
    _Spec(
        "cost",
        "counter",
        "llm_proxy_cost_usd_total",
        "What the tokens used cost, in USD, by the configured prices.",
        ("team", "model", "provider"),
    ),
    _Spec(
        "unpriced",
        "counter",
        "llm_proxy_unpriced_requests_total",
        "Requests that used tokens of a model with no price: their cost is unknown.",
        ("team", "model", "provider"),
    ),
    _Spec(
        "duration",
        "histogram",
        "llm_proxy_request_duration_seconds",
        "Time from a request's arrival to its last byte.",
        ("model", "provider", "endpoint", "stream"),
        DURATION_BUCKETS,
    ),
    _Spec(
        "time_to_first_token",
        "histogram",
        "llm_proxy_time_to_first_token_seconds",
        "Time from a stream request's arrival to the first byte of its body.",
        ("model", "provider"),
        TTFT_BUCKETS,
    ),
    _Spec(
        "overhead",
        "histogram",
        "llm_proxy_overhead_seconds",
        "Time spent in the proxy itself, waiting on upstream and client excluded.",
        ("endpoint", "stream"),
        OVERHEAD_BUCKETS,
    ),
    _Spec(
        "upstream_errors",
        "counter",
        "llm_proxy_upstream_errors_total",
        "Requests that failed upstream, by kind of failure.",
        ("provider", "kind"),
    ),
    _Spec(
        "requests_in_flight",
        "gauge",
        "llm_proxy_requests_in_flight",
        "API requests being handled.",
        ("endpoint",),
        zeros=tuple((endpoint,) for endpoint in ENDPOINTS),
    ),
    _Spec(
        "streams_in_flight",
        "gauge",
        "llm_proxy_streams_in_flight",
        "Streams being relayed.",
        ("provider",),
    ),
    _Spec(
        "normalization_fixes",
        "counter",
        "llm_proxy_normalization_fixes_total",
        "Requests whose upstream output needed this kind of fix.",
        ("provider", "fix"),
    ),
    _Spec(
        "client_disconnects",
        "counter",
        "llm_proxy_client_disconnects_total",
        "Requests whose client went away before the end.",
        ("team", "model", "provider"),
    ),
    _Spec(
        "upstream_retries",
        "counter",
        "llm_proxy_upstream_retries_total",
        "Upstream attempts that failed and were followed by another (retry or fallback).",
        ("model", "provider"),
    ),
    _Spec(
        "circuit_state",
        "gauge",
        "llm_proxy_circuit_state",
        "A deployment's circuit breaker: 0 closed, 1 half-open (probing), 2 open.",
        ("model", "provider", "upstream_model"),
        # Each worker keeps its own breakers: the worst live one is the deployment's state.
        mode="livemax",
    ),
    _Spec(
        "circuit_transitions",
        "counter",
        "llm_proxy_circuit_transitions_total",
        "Circuit breaker transitions, by the state entered.",
        ("model", "provider", "upstream_model", "state"),
    ),
    _Spec(
        "config_reloads",
        "counter",
        "llm_proxy_config_reloads_total",
        "Configuration reloads (SIGHUP), applied or refused.",
        ("result",),
        zeros=(("success",), ("failure",)),
    ),
    _Spec(
        "gc_pauses",
        "histogram",
        "llm_proxy_gc_pause_seconds",
        "Pauses of a worker's cycle collector, young generations or in full.",
        ("collection",),
        GC_BUCKETS,
        zeros=(("young",), ("full",)),
    ),
    _Spec(
        "log_lines_dropped",
        "counter",
        "llm_proxy_log_lines_dropped_total",
        "Lines of log (access or diagnostic) dropped: the workers' stderr was not being read.",
        (),
    ),
    _Spec(
        "cache_requests",
        "counter",
        "llm_proxy_cache_requests_total",
        "Requests for a cached model, by what the response cache did: hit, miss or bypass.",
        ("team", "model", "result"),
    ),
    _Spec(
        "cache_tokens_saved",
        "counter",
        "llm_proxy_cache_tokens_saved_total",
        "Tokens that answers from the response cache did not spend upstream, by type.",
        ("team", "model", "type"),
    ),
    _Spec(
        "telemetry_dropped_spans",
        "counter",
        "llm_proxy_telemetry_dropped_spans_total",
        "Trace spans lost on their way to the OpenTelemetry collector: its queue was full, or"
        " an export failed (docs/telemetry.md).",
        (),
    ),
)


class ProxyMetrics(Observer):
    """Counts every API request on collectors registered in ``registry``.

    ``providers`` (the configured ones) get their gauges and error and fix counters at zero from
    the start, so that rates and alerts see a series before its first event.
    """

    # One attribute per entry of _METRICS: a labelled metric's children, or the metric itself.
    requests: _Children[Counter]
    tokens: _Children[Counter]
    cost: _Children[Counter]
    unpriced: _Children[Counter]
    duration: _Children[Histogram]
    time_to_first_token: _Children[Histogram]
    overhead: _Children[Histogram]
    upstream_errors: _Children[Counter]
    requests_in_flight: _Children[Gauge]
    streams_in_flight: _Children[Gauge]
    normalization_fixes: _Children[Counter]
    client_disconnects: _Children[Counter]
    upstream_retries: _Children[Counter]
    circuit_state: _Children[Gauge]
    circuit_transitions: _Children[Counter]
    config_reloads: _Children[Counter]
    gc_pauses: _Children[Histogram]
    log_lines_dropped: Counter
    cache_requests: _Children[Counter]
    cache_tokens_saved: _Children[Counter]
    telemetry_dropped_spans: Counter

    def __init__(
        self,
        registry: CollectorRegistry,
        providers: Iterable[str] = (),
        deployments: Iterable[tuple[str, str, str]] = (),
    ) -> None:
        for spec in _METRICS:
            metric = spec.make(registry)
            if not spec.labels:
                setattr(self, spec.attribute, metric)
                continue
            children = _Children(metric)
            for values in spec.zeros:
                children(*values)
            setattr(self, spec.attribute, children)
        for model, provider, upstream_model in deployments:
            self.circuit_state(model, provider, upstream_model).set(0)
            self.upstream_retries(model, provider)
            for state in _CIRCUIT_VALUES:
                self.circuit_transitions(model, provider, upstream_model, state)
        for provider in providers:
            self.streams_in_flight(provider)
            for kind in UPSTREAM_ERROR_KINDS:
                self.upstream_errors(provider, kind)
            for fix in FIXES:
                self.normalization_fixes(provider, fix)
        # The gauge child of each stream in flight, by id() of its exchange (which is alive, and
        # so keeps its id, until finished() has run).
        self._streaming: dict[int, Gauge] = {}
        # Counter increments, histogram observations and gauge moves, by child, held for
        # FLUSH_DELAY and written together: with several workers each write goes to a
        # memory-mapped file under a lock, which made metrics a large share of the cost of a
        # request's observers (docs/performance.md). A request that starts and ends within the
        # delay moves no gauge at all.
        self._counts: dict[Counter, float] = {}
        self._moves: dict[Gauge, float] = {}
        self._tallies: dict[Histogram, list[float]] = {}  # observations held
        self._batch = Batch(self.flush, FLUSH_DELAY)
        self._routes: dict[tuple[str, str, str, str, str, str], _Route] = {}

    def started(self, exchange: Exchange) -> None:
        self._move(self.requests_in_flight(endpoint_label(exchange)), 1)

    def stream_started(self, exchange: Exchange) -> None:
        gauge = self.streams_in_flight(exchange.provider)
        self._move(gauge, 1)
        self._streaming[id(exchange)] = gauge

    def finished(self, exchange: Exchange) -> None:
        team, model, provider = exchange.team, exchange.model, exchange.provider
        status = status_of(exchange)
        key = (
            team,
            model,
            provider,
            endpoint_label(exchange),
            stream_label(exchange),
            status_class(status),
        )
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(*key)
        moves = self._moves
        moves[route.in_flight] = moves.get(route.in_flight, 0) - 1
        streaming = self._streaming.pop(id(exchange), None)
        if streaming is not None:
            moves[streaming] = moves.get(streaming, 0) - 1
        counts = self._counts
        counts[route.requests] = counts.get(route.requests, 0) + 1
        usage = metered_usage(exchange, status)
        if usage is not None:
            source = usage.source
            tokens = route.tokens.get(source)
            if tokens is None:
                tokens = route.tokens[source] = self._token_counters(team, model, provider, source)
            for counter, amount in zip(tokens, token_amounts(usage), strict=True):
                if amount:
                    counts[counter] = counts.get(counter, 0) + amount
            price = exchange.price
            if price is None:
                self._count(self.unpriced(team, model, provider), 1)
            else:
                cost = price.cost(usage)
                if cost:
                    self._count(self.cost(team, model, provider), cost)
        self._observe(route.duration, exchange.duration)
        self._observe(route.overhead, exchange.overhead)
        ttft = time_to_first_token(exchange)
        if ttft is not None:
            self._observe(self.time_to_first_token(model, provider), ttft)
        kind = upstream_error_kind(exchange)
        if kind is not None:
            self._count(self.upstream_errors(provider, kind), 1)
        for failed_provider, failed_kind in exchange.retried:
            self._count(self.upstream_errors(failed_provider, failed_kind), 1)
            self._count(self.upstream_retries(model, failed_provider), 1)
        if exchange.client_disconnected:
            self._count(self.client_disconnects(team, model, provider), 1)
        for fix in counted_fixes(exchange):
            self._count(self.normalization_fixes(provider, fix), 1)
        if exchange.cache is not None:
            self._cached(exchange)
        self._batch.touch()

    def _cached(self, exchange: Exchange) -> None:
        team, model = exchange.team, exchange.model
        self._count(self.cache_requests(team, model, exchange.cache or ""), 1)
        saved = exchange.saved
        if saved is not None:
            self._count(self.cache_tokens_saved(team, model, "prompt"), saved.prompt_tokens)
            self._count(self.cache_tokens_saved(team, model, "completion"), saved.completion_tokens)

    def close(self) -> None:
        self._batch.flush_now()

    def flush(self) -> None:
        """Write what is held: counters and histograms first, in-flight gauges last, so that a
        reader who sees a request no longer in flight also sees it counted."""
        counts, self._counts = self._counts, {}
        tallies, self._tallies = self._tallies, {}
        moves, self._moves = self._moves, {}
        for counter, amount in counts.items():
            counter.inc(amount)
        for histogram, values in tallies.items():
            observe = histogram.observe
            for value in values:
                observe(value)
        for gauge, amount in moves.items():
            if amount:  # a request that started and ended within the delay moves nothing
                gauge.inc(amount)

    def _count(self, counter: Counter, amount: float) -> None:
        counts = self._counts
        counts[counter] = counts.get(counter, 0) + amount
        self._batch.touch()

    def _move(self, gauge: Gauge, amount: float) -> None:
        moves = self._moves
        moves[gauge] = moves.get(gauge, 0) + amount
        self._batch.touch()

    def _observe(self, histogram: Histogram, value: float) -> None:
        values = self._tallies.get(histogram)
        if values is None:
            self._tallies[histogram] = [value]
        else:
            values.append(value)

    def _token_counters(
        self, team: str, model: str, provider: str, source: str
    ) -> tuple[Counter, Counter, Counter, Counter]:
        prompt, completion, cached, reasoning = (
            self.tokens(team, model, provider, token_type, source) for token_type in TOKEN_TYPES
        )
        return prompt, completion, cached, reasoning

    def circuit_changed(self, model: str, deployment: Deployment, state: str) -> None:
        labels = (model, deployment.provider, deployment.model)
        self.circuit_state(*labels).set(_CIRCUIT_VALUES.get(state, 0))
        self.circuit_transitions(*labels, state).inc()

    def reloaded(self, ok: bool) -> None:
        self.config_reloads("success" if ok else "failure").inc()

    def collected(self, full: bool, seconds: float) -> None:
        self._observe(self.gc_pauses("full" if full else "young"), seconds)
        self._batch.touch()

    def lines_dropped(self, count: int) -> None:
        self._count(self.log_lines_dropped, count)

    def spans_dropped(self, count: int) -> None:
        self._count(self.telemetry_dropped_spans, count)

    def _route(
        self, team: str, model: str, provider: str, endpoint: str, stream: str, status: str
    ) -> _Route:
        return _Route(
            requests=self.requests(team, model, provider, endpoint, stream, status),
            duration=self.duration(model, provider, endpoint, stream),
            overhead=self.overhead(endpoint, stream),
            in_flight=self.requests_in_flight(endpoint),
        )


@dataclass(frozen=True, slots=True)
class Exposition:
    """Where a scrape's numbers come from: this process's ``registry``, or, with ``directory``
    (multiprocess mode), the files of every worker of the run."""

    registry: CollectorRegistry
    directory: str | None = None

    def render(self) -> bytes:
        if self.directory is None:
            return generate_latest(self.registry)
        # A fresh registry per scrape: MultiProcessCollector reads the files when collected.
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.directory)  # type: ignore[no-untyped-call]
        return generate_latest(merged)


def _authorized(header: str | None, token: bytes) -> bool:
    if header is None:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    # surrogatepass: a header decoded with surrogateescape must compare, not raise.
    return hmac.compare_digest(value.strip().encode("utf-8", "surrogatepass"), token)


def metrics_handler(
    exposition: Exposition, token: str | None = None
) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """GET /metrics: the exposition, behind ``Authorization: Bearer <token>`` if one is set."""
    expected = token.encode() if token else None

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if expected is not None and not _authorized(request.headers.get("Authorization"), expected):
            return error_response(
                AuthenticationFailed("/metrics requires the metrics bearer token"),
                {"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
        # Rendering reads every series (and, with workers, every worker's files): off the event
        # loop, so a scrape does not hold up requests in flight.
        body = await asyncio.get_running_loop().run_in_executor(None, exposition.render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    return handle


def metrics_routes(exposition: Exposition, token: str | None = None) -> dict[str, Handler]:
    """/metrics as a route of the proxy's own listener (``Gateway``'s ``extra_routes``)."""
    return {"/metrics": metrics_handler(exposition, token)}


def metrics_app(exposition: Exposition, token: str | None = None) -> web.Application:
    """The application of a listener of its own that serves only /metrics."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(exposition, token))
    return app
