"""``Dialect``: what one upstream API's module registers.

An OpenAI-compatible dialect only says where its endpoints are, and perhaps how its odd events
and bodies become OpenAI's. A native one (Anthropic's, Gemini's, ...) also builds the upstream's
request from the client's OpenAI request and says how to authenticate; whatever it hands the
tolerant normalizer is OpenAI-shaped, and the normalizer finishes it as any other upstream's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from proxy.core.config import THINKING_BUDGETS
from proxy.core.framing import Decoder
from proxy.core.request import ClientRequest, Endpoint
from proxy.normalize.fields import RequestContext

# (the OpenAI-style chunk for an upstream's event, or None to skip it; whether it ends the stream)
EventAdapter = Callable[[dict[str, Any]], tuple[dict[str, Any] | None, bool]]
# One adapter per stream: a native stream's meaning depends on what came before it.
AdapterFactory = Callable[[RequestContext], EventAdapter]
ResponseAdapter = Callable[[dict[str, Any], RequestContext], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a native request needs beyond the client's body: the model's settings."""

    upstream_model: str
    ask_usage: bool = True  # the provider takes stream_options (OpenAI's dialects only)
    # The token limit sent when the client gives none, to APIs that require one (Anthropic).
    max_tokens: int = 4096
    # reasoning_effort -> a thinking budget in tokens, for APIs that take a budget.
    thinking_budgets: Mapping[str, int] = field(default_factory=lambda: THINKING_BUDGETS)


# The body (as a dict, the caller encodes it) for the upstream; raises InvalidRequest for what
# the upstream cannot do.
RequestBuilder = Callable[[ClientRequest, RequestOptions], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class MessagesThrough:
    """A dialect's paths for Messages calls passed through, and what differs on them."""

    path: str  # after the base URL, ``{model}`` the upstream model
    stream_path: str
    takes: Callable[[str], bool]  # which upstream models speak Messages there
    body: Callable[[dict[str, Any]], dict[str, Any]]  # the client's body as the path takes it
    decoder: Callable[[Decoder], Decoder]  # its stream's events made Anthropic's


def bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    # After the provider's base_url, per endpoint it serves; ``{model}`` is the upstream model.
    paths: Mapping[Endpoint, str]
    # Where a stream is asked for, when not at ``paths`` (Gemini, TGI).
    stream_paths: Mapping[Endpoint, str] = field(default_factory=lambda: MappingProxyType({}))
    # None: the upstream speaks OpenAI's own shape, which the normalizer reads as it is.
    adapter: AdapterFactory | None = None
    adapt_response: ResponseAdapter | None = None
    # None: the client's body goes up as it is but for the model
    # (docs/canonical-output.md section 5).
    request: RequestBuilder | None = None
    # The same two for the embeddings endpoint, where the API has one of its own.
    embed_request: RequestBuilder | None = None
    adapt_embeddings: ResponseAdapter | None = None
    auth: Callable[[str], dict[str, str]] = bearer  # the provider's api_key as headers
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # A stream answered as ``application/json`` is one JSON array arriving piece by piece.
    json_array_stream: bool = False
    # Its events are its own protocol, not an OpenAI stream's quirks: translating them is no fix.
    native: bool = False
    # What of the model's name goes into ``{model}`` unescaped (``urllib.parse.quote``'s safe):
    # Bedrock escapes all, as botocore does for its modelId label (ARNs have ":" and "/").
    model_safe: str = ":@"
    # Its errors are AWS's: typed by the x-amzn-ErrorType header or the body's __type.
    aws_errors: bool = False
    # Where it takes Anthropic's Messages API as it came (the Anthropic face), at paths of its
    # own (Bedrock's InvokeModel for Claude); None: nowhere but ``anthropic``'s own dialects.
    messages: MessagesThrough | None = None


def text_choice(index: object, text: object, ctx: RequestContext) -> dict[str, Any]:
    """A chunk's choice carrying ``text``, in the shape of the client's endpoint."""
    if ctx.endpoint == "chat":
        return {"index": index, "delta": {"content": text}}
    return {"index": index, "text": text}


def stateless(
    adapt: Callable[[dict[str, Any], RequestContext], tuple[dict[str, Any] | None, bool]],
) -> AdapterFactory:
    """The factory for an adapter that needs nothing but the request's context."""

    def factory(ctx: RequestContext) -> EventAdapter:
        return lambda payload: adapt(payload, ctx)

    return factory
