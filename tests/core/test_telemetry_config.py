"""The ``telemetry`` section of the configuration (proxy.core.telemetry_config)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.config import Config, parse_config
from proxy.core.errors import ConfigError
from proxy.core.telemetry_config import Otlp

ENV = {"OTEL_TOKEN": "otel-secret-token", "RATIO": "0.25"}


def _config(telemetry: Any = None, **provider: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "providers": {"p": {"base_url": "http://127.0.0.1:9100/v1", **provider}},
        "models": {"m": {"provider": "p", "model": "x"}},
        "teams": {"t": {"keys": ["sk-team-key-1"], "models": ["*"]}},
    }
    if telemetry is not None:
        raw["telemetry"] = telemetry
    return raw


def _parse(raw: dict[str, Any]) -> Config:
    return parse_config(raw, ENV)


def test_absent_telemetry_is_none() -> None:
    assert _parse(_config()).telemetry is None


def test_every_key() -> None:
    otlp = {
        "endpoint": "http://otel-collector:4318/",
        "headers": {"authorization": "Bearer ${OTEL_TOKEN}"},
        "sample_ratio": "${RATIO}",
        "service_name": "gateway",
        "metrics": True,
        "capture_content": "true",
    }
    config = _parse(_config({"otlp": otlp}))
    assert config.telemetry == Otlp(
        "http://otel-collector:4318",
        {"authorization": "Bearer otel-secret-token"},
        0.25,
        "gateway",
        True,
        True,
    )
    assert config.telemetry.traces_url == "http://otel-collector:4318/v1/traces"
    # The collector's credentials are redacted like a provider's.
    assert "Bearer otel-secret-token" in config.secrets


def test_defaults() -> None:
    config = _parse(_config({"otlp": {"endpoint": "https://collector.example"}}))
    assert config.telemetry == Otlp("https://collector.example")
    assert (config.telemetry.sample_ratio, config.telemetry.service_name) == (1.0, "llm-proxy")
    assert not config.telemetry.metrics and not config.telemetry.capture_content


@pytest.mark.parametrize(
    ("telemetry", "problem"),
    [
        ({}, "telemetry: required key 'otlp' is missing"),
        ({"otlp": {}}, "telemetry.otlp: required key 'endpoint' is missing"),
        ({"jaeger": {}}, "telemetry.jaeger: unknown key"),
        ({"otlp": {"endpoint": "x", "color": 1}}, "telemetry.otlp.color: unknown key"),
        ({"otlp": {"endpoint": "otel:4318"}}, "telemetry.otlp.endpoint: must be an http"),
        ({"otlp": {"endpoint": "grpc://otel:4317"}}, "telemetry.otlp.endpoint: must be an http"),
        (
            {"otlp": {"endpoint": "http://otel:4318/v1/traces"}},
            "telemetry.otlp.endpoint: is the collector's base URL",
        ),
        (
            {"otlp": {"endpoint": "http://u:p@otel:4318"}},
            "telemetry.otlp.endpoint: must not contain credentials",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "sample_ratio": 1.5}},
            "telemetry.otlp.sample_ratio: must be a number from 0 to 1",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "sample_ratio": -0.1}},
            "telemetry.otlp.sample_ratio: must be a number from 0 to 1",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "sample_ratio": "half"}},
            "telemetry.otlp.sample_ratio: must be a number from 0 to 1",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "metrics": "yes"}},
            "telemetry.otlp.metrics: must be true or false",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "service_name": ""}},
            "telemetry.otlp.service_name: must be a non-empty string",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "headers": {"bad name": "x"}}},
            "telemetry.otlp.headers.bad name: not a valid header name",
        ),
        (
            {"otlp": {"endpoint": "http://otel:4318", "headers": {"x-token": "${NOPE}"}}},
            "telemetry.otlp.headers.x-token: environment variable NOPE is not set",
        ),
        ("on", "telemetry: must be a mapping"),
    ],
)
def test_bad_values_are_clear_errors(telemetry: Any, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        _parse(_config(telemetry))
    assert any(p.startswith(problem) for p in error.value.problems), error.value.problems


def test_a_providers_telemetry_name() -> None:
    config = _parse(_config(telemetry_name="my_vllm"))
    assert config.providers["p"].telemetry_name == "my_vllm"
    with pytest.raises(ConfigError) as error:
        _parse(_config(telemetry_name="My vLLM"))
    assert error.value.problems == [
        "providers.p.telemetry_name: must be a lowercase name of letters, digits, '.', '_' or '-'"
    ]
