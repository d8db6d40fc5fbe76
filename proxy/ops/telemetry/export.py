"""The spans' way out: the SDK's batch processor behind a bounded gate that counts what it
drops, and an exporter that counts what the collector did not take.

The batch processor keeps ended spans in a queue that its own thread exports; when the queue is
full it drops the oldest, telling no one but a log line. So the gate in front of it counts the
spans it holds (queued, or in the batch being exported) and drops, counted, those beyond its
capacity: the processor's queue, as large, never overflows. A request only ever appends to a
queue: export never blocks it, whatever the collector does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

Dropped = Callable[[int], None]


class Gate:
    """How many spans are held between the gate and the collector, at most ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self._lock = threading.Lock()  # taken by the loop's thread and the exporter's

    def enter(self) -> bool:
        with self._lock:
            if self.held >= self.capacity:
                return False
            self.held += 1
            return True

    def leave(self, count: int) -> None:
        with self._lock:
            self.held -= count


class GatedProcessor(SpanProcessor):
    """``inner`` (a ``BatchSpanProcessor``) for the spans that fit through ``gate``; the others
    are counted by ``dropped`` (on the loop's thread, where spans end)."""

    def __init__(self, inner: SpanProcessor, gate: Gate, dropped: Dropped) -> None:
        self.inner = inner
        self.gate = gate
        self.dropped = dropped

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.gate.enter():
            self.inner.on_end(span)
        else:
            self.dropped(1)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingExporter(SpanExporter):
    """``inner`` (the OTLP exporter), telling ``gate`` that a batch has left the queue, and the
    loop (``dropped``, through ``loop.call_soon_threadsafe``) how many spans a failed export
    lost. Runs on the batch processor's thread."""

    def __init__(
        self, inner: SpanExporter, gate: Gate, loop: asyncio.AbstractEventLoop, dropped: Dropped
    ) -> None:
        self.inner = inner
        self.gate = gate
        self.loop = loop
        self.dropped = dropped

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        finally:
            self.gate.leave(len(spans))
        if result is not SpanExportResult.SUCCESS:
            # The loop is closed once the worker stops: what is lost then is not counted.
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.dropped, len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
