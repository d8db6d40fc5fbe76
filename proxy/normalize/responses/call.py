"""A Responses API request as the chat pipeline takes it (sans-IO): the chat request it is made,
and what its answer needs to be shown as a Response, or to be passed through whole."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.request import ClientRequest, encode_body, parse_request, read_object
from proxy.normalize.responses.echo import Echo
from proxy.normalize.responses.output import make_id
from proxy.normalize.responses.request import chat_body

__all__ = ["ResponsesCall", "passthrough_body", "responses_request"]


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class ResponsesCall:
    body: dict[str, Any]  # the client's own request, for a provider serving the API itself
    echo: Echo
    response_id: str  # one per request: every attempt's answer carries the same
    created: int


def responses_request(raw: bytes) -> tuple[ClientRequest, ResponsesCall]:
    """The chat request a Responses request body is answered by, and the call's particulars;
    InvalidRequest for what is wrong or needs a stored response (the proxy keeps none)."""
    body = read_object(raw)
    chat, echo = chat_body(body)
    # The chat body is checked as any client's: what it says must be a valid chat request.
    request = parse_request(orjson.dumps(chat), "chat")
    return request, ResponsesCall(body, echo, make_id("resp"), int(time.time()))


def passthrough_body(body: dict[str, Any], upstream_model: str) -> bytes:
    """The client's Responses request for a provider serving it: the upstream model's name."""
    return encode_body({**body, "model": upstream_model})
