"""OpenTelemetry traces (and, optionally, metrics) of every API request, in the GenAI semantic
conventions, exported over OTLP/HTTP by the official SDK (docs/telemetry.md).

The SDK is an optional extra (``pip install 'llm-proxy[otel]'``): nothing here imports it at
module level, and a worker without ``telemetry`` in its configuration never loads it. The
modules: ``setup`` (the SDK's providers, per worker), ``export`` (the bounded queue and its
count of dropped spans), ``spans`` (a request's spans).
"""

from __future__ import annotations

from importlib.util import find_spec

from proxy.core.config import Config

MISSING_SDK = (
    "telemetry: needs the OpenTelemetry SDK, which is not installed: pip install 'llm-proxy[otel]'"
)


def telemetry_problems(config: Config) -> list[str]:
    """What keeps ``config``'s telemetry from starting: the SDK missing, or ``OTEL_*``
    environment variables its batch processor refuses; empty when none is configured."""
    if config.telemetry is None:
        return []
    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        try:
            if find_spec(module) is None:
                return [MISSING_SDK]
        except ModuleNotFoundError:  # a parent package is missing
            return [MISSING_SDK]
    from proxy.ops.telemetry.setup import batch_problems

    return batch_problems()
