"""What Anthropic's clients get besides ``POST /v1/messages`` itself (docs/anthropic-face.md):
errors in Anthropic's envelope with its headers, the models list in its shape,
``POST /v1/messages/count_tokens``, and the preflights Claude Code sends before any request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Final

import orjson
from aiohttp import web

from proxy.core.errors import (
    InvalidRequest,
    ProxyError,
    UpstreamProtocolError,
    UpstreamTimeout,
    handled,
)
from proxy.core.exchange import Exchange
from proxy.core.limits.admission import prompt_estimate
from proxy.core.request import encode_body, read_object
from proxy.http.completion import anthropic_headers, authorization, read_body
from proxy.http.relay import USAGE_SOURCE
from proxy.http.reply import JsonReply
from proxy.http.state import Runtime, State
from proxy.http.upstream import read_whole
from proxy.normalize.faces.anthropic.errors import error_reply

# The endpoints answered in Anthropic's shape, errors included.
MESSAGES_ENDPOINTS: Final = frozenset({"messages", "count_tokens"})
# Claude Code's preflights (and a HEAD of the Messages path): 200 without a key.
PREFLIGHT: Final = frozenset({"/", "/api/hello", "/v1/messages", "/messages"})


def asks_anthropic(request: web.BaseRequest) -> bool:
    """A request from an Anthropic client: it says which version of the API it speaks."""
    return "anthropic-version" in request.headers


def anthropic_error(exc: ProxyError, headers: Mapping[str, str] | None) -> JsonReply:
    status, body = error_reply(exc)
    return JsonReply(body, status=status, headers=headers)


def models_list(runtime: Runtime, names: Iterable[str]) -> JsonReply:
    """The team's models in Anthropic's list shape (one page: the list is short)."""
    data = [model_object(runtime, name) for name in names]
    return JsonReply(
        orjson.dumps(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )
    )


def model_object(runtime: Runtime, name: str) -> dict[str, object]:
    loaded = datetime.fromtimestamp(runtime.loaded_at, UTC)
    return {
        "type": "model",
        "id": name,
        "display_name": name,
        "created_at": loaded.isoformat().replace("+00:00", "Z"),
    }


async def handle_count_tokens(
    request: web.BaseRequest, state: State, exchange: Exchange
) -> web.StreamResponse:
    """The prompt's tokens: an Anthropic deployment's own count, passed through, when the
    model's first deployment is one; else the proxy's estimate, marked as one."""
    runtime = state.runtime
    config = runtime.config
    team = runtime.keyring.identify(authorization(request, azure=False, anthropic=True))
    exchange.team = team.name
    raw = await read_body(request, config.server.max_body_bytes, config.server.read_timeout)
    body = read_object(raw)
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("model: a model name is required", param="model")
    model = runtime.models.resolve(team, name)
    exchange.model = model.name
    deployment = model.deployments[0]
    provider = config.providers[deployment.provider]
    if provider.api != "anthropic":
        # Its whole body, at about four bytes a token: what limits reserve for a prompt.
        count = prompt_estimate(len(raw), None)
        exchange.status = 200
        return JsonReply(orjson.dumps({"input_tokens": count}), headers={USAGE_SOURCE: "estimated"})
    exchange.provider = provider.name
    target = runtime.targets[provider.name]
    messages = target.destination("chat", deployment.model)
    assert messages is not None and state.client is not None  # every Anthropic target has it
    destination = messages.with_headers(anthropic_headers(request, provider), "/count_tokens")
    sent = encode_body({**body, "model": deployment.model})
    seconds = provider.timeouts.first_byte
    try:
        async with asyncio.timeout(seconds):
            if not target.slots.take():
                await target.slots.wait()
            response = await state.client.send(destination, target, sent, stream=False)
            try:
                answer = await read_whole(response, COUNT_BYTES)
            finally:
                response.close()
    except TimeoutError:
        raise UpstreamTimeout(f"The upstream did not answer within {seconds:g} s") from None
    except ProxyError as exc:
        # Whatever the upstream said, before it is answered (docs/security.md).
        raise runtime.redact.error(handled(exc)) from None
    exchange.status = 200
    return JsonReply(_count_of(answer), headers={USAGE_SOURCE: "upstream"})


# An answer to count_tokens is a few dozen bytes: far more is no count.
COUNT_BYTES: Final = 64 * 1024


def _count_of(answer: bytes) -> bytes:
    """The upstream's count as the client gets it: ``{"input_tokens": n}``, whatever else its
    answer held, which nothing here vouches for."""
    try:
        counted = orjson.loads(answer)
    except orjson.JSONDecodeError:
        counted = None
    tokens = counted.get("input_tokens") if isinstance(counted, dict) else None
    if type(tokens) is not int or tokens < 0:
        raise UpstreamProtocolError("The upstream's count of tokens is not a count")
    return orjson.dumps({"input_tokens": tokens})
