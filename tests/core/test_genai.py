"""The GenAI semantic conventions' names for what the proxy knows (proxy.core.genai)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.config import Provider
from proxy.core.genai import (
    operation_name,
    provider_name,
    request_attributes,
    server_address,
    span_name,
    upstream,
    usage_attributes,
)
from proxy.core.usage import Usage


@pytest.mark.parametrize(
    ("endpoint", "operation"),
    [
        ("chat", "chat"),
        ("responses", "chat"),
        ("messages", "chat"),
        ("completions", "text_completion"),
        ("embeddings", "embeddings"),
    ],
)
def test_operation_names(endpoint: str, operation: str) -> None:
    assert operation_name(endpoint) == operation


@pytest.mark.parametrize(
    ("api", "base_url", "telemetry_name", "expected"),
    [
        ("openai", "https://api.openai.com/v1", None, "openai"),
        ("openai", "https://my-resource.openai.azure.com/openai/v1", None, "azure.ai.openai"),
        ("openai", "https://x.cognitiveservices.azure.com/openai", None, "azure.ai.openai"),
        ("openai", "https://x.services.ai.azure.com/models", None, "azure.ai.inference"),
        ("anthropic", "https://api.anthropic.com", None, "anthropic"),
        ("anthropic", "http://127.0.0.1:9100", None, "anthropic"),  # the API says it
        ("gemini", "https://generativelanguage.googleapis.com", None, "gcp.gemini"),
        ("gemini", "https://us-central1-aiplatform.googleapis.com/v1", None, "gcp.vertex_ai"),
        ("gemini", "http://127.0.0.1:9100", None, "gcp.gemini"),
        (
            "openai",
            "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1",
            None,
            "aws.bedrock",
        ),
        ("openai", "https://s3.amazonaws.com/x", None, "local"),  # AWS, but not Bedrock
        ("cohere", "https://api.cohere.com", None, "cohere"),
        ("openai", "https://api.cohere.ai/compatibility/v1", None, "cohere"),
        ("openai", "https://api.groq.com/openai/v1", None, "groq"),
        ("openai", "https://api.deepseek.com", None, "deepseek"),
        ("openai", "https://api.mistral.ai/v1", None, "mistral_ai"),
        ("openai", "https://API.OPENAI.COM/v1", None, "openai"),  # hosts are case-blind
        ("openai", "https://notapi.openai.com.evil.example/v1", None, "local"),
        ("openai", "http://vllm.internal:8000/v1", None, "local"),  # its configured name
        ("openai", "http://vllm.internal:8000/v1", "vllm", "vllm"),
        ("openai", "https://api.openai.com/v1", "my_gateway", "my_gateway"),  # the key wins
    ],
)
def test_provider_names(api: str, base_url: str, telemetry_name: str | None, expected: str) -> None:
    provider = Provider("local", api, base_url, telemetry_name=telemetry_name)
    assert provider_name(provider) == expected


@pytest.mark.parametrize(
    ("base_url", "address"),
    [
        ("https://api.openai.com/v1", ("api.openai.com", 443)),
        ("http://127.0.0.1:9100/v1", ("127.0.0.1", 9100)),
        ("http://vllm/v1", ("vllm", 80)),
    ],
)
def test_server_address(base_url: str, address: tuple[str, int]) -> None:
    assert server_address(Provider("p", "openai", base_url)) == address


def test_span_name_is_the_operation_and_the_deployments_model() -> None:
    assert span_name("chat", "gpt-4o-mini") == "chat gpt-4o-mini"
    assert span_name("embeddings", "text-embedding-3-small") == "embeddings text-embedding-3-small"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, {}),
        ({"max_tokens": 100}, {"gen_ai.request.max_tokens": 100}),
        ({"max_completion_tokens": 50, "max_tokens": 9}, {"gen_ai.request.max_tokens": 50}),
        ({"max_output_tokens": 70}, {"gen_ai.request.max_tokens": 70}),
        ({"max_tokens": True}, {}),  # not a count
        ({"temperature": 0}, {"gen_ai.request.temperature": 0.0}),
        ({"temperature": 0.7}, {"gen_ai.request.temperature": 0.7}),
        ({"temperature": "hot"}, {}),
    ],
)
def test_request_attributes(body: dict[str, Any], expected: dict[str, Any]) -> None:
    provider = Provider("emu", "openai", "http://127.0.0.1:9100/v1")
    attributes = request_attributes("responses", upstream(provider), "gpt-4o", body, True)
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "emu",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.stream": True,
        "server.address": "127.0.0.1",
        "server.port": 9100,
        **expected,
    }


def test_usage_attributes() -> None:
    assert usage_attributes(None, None) == {}
    plain = Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15)
    assert usage_attributes(plain, None) == {
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "llm_proxy.usage_source": "upstream",
    }
    full = Usage(10, 5, 15, cached_tokens=4, reasoning_tokens=2, source="estimated")
    assert usage_attributes(full, 0.25) == {
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 4,
        "gen_ai.usage.reasoning.output_tokens": 2,
        "llm_proxy.usage_source": "estimated",
        "llm_proxy.cost_usd": 0.25,
    }
