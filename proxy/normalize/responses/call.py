"""A Responses API request as the chat pipeline takes it (sans-IO): the chat request it is made,
and what its answer needs to be shown as a Response, or to be passed through whole."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.errors import InvalidRequest
from proxy.core.request import ClientRequest, encode_body, parse_request, read_object
from proxy.normalize.responses import params
from proxy.normalize.responses.echo import Echo
from proxy.normalize.responses.output import make_id
from proxy.normalize.responses.request import CLIENT_NAMES, chat_body, refuse_stateful

__all__ = ["ResponsesCall", "as_responses_refusal", "passthrough_body", "responses_request"]


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class ResponsesCall:
    body: dict[str, Any]  # the client's own request, for a provider serving the API itself
    echo: Echo | None  # None: it cannot be made a chat request (``refusal`` says why)
    response_id: str  # one per request: every attempt's answer carries the same
    created: int
    # Why the chat translation refused it: told only to a deployment that needs it.
    refusal: InvalidRequest | None = None


def responses_request(raw: bytes) -> tuple[ClientRequest, ResponsesCall]:
    """The chat request a Responses request body is answered by, and the call's particulars;
    InvalidRequest for what is wrong or needs a stored response (the proxy keeps none).

    What chat cannot say (a built-in tool, a file by id) may still go to a provider serving the
    Responses API itself: then the request routes by its model and stream alone, and the
    refusal waits for a deployment that needs the translation."""
    body = read_object(raw)
    refuse_stateful(body)
    made, created = make_id("resp"), int(time.time())
    try:
        chat, echo = chat_body(body)
    except InvalidRequest as exc:
        request = _routing_request(body, exc, len(raw))
        return request, ResponsesCall(body, None, made, created, exc)
    # The chat body is checked as any client's: what it says must be a valid chat request.
    request = parse_request(encode_body(chat), "chat")
    # The prompt is reserved for the larger of what may go upstream: the chat request, or
    # the client's own body passed through to a provider serving the Responses API.
    request.size = max(request.size, len(raw))
    return request, ResponsesCall(body, echo, made, created)


def _routing_request(body: dict[str, Any], refusal: InvalidRequest, size: int) -> ClientRequest:
    model, stream = body.get("model"), body.get("stream", False)
    if not isinstance(model, str) or not model or not isinstance(stream, bool | None):
        raise refusal
    stream = bool(stream)
    # Passed through as it is, so reserved for as it says (docs/limits.md).
    ceiling = params.integer(body.get("max_output_tokens"), "max_output_tokens", 1)
    return ClientRequest("chat", body, model, stream, stream, ceiling, 1, body.get("input"), size)


_RENAMED: Final = dict(CLIENT_NAMES)
# In a refusal's text, the names no prose word could be.
_CHAT_NAME: Final = re.compile(
    r"\b(response_format\.json_schema\.|response_format|max_completion_tokens|reasoning_effort)"
)


def as_responses_refusal(refusal: InvalidRequest) -> InvalidRequest:
    """A refusal of the chat request (a deployment's dialect cannot say a parameter), naming
    the Responses parameters the client sent instead of chat's."""
    param = refusal.param
    renamed = None if param is None else _client_name(param)
    if renamed is None or type(refusal) is not InvalidRequest:
        return refusal
    message = refusal.message.replace(f"'{param}'", f"'{renamed}'")
    message = _CHAT_NAME.sub(lambda found: _RENAMED[found.group(1)], message)
    return InvalidRequest(message, param=renamed, code=refusal.code)


def _client_name(param: str) -> str | None:
    if param.startswith("messages"):
        # Not input's index: instructions and some items are messages of their own.
        return "input" if param == "messages" or param[8] in ".[" else None
    for chat, client in CLIENT_NAMES:
        if param == chat or param.startswith(chat if chat[-1] == "." else (chat + ".", chat + "[")):
            return client + param[len(chat) :]
    return None


def passthrough_body(body: dict[str, Any], upstream_model: str) -> bytes:
    """The client's Responses request for a provider serving it: the upstream model's name."""
    return encode_body({**body, "model": upstream_model})
