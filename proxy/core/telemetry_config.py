"""The configuration of OpenTelemetry export (docs/telemetry.md): the ``telemetry`` section.

    telemetry:
      otlp:
        endpoint: http://otel-collector:4318   # OTLP over HTTP/protobuf: {endpoint}/v1/traces
        headers: {authorization: "Bearer ${OTEL_TOKEN}"}
        sample_ratio: 1.0
        service_name: llm-proxy
        metrics: false
        capture_content: false

Absent, nothing is exported. Its header values are credentials (redacted like a provider's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from proxy.core.yaml_readers import (
    Checker,
    Invalid,
    as_number,
    boolean,
    http_url,
    join_path,
    text,
)

TELEMETRY_KEYS = frozenset({"otlp"})
OTLP_KEYS = frozenset(
    {"endpoint", "headers", "sample_ratio", "service_name", "metrics", "capture_content"}
)
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Otlp:
    """Where and what to export over OTLP/HTTP (protobuf)."""

    endpoint: str  # without a trailing slash; traces go to {endpoint}/v1/traces
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS, repr=False)
    # Of the traces that start here (no sampled parent): a sampled incoming traceparent is kept.
    sample_ratio: float = 1.0
    service_name: str = "llm-proxy"
    metrics: bool = False  # the GenAI client metrics over OTLP as well
    # The prompt and the answer on the spans (gen_ai.input.messages / gen_ai.output.messages).
    capture_content: bool = False

    @property
    def traces_url(self) -> str:
        return f"{self.endpoint}/v1/traces"

    @property
    def metrics_url(self) -> str:
        return f"{self.endpoint}/v1/metrics"


def parse_telemetry(
    ck: Checker,
    raw: object,
    read_headers: Callable[[object, str], Mapping[str, str]],
) -> Otlp | None:
    """``telemetry`` (None when absent); ``read_headers`` reads a mapping of HTTP headers, as a
    provider's ``headers`` are read."""
    if raw is None:
        return None
    node = ck.mapping(raw, "telemetry", TELEMETRY_KEYS)
    if node is None:
        return None
    if node.get("otlp") is None:
        ck.fail("telemetry", "required key 'otlp' is missing (or remove telemetry)")
        return None
    path = "telemetry.otlp"
    otlp = ck.mapping(node["otlp"], path, OTLP_KEYS)
    if otlp is None:
        return None
    d = Otlp("")
    return Otlp(
        endpoint=ck.require(otlp, "endpoint", path, _endpoint, ""),
        headers=read_headers(otlp.get("headers"), join_path(path, "headers")),
        sample_ratio=ck.optional(otlp, "sample_ratio", path, _ratio, d.sample_ratio),
        service_name=ck.optional(otlp, "service_name", path, _name, d.service_name),
        metrics=ck.optional(otlp, "metrics", path, boolean, d.metrics),
        capture_content=ck.optional(otlp, "capture_content", path, boolean, d.capture_content),
    )


def _endpoint(value: object) -> str:
    url, parts = http_url(value, ": use headers", "")
    if parts.path.rstrip("/").endswith("/v1/traces"):
        raise Invalid("is the collector's base URL: /v1/traces is added to it")
    return url.rstrip("/")


def _ratio(value: object) -> float:
    ratio = as_number(value)
    if ratio is None or not 0 <= ratio <= 1:
        raise Invalid("must be a number from 0 to 1")
    return ratio


def _name(value: object) -> str:
    name = text(value)
    if not name.strip() or any(c in name for c in "\r\n\0"):
        raise Invalid("must be a non-empty name on one line")
    return name
