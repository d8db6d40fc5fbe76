"""The OpenTelemetry GenAI semantic conventions' names for what the proxy knows: which
operation a request is, which provider an upstream is, and the attributes of an attempt.

Pure: the spans themselves are made in ``proxy.ops.telemetry``. The names follow the
conventions' registry (https://opentelemetry.io/docs/specs/semconv/gen-ai/), current names only
(``gen_ai.provider.name``, not the older ``gen_ai.system``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from proxy.core.config import Provider
from proxy.core.exchange import Answered
from proxy.core.usage import Usage

Attributes = dict[str, str | bool | int | float | tuple[str, ...]]
# A provider as an attempt's span names it: gen_ai.provider.name, server.address, server.port.
Upstream = tuple[str, str, int]

# gen_ai.operation.name by endpoint: the Responses API is chat, as the Anthropic face is.
OPERATIONS: Final[Mapping[str, str]] = {
    "chat": "chat",
    "responses": "chat",
    "messages": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
}

# Well-known hosts (a suffix of the base URL's host) -> gen_ai.provider.name. Longest first
# where one is a suffix of another.
_HOSTS: Final = (
    ("openai.azure.com", "azure.ai.openai"),
    ("cognitiveservices.azure.com", "azure.ai.openai"),
    ("services.ai.azure.com", "azure.ai.inference"),
    ("models.inference.ai.azure.com", "azure.ai.inference"),
    ("api.openai.com", "openai"),
    ("api.anthropic.com", "anthropic"),
    ("aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("amazonaws.com", "aws.bedrock"),  # bedrock-runtime.{region}.amazonaws.com
    ("api.cohere.com", "cohere"),
    ("api.cohere.ai", "cohere"),
    ("api.groq.com", "groq"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.perplexity.ai", "perplexity"),
    ("api.x.ai", "x_ai"),
)

# A native API whose host is not one of the above is still that provider's API.
_APIS: Final[Mapping[str, str]] = {"anthropic": "anthropic", "cohere": "cohere"}


def operation_name(endpoint: str) -> str:
    return OPERATIONS.get(endpoint, endpoint)


def provider_name(provider: Provider) -> str:
    """``gen_ai.provider.name``: the configured ``telemetry_name``, else what the provider's
    ``api`` and well-known host say it is, else its name in the configuration."""
    if provider.telemetry_name is not None:
        return provider.telemetry_name
    host = (urlsplit(provider.base_url).hostname or "").lower()
    for suffix, name in _HOSTS:
        # A regional host prefixes it with a dash: us-central1-aiplatform.googleapis.com.
        if host == suffix or host.endswith(("." + suffix, "-" + suffix)):
            if name == "aws.bedrock" and "bedrock" not in host:
                continue  # another AWS service
            return name
    if provider.api == "gemini":
        return "gcp.gemini"
    return _APIS.get(provider.api, provider.name)


def server_address(provider: Provider) -> tuple[str, int]:
    """``server.address`` and ``server.port`` of the provider's base URL."""
    parts = urlsplit(provider.base_url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def span_name(endpoint: str, model: str) -> str:
    """A CLIENT span's name: ``{gen_ai.operation.name} {gen_ai.request.model}``."""
    return f"{operation_name(endpoint)} {model}"


def upstream(provider: Provider) -> Upstream:
    return (provider_name(provider), *server_address(provider))


def request_attributes(
    endpoint: str,
    where: Upstream,
    model: str,
    body: Mapping[str, object],
    stream: bool,
) -> Attributes:
    """An attempt's attributes known before it is sent: ``where`` is ``upstream(provider)``,
    ``model`` the deployment's."""
    name, host, port = where
    attributes: Attributes = {
        "gen_ai.operation.name": operation_name(endpoint),
        "gen_ai.provider.name": name,
        "gen_ai.request.model": model,
        "gen_ai.request.stream": stream,
        "server.address": host,
        "server.port": port,
    }
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = body.get("max_output_tokens")  # the Responses API's
    if type(max_tokens) is int:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    temperature = body.get("temperature")
    if type(temperature) in (int, float):
        attributes["gen_ai.request.temperature"] = float(temperature)  # type: ignore[arg-type]
    return attributes


def usage_attributes(usage: Usage | None, cost_usd: float | None) -> Attributes:
    """What an answered attempt consumed: the counts the metrics count, and their cost."""
    if usage is None:
        return {}
    attributes: Attributes = {
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "llm_proxy.usage_source": usage.source,
    }
    if usage.cached_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
    if usage.reasoning_tokens:
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
    if cost_usd is not None:
        attributes["llm_proxy.cost_usd"] = cost_usd
    return attributes


def response_attributes(answered: Answered) -> Attributes:
    """What the answer said of itself: its id, the model the upstream said it used, and how
    each choice ended."""
    attributes: Attributes = {}
    if answered.id is not None:
        attributes["gen_ai.response.id"] = answered.id
    if answered.model is not None:
        attributes["gen_ai.response.model"] = answered.model
    if answered.finish_reasons:
        attributes["gen_ai.response.finish_reasons"] = answered.finish_reasons
    return attributes
