"""The GenAI client metrics over OTLP (``metrics: true``): token usage, operation duration and
time to first chunk, per upstream attempt, with the bounded attributes of its span."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.sdk.metrics import MeterProvider

from proxy.core.usage import Usage

# The attributes the metrics carry: bounded, as the Prometheus labels are (never a request id,
# nor a model name a client made up).
METRIC_KEYS = frozenset(
    {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "server.address",
        "server.port",
        "llm_proxy.team",
        "llm_proxy.model",
    }
)
# The buckets the conventions advise for gen_ai.client.token.usage and for the durations.
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
_SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)


class Instruments:
    def __init__(self, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter("llm-proxy")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used by an upstream attempt, by gen_ai.token.type",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of an upstream attempt",
            explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
        )
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            unit="s",
            description="Time from an attempt's request to the first chunk of its stream",
            explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
        )

    def record(
        self,
        attributes: Mapping[str, object],
        seconds: float,
        first_chunk: float | None,
        usage: Usage | None,
        error: str | None,
    ) -> None:
        """One attempt's measures; ``attributes``: its span's (the bounded ones are kept)."""
        labels: dict[str, str | int] = {
            key: value
            for key, value in attributes.items()
            if key in METRIC_KEYS and isinstance(value, str | int)
        }
        if error is not None:
            labels["error.type"] = error
        self.duration.record(max(0.0, seconds), labels)
        if first_chunk is not None:
            self.first_chunk.record(first_chunk, labels)
        if usage is not None:
            self.tokens.record(usage.prompt_tokens, {**labels, "gen_ai.token.type": "input"})
            self.tokens.record(usage.completion_tokens, {**labels, "gen_ai.token.type": "output"})
