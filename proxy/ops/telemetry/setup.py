"""The SDK's providers for one worker: a tracer (and a meter, with ``metrics: true``) whose
spans go through the bounded gate (``export``) to the collector, over OTLP/HTTP protobuf; and
``Telemetry``, the worker's observer that ends each request's spans.

Each worker is a process of its own and sets up its own providers, with a ``service.instance.id``
of its own; none is made the SDK's global provider (no global state: a test may run several).
The batch processor reads its ``OTEL_BSP_*`` settings here, from the environment as the SDK
would; settings it refuses (a batch larger than the queue) are a startup error
(``batch_problems``), never a process that serves and traces nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_EXPORT_TIMEOUT,
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_BSP_SCHEDULE_DELAY,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from proxy.core.exchange import Exchange
from proxy.core.telemetry_config import Otlp
from proxy.http.state import Observer
from proxy.ops.telemetry.export import CountingExporter, Dropped, Gate, GatedProcessor
from proxy.ops.telemetry.instruments import Instruments
from proxy.ops.telemetry.spans import Tracing

# How long a stopping worker gives the exporter to send what is queued.
SHUTDOWN_SECONDS = 3
# The SDK's own defaults (its batch processor's documentation).
_DEFAULTS = {
    OTEL_BSP_MAX_QUEUE_SIZE: 2048,
    OTEL_BSP_SCHEDULE_DELAY: 5000,
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 512,
    OTEL_BSP_EXPORT_TIMEOUT: 30000,
}


class BatchSettingsError(Exception):
    """The ``OTEL_BSP_*`` environment asks for a batch processor the SDK refuses to start."""


@dataclass(frozen=True, slots=True)
class Batching:
    max_queue_size: int
    schedule_delay_millis: int
    max_export_batch_size: int
    export_timeout_millis: int


def batching(env: Mapping[str, str] | None = None) -> Batching:
    """The batch processor's settings from ``OTEL_BSP_*``; ``BatchSettingsError`` if one is
    not an integer, or the SDK would refuse them."""
    env = os.environ if env is None else env
    values: dict[str, int] = {}
    for name, default in _DEFAULTS.items():
        raw = env.get(name, "").strip()
        try:
            values[name] = int(raw) if raw else default
        except ValueError:
            raise BatchSettingsError(f"{name} must be an integer (milliseconds or spans)") from None
    settings = Batching(
        values[OTEL_BSP_MAX_QUEUE_SIZE],
        values[OTEL_BSP_SCHEDULE_DELAY],
        values[OTEL_BSP_MAX_EXPORT_BATCH_SIZE],
        values[OTEL_BSP_EXPORT_TIMEOUT],
    )
    try:
        # The SDK's judgement, not a copy of its rules: a processor made and shut down at once.
        _batch_processor(_Nowhere(), settings).shutdown()  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise BatchSettingsError(f"the OTEL_BSP_* environment variables: {exc}") from None
    return settings


def batch_problems() -> list[str]:
    try:
        batching()
    except BatchSettingsError as exc:
        return [f"telemetry: {exc}"]
    return []


def _batch_processor(exporter: SpanExporter, settings: Batching) -> BatchSpanProcessor:
    return BatchSpanProcessor(
        exporter,
        max_queue_size=settings.max_queue_size,
        schedule_delay_millis=settings.schedule_delay_millis,
        max_export_batch_size=settings.max_export_batch_size,
        export_timeout_millis=settings.export_timeout_millis,
    )


class _Nowhere(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@dataclass(frozen=True, slots=True)
class Providers:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider | None
    gate: Gate


def start_providers(otlp: Otlp, loop: asyncio.AbstractEventLoop, dropped: Dropped) -> Providers:
    """This worker's providers, exporting to ``otlp``; ``dropped`` counts spans lost (called on
    ``loop``). ``BatchSettingsError`` if the ``OTEL_BSP_*`` settings are refused."""
    settings = batching()
    resource = Resource.create(
        {"service.name": otlp.service_name, "service.instance.id": str(uuid.uuid4())}
    )
    headers = dict(otlp.headers)
    gate = Gate(settings.max_queue_size)
    exporter = CountingExporter(
        OTLPSpanExporter(endpoint=otlp.traces_url, headers=headers), gate, loop, dropped
    )
    batch = _batch_processor(exporter, settings)
    tracer_provider = TracerProvider(
        # Which traces are recorded is decided before a span is asked for (spans.Tracing): the
        # SDK is asked only for those, and agrees.
        sampler=ParentBased(ALWAYS_ON),
        resource=resource,
        shutdown_on_exit=False,  # the worker shuts it down itself, within a bound
    )
    tracer_provider.add_span_processor(GatedProcessor(batch, gate, dropped))
    meter_provider = None
    if otlp.metrics:
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=otlp.metrics_url, headers=headers)
        )
        meter_provider = MeterProvider(
            metric_readers=[reader], resource=resource, shutdown_on_exit=False
        )
    return Providers(tracer_provider, meter_provider, gate)


class Telemetry(Observer):
    """The worker's telemetry: ends each request's spans when it is reported; shuts the SDK
    down when the worker stops."""

    def __init__(self, otlp: Otlp, providers: Providers) -> None:
        self.providers = providers
        meter_provider = providers.meter_provider
        self.tracing = Tracing(
            otlp,
            providers.tracer_provider.get_tracer("llm-proxy"),
            None if meter_provider is None else Instruments(meter_provider),
        )

    def finished(self, exchange: Exchange) -> None:
        if exchange.trace is not None:
            exchange.trace.end(exchange)

    def close(self) -> None:
        """Export what is queued, within a bound: a collector that is down must not hold the
        worker's exit (the export runs on a thread that the exit does not wait for)."""
        providers = self.providers

        def shut() -> None:
            providers.tracer_provider.shutdown()
            if providers.meter_provider is not None:
                providers.meter_provider.shutdown(timeout_millis=SHUTDOWN_SECONDS * 1000)

        thread = threading.Thread(target=shut, name="telemetry-shutdown", daemon=True)
        thread.start()
        thread.join(SHUTDOWN_SECONDS)


def start_telemetry(otlp: Otlp, loop: asyncio.AbstractEventLoop, dropped: Dropped) -> Telemetry:
    """The worker's telemetry, exporting to ``otlp``; ``dropped`` counts lost spans (called on
    ``loop``). ``BatchSettingsError`` if the ``OTEL_BSP_*`` settings are refused."""
    return Telemetry(otlp, start_providers(otlp, loop, dropped))
