"""A request's spans: one SERVER span, and under it one CLIENT span per upstream attempt, in the
GenAI semantic conventions (``proxy.core.genai``; docs/telemetry.md draws the tree).

Spans are started where the request and its attempts start, but finished when the request is
reported (``Telemetry.finished``), after its answer has gone out, at the request's own times
(``Exchange.ended``).

Which traces that start here are recorded is decided here, before the SDK is asked for a span:
the SDK's sampler starts a span (ids, context, a non-recording span) even for a trace it leaves
out, which cost several times what a request left out should. The decision is the one the
SDK's ``ParentBased(TraceIdRatioBased(ratio))`` makes in effect: an incoming ``traceparent``
decides by its sampled flag, a trace that starts here is recorded with probability ``ratio``;
the SDK's own sampler (``ParentBased(ALWAYS_ON)``) then agrees with it. A trace left out passes
its context on, marked not sampled, and records nothing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from time import perf_counter

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation import get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy.core.config import Deployment, Provider
from proxy.core.errors import ProxyError, UpstreamError, UpstreamStatusError
from proxy.core.exchange import Exchange
from proxy.core.genai import (
    Attributes,
    Upstream,
    request_attributes,
    response_attributes,
    span_name,
    upstream,
    usage_attributes,
)
from proxy.core.metering import metered_usage, status_of
from proxy.core.request import ClientRequest
from proxy.core.telemetry_config import Otlp
from proxy.core.usage import Usage
from proxy.ops.telemetry.instruments import Instruments

_ROUTES: Mapping[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "responses": "/v1/responses",
    "models": "/v1/models",
}


def error_type(error: ProxyError) -> str:
    """``error.type``: the upstream's HTTP status, the kind of upstream failure, or the
    OpenAI error type the client was given."""
    if isinstance(error, UpstreamStatusError):
        return str(error.upstream_status)
    if isinstance(error, UpstreamError):
        return error.kind
    return error.error_type


class Tracing:
    """Starts each request's trace (``proxy.http.state.Tracing``)."""

    def __init__(
        self, otlp: Otlp, tracer: trace.Tracer, instruments: Instruments | None = None
    ) -> None:
        self.tracer = tracer
        self.ratio = otlp.sample_ratio
        self.capture_content = otlp.capture_content
        self.instruments = instruments
        self.propagator = TraceContextTextMapPropagator()
        self.rng = random.Random()
        # perf_counter() -> epoch nanoseconds: spans end at the Exchange's own times.
        self.epoch = time.time_ns() - int(perf_counter() * 1e9)
        # A provider's (gen_ai.provider.name, server.address, server.port), by what makes them.
        self.providers: dict[tuple[str, str, str, str | None], Upstream] = {}

    def nanoseconds(self, counter: float) -> int:
        return self.epoch + int(counter * 1e9)

    def start(self, method: str, headers: Mapping[str, str], exchange: Exchange) -> RequestTrace:
        parent: Context | None = None
        if "traceparent" in headers:
            parent = self.propagator.extract(headers)
            incoming = get_current_span(parent).get_span_context()
            if not incoming.is_valid:
                parent = None  # a malformed traceparent: a trace of our own
            elif not incoming.trace_flags.sampled:
                # Left out upstream of us: passed on as it came, its tracestate included.
                return RequestTrace(self, None, _header(incoming))
        if parent is None and (self.ratio < 1.0 and self.rng.random() >= self.ratio):
            ids = b"traceparent: 00-%032x-%016x-00\r\n" % (
                self.rng.getrandbits(128) or 1,
                self.rng.getrandbits(64) or 1,
            )
            return RequestTrace(self, None, ids)
        route = _ROUTES.get(exchange.endpoint)
        span = self.tracer.start_span(
            method if route is None else f"{method} {route}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=self.nanoseconds(exchange.started),
            attributes={"http.request.method": method, "url.path": exchange.path},
        )
        if route is not None:
            span.set_attribute("http.route", route)
        return RequestTrace(self, span, b"")

    def provider(self, provider: Provider) -> Upstream:
        key = (provider.name, provider.api, provider.base_url, provider.telemetry_name)
        found = self.providers.get(key)
        if found is None:
            found = self.providers[key] = upstream(provider)
        return found


class RequestTrace:
    """One request's spans (``proxy.core.exchange.Trace``); ``server`` None: a trace left out,
    whose context ``header`` goes upstream as it is."""

    __slots__ = (
        "_attempt",
        "_attempt_started",
        "_attributes",
        "_header",
        "_number",
        "_server",
        "_tracing",
        "trace_id",
    )

    def __init__(self, tracing: Tracing, server: trace.Span | None, header: bytes) -> None:
        self._tracing = tracing
        self._server = server
        self._header = header
        self._attempt: trace.Span | None = None
        self._attempt_started = 0.0
        self._attributes: Attributes = {}
        self._number = 0
        self.trace_id = None
        if server is not None:
            self.trace_id = f"{server.get_span_context().trace_id:032x}"

    def attempt(
        self,
        exchange: Exchange,
        provider: Provider,
        deployment: Deployment,
        request: ClientRequest,
    ) -> bytes:
        self._number += 1
        self._attempt_started = perf_counter()
        exchange.answered = None  # an earlier attempt's, which did not answer
        tracing = self._tracing
        server = self._server
        if server is None and tracing.instruments is None:
            return self._header
        endpoint = exchange.endpoint  # its team and model are known from the first attempt on
        attributes = request_attributes(
            endpoint, tracing.provider(provider), deployment.model, request.body, request.stream
        )
        attributes["llm_proxy.team"] = exchange.team
        attributes["llm_proxy.model"] = exchange.model
        self._attributes = attributes
        if server is None:
            return self._header
        attributes = {**attributes, "llm_proxy.attempt": self._number}
        if tracing.capture_content:
            attributes["gen_ai.input.messages"] = _content(request.body)
        span = tracing.tracer.start_span(
            span_name(endpoint, deployment.model),
            context=set_span_in_context(server),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        self._attempt = span
        return _header(span.get_span_context())

    def attempt_failed(self, error: ProxyError) -> None:
        kind = error_type(error)
        self._measure(perf_counter(), None, None, kind)
        self._attributes = {}  # measured: the request's end measures a later attempt only
        span, self._attempt = self._attempt, None
        if span is not None:
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, error.message[:200]))
            span.end()

    def end(self, exchange: Exchange) -> None:
        server = self._server
        if server is None and self._tracing.instruments is None:
            return  # left out, and nothing to measure
        status = status_of(exchange)
        usage = metered_usage(exchange, status)
        failure = exchange.failure
        kind = None if failure is None else error_type(failure)
        first_chunk = None
        if exchange.first_token_at is not None and exchange.stream and self._number:
            first_chunk = max(0.0, exchange.first_token_at - self._attempt_started)
        self._measure(exchange.ended, first_chunk, usage, kind)
        if server is None:
            return
        ended = self._tracing.nanoseconds(exchange.ended)
        span, self._attempt = self._attempt, None
        if span is not None:
            attributes = usage_attributes(usage, exchange.cost_usd)
            if exchange.answered is not None:
                attributes.update(response_attributes(exchange.answered))
            if first_chunk is not None:
                attributes["gen_ai.response.time_to_first_chunk"] = first_chunk
            if exchange.client_disconnected:
                attributes["llm_proxy.client_disconnected"] = True
            if kind is not None:
                attributes["error.type"] = kind
                span.set_status(Status(StatusCode.ERROR))
            span.set_attributes(attributes)
            span.end(end_time=ended)
        attributes = {
            "http.response.status_code": status,
            "llm_proxy.team": exchange.team,
            "llm_proxy.model": exchange.model,
            "llm_proxy.request_id": exchange.request_id,
        }
        if exchange.cache is not None:
            attributes["llm_proxy.cache"] = exchange.cache  # hit, miss or bypass (docs/cache.md)
        if status >= 500:
            # A 4xx is the client's error, not the server's (the HTTP conventions).
            attributes["error.type"] = str(status)
            server.set_status(Status(StatusCode.ERROR))
        server.set_attributes(attributes)
        server.end(end_time=ended)

    def _measure(
        self, ended: float, first_chunk: float | None, usage: Usage | None, kind: str | None
    ) -> None:
        instruments = self._tracing.instruments
        if instruments is not None and self._attributes:
            seconds = ended - self._attempt_started
            instruments.record(self._attributes, seconds, first_chunk, usage, kind)


def _header(context: trace.SpanContext) -> bytes:
    """``context`` as W3C trace context request header lines."""
    line = b"traceparent: 00-%032x-%016x-%02x\r\n" % (
        context.trace_id,
        context.span_id,
        context.trace_flags,
    )
    state = context.trace_state.to_header()
    if state:
        line += b"tracestate: " + state.encode("ascii") + b"\r\n"
    return line


def _content(body: Mapping[str, object]) -> str:
    for key in ("messages", "input", "prompt"):
        if key in body:
            return orjson.dumps(body[key]).decode()
    return "[]"
