"""The access log: one JSON line per API request, written to stderr (through the worker's Outlet).

Fields (``access_record``): ts (ISO-8601 UTC, when the request finished), request_id, team,
model, provider, endpoint, path (the request's, at most 256 characters), stream, status,
error_type, upstream_error, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens,
usage_source, cost_usd, duration_s, ttft_s, overhead_s, upstream_s, client_disconnected,
fixes, cache (hit, miss or bypass, for a model the response cache covers); and trace_id when
the request was traced and sampled (docs/telemetry.md). The tokens are those the metrics count
(``proxy.core.metering.metered_usage``), null when nothing was metered; cost_usd is what they
cost by the configured prices, null when the model has none. No key, prompt, completion or
header is ever written: the ``Exchange`` holds none.

The lines are a data stream, like nginx's access log, not diagnostics: they go straight to the
worker's ``Outlet``, without ``logging``, which cost measurably more and a write(2) per line.
Requests are reported every few milliseconds (``proxy.http.batch.REPORT_DELAY``), and the lines of
one event-loop turn go to the outlet together, which writes them in writes of at most
``PIPE_BUF`` bytes cut at line ends, and never waits for a reader that has stalled.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.core.exchange import Exchange
from proxy.core.metering import (
    counted_fixes,
    endpoint_label,
    metered_usage,
    status_of,
    time_to_first_token,
)
from proxy.http.batch import Batch
from proxy.http.state import Observer
from proxy.ops.outlet import Outlet


def _seconds(value: float | None) -> float | None:
    # Microseconds are finer than anything measured here, and keep the line short.
    return None if value is None else round(value, 6)


def access_record(exchange: Exchange, ts: datetime) -> dict[str, Any]:
    """The access log fields of a finished request."""
    status = status_of(exchange)
    usage = metered_usage(exchange, status)
    record = {
        "ts": ts,
        "request_id": exchange.request_id,
        "team": exchange.team,
        "model": exchange.model,
        "provider": exchange.provider,
        "endpoint": endpoint_label(exchange),
        "path": exchange.path,
        "stream": exchange.stream,
        "status": status,
        "error_type": exchange.error_type,
        "upstream_error": exchange.upstream_error,
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "completion_tokens": usage.completion_tokens if usage else None,
        "cached_tokens": usage.cached_tokens if usage else None,
        "reasoning_tokens": usage.reasoning_tokens if usage else None,
        "usage_source": usage.source if usage else None,
        # What it cost by the configured prices; null when unknown (no usage, or no price).
        "cost_usd": None if usage is None or exchange.price is None else exchange.price.cost(usage),
        "duration_s": _seconds(exchange.duration),
        "ttft_s": _seconds(time_to_first_token(exchange)),
        "overhead_s": _seconds(exchange.overhead),
        "upstream_s": _seconds(exchange.upstream_wait),
        "client_disconnected": exchange.client_disconnected,
        "fixes": sorted(counted_fixes(exchange)),
        "cache": exchange.cache,  # hit, miss or bypass for a cached model (docs/cache.md)
    }
    trace = exchange.trace
    if trace is not None and trace.trace_id is not None:
        record["trace_id"] = trace.trace_id  # joins the line to its trace (docs/telemetry.md)
    return record


def _now() -> datetime:
    return datetime.now(UTC)


_LINE = orjson.OPT_UTC_Z | orjson.OPT_APPEND_NEWLINE


class AccessLog(Observer):
    """Writes ``access_record`` of each finished request to ``outlet`` as one line of JSON, made
    by one ``orjson.dumps``; the lines of a loop turn go out together at its end."""

    def __init__(self, outlet: Outlet, clock: Callable[[], datetime] = _now) -> None:
        self._outlet = outlet
        self._clock = clock
        self._pending: list[bytes] = []
        self._batch = Batch(self.flush)

    def finished(self, exchange: Exchange) -> None:
        self._pending.append(orjson.dumps(access_record(exchange, self._clock()), option=_LINE))
        self._batch.touch()

    def close(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Hand the lines held so far to the outlet."""
        lines, self._pending = self._pending, []
        if lines:
            self._outlet.write(lines)
