"""What the handler does differently for a request in another API's shape than chat's: the
Responses API (``ResponsesCall``) or Anthropic's Messages API (``MessagesCall``). Each is routed
as the canonical chat request it was made; here, the rest: which providers take it as it came,
its body for them, how their answer is read, and how a translated answer is shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeAlias

from proxy.core.config import Provider
from proxy.core.errors import InvalidRequest
from proxy.core.request import ClientRequest, Endpoint, encode_body, parse_request
from proxy.normalize import API_FAMILIES, DIALECTS, ApiFamily
from proxy.normalize.dialects.anthropic import DIALECT as ANTHROPIC
from proxy.normalize.dialects.vertex import VERTEX_ANTHROPIC, raw_predict_body
from proxy.normalize.faces.anthropic.passthrough import ANTHROPIC_PASSTHROUGH
from proxy.normalize.faces.anthropic.present import MessagesPresenter
from proxy.normalize.faces.anthropic.request import MessagesCall, messages_request
from proxy.normalize.faces.anthropic.request import passthrough_body as messages_body
from proxy.normalize.present import Presenter
from proxy.normalize.responses.call import (
    ResponsesCall,
    as_responses_refusal,
    passthrough_body,
    responses_request,
)
from proxy.normalize.responses.present import PASSTHROUGH, ResponsesPresenter

Call: TypeAlias = ResponsesCall | MessagesCall
# The path a face's request came to, for a refusal's message.
PATHS: Final = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}


# The dialects that speak Anthropic's Messages API: the face's calls go to them as they came.
_MESSAGES_DIALECTS: Final = frozenset({ANTHROPIC.name, VERTEX_ANTHROPIC.name})
_CHAT_APIS: Final[dict[str, Endpoint]] = {
    "chat": "chat",
    "completions": "completions",
    "embeddings": "embeddings",
}


def read_call(
    raw: bytes, endpoint: str, azure_deployment: str | None
) -> tuple[ClientRequest, Call | None]:
    """The request to route, and the face's call it was made from (None: chat's own APIs)."""
    if endpoint == "responses":
        return responses_request(raw)
    if endpoint == "messages":
        return messages_request(raw)
    return parse_request(raw, _CHAT_APIS[endpoint], model=azure_deployment), None


def passes_through(call: Call | None, provider: Provider, dialect: str, model: str) -> bool:
    """Whether ``provider`` takes the call as it came: it speaks the face's API itself (Claude
    on Vertex AI does, in its ``dialect``; Claude on Bedrock, as the upstream ``model``)."""
    if isinstance(call, ResponsesCall):
        return provider.responses
    if isinstance(call, MessagesCall):
        messages = DIALECTS[dialect].messages
        return dialect in _MESSAGES_DIALECTS or (messages is not None and messages.takes(model))
    return False


def upstream_endpoint(call: Call | None, client_request: ClientRequest, through: bool) -> Endpoint:
    """The dialect's endpoint the attempt goes to (an Anthropic provider's chat is Messages)."""
    if through and isinstance(call, ResponsesCall):
        return "responses"
    return client_request.endpoint


def body_as_it_came(call: Call, upstream_model: str, dialect: str) -> bytes:
    if isinstance(call, ResponsesCall):
        return passthrough_body(call.body, upstream_model)
    if dialect == VERTEX_ANTHROPIC.name:
        return encode_body(raw_predict_body(call.body))
    messages = DIALECTS[dialect].messages
    if messages is not None:
        return encode_body(messages.body(call.body))
    return messages_body(call.body, upstream_model)


def refusal_of(call: Call | None, refusal: InvalidRequest) -> InvalidRequest:
    """A refusal of the chat request, in the names of the face's own request."""
    return as_responses_refusal(refusal) if isinstance(call, ResponsesCall) else refusal


def presentation(
    call: Call | None, provider: Provider, through: bool, model: str, keeps: int
) -> tuple[ApiFamily, Presenter | None]:
    """How the answer is read (the provider's API family) and shown to the client: as the
    canonical chat (no presenter), as it came (a pass-through), or in the face's shape.
    ``InvalidRequest``: the face's request could not be made a chat request, and only a
    provider speaking its API could take it."""
    if call is None:
        return API_FAMILIES[provider.api], None
    if through:
        return (PASSTHROUGH if isinstance(call, ResponsesCall) else ANTHROPIC_PASSTHROUGH), None
    presenter = face_presenter(call, model, keeps)
    return API_FAMILIES[provider.api], presenter


def answerable(call: Call | None) -> bool:
    """Whether an answer in the face's shape can be made from a canonical one: not for a call
    that only a provider speaking its API can take."""
    if isinstance(call, MessagesCall):
        return call.refusal is None
    return call is None or call.echo is not None


def face_presenter(call: Call, model: str, keeps: int) -> Presenter:
    """The presenter of the canonical answer in the face's shape; ``InvalidRequest`` for a call
    that only a provider speaking its API can take."""
    if isinstance(call, MessagesCall):
        if call.refusal is not None:
            raise call.refusal
        return MessagesPresenter(message_id=call.message_id, model=model)
    if call.echo is None:
        assert call.refusal is not None
        raise call.refusal
    return ResponsesPresenter(
        call.echo,
        response_id=call.response_id,
        created=call.created,
        model=model,
        limit=keeps,
    )


# The x-ratelimit headers (OpenAI's names) under Anthropic's, for the same counts.
_RATE_NAMES: Final = {
    "x-ratelimit-limit-requests": "anthropic-ratelimit-requests-limit",
    "x-ratelimit-remaining-requests": "anthropic-ratelimit-requests-remaining",
    "x-ratelimit-limit-tokens": "anthropic-ratelimit-tokens-limit",
    "x-ratelimit-remaining-tokens": "anthropic-ratelimit-tokens-remaining",
}


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the x-ratelimit counts also under Anthropic's names."""
    named = dict(headers)
    for name, value in headers.items():
        anthropic = _RATE_NAMES.get(name.lower())
        if anthropic is not None:
            named[anthropic] = value
    return named
