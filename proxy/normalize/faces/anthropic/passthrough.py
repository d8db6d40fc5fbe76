"""An Anthropic upstream's own Messages answers, relayed to the Anthropic face (sans-IO).

For a provider with ``api: anthropic`` the client's Messages request goes on as it came (but
for ``model``), and the answer comes back as Anthropic sent it: each event's name and data
bytes unchanged, but for ``message_start``, whose ``message.model`` is the name the client sent,
and ``error`` events, whose texts are redacted. Nothing is translated, so nothing is lost
(signatures, citations, server tools' blocks, fields added since).

What the stream is held to: the client gets one ``message_start`` (a repeat of it is dropped,
as the upstream dialect drops it; a second message after the first one's blocks is an
upstream retry spliced in, and fails the stream), and exactly one end: ``message_stop``, or an
``error`` event, which the proxy writes when the upstream's stream stops before its
``message_stop``. Usage is metered from ``message_start`` and ``message_delta`` (cumulative
counts, the latter's winning), as canonical counts (dialects/anthropic.py ``openai_usage``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from proxy.core.errors import ProxyError, UpstreamProtocolError
from proxy.core.exchange import Answered
from proxy.core.sse import Event
from proxy.core.usage import (
    Usage,
    canonical_usage,
    estimate_tokens,
    estimated_usage,
    prompt_chars,
    usage_value,
)
from proxy.normalize import ApiFamily
from proxy.normalize.dialects.anthropic import openai_usage
from proxy.normalize.faces.anthropic.errors import error_event
from proxy.normalize.fields import (
    RequestContext,
    upstream_error,
    upstream_model,
    upstream_object,
)
from proxy.normalize.whole import Normalized

__all__ = ["ANTHROPIC_PASSTHROUGH", "AnthropicPassthrough", "passthrough_message"]

# Events relayed as they came without a look inside: nearly all of a stream.
_OPAQUE: Final = frozenset(
    {"content_block_delta", "content_block_start", "content_block_stop", "ping"}
)
_COUNTS: Final = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)
# An error event's type -> the status Anthropic answers it with: what the failure is counted
# as, and the HTTP error a client gets when the event is the first thing the upstream said.
_STATUSES: Final = {
    "invalid_request_error": 400,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "overloaded_error": 529,
}
_CUT_SHORT: Final = "The upstream's stream ended before the message was complete"
_SPLICED: Final = "The upstream began a second message within the same stream"


def _frame(name: str, data: bytes) -> bytes:
    if b"\n" in data:  # several data: lines, joined with LF by the decoder: as they came
        data = data.replace(b"\n", b"\ndata: ")
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def _metered(counts: Mapping[str, object], ctx: RequestContext) -> Usage:
    usage = canonical_usage(openai_usage(counts), lambda: estimate_tokens(prompt_chars(ctx.prompt)))
    if usage is None:  # no counts came (the stream failed early): metered as an estimate
        return estimated_usage(prompt_chars(ctx.prompt), 0, 0)
    return usage_value(usage)


def _stop_reasons(delta: object) -> tuple[str, ...]:
    """A message's ``stop_reason`` as Anthropic said it (``end_turn``, ``max_tokens``, ...)."""
    reason = delta.get("stop_reason") if isinstance(delta, dict) else None
    return (reason,) if type(reason) is str else ()


class AnthropicPassthrough:
    """An Anthropic upstream's stream, relayed event by event (the relay's ``EventStream``)."""

    __slots__ = (
        "_counts",
        "_ctx",
        "_id",
        "_model",
        "_said",
        "_started",
        "_stops",
        "ended",
        "error",
        "fixes",
    )

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx
        self.ended = False  # message_stop or an error event was relayed
        self.error: ProxyError | None = None
        self.fixes: set[str] = set()  # the upstream speaks the client's API: nothing to fix
        self._started = False  # message_start was relayed
        self._said = False  # a content block was relayed
        self._id: object = None
        self._model: str | None = None  # the upstream's, as message_start said it
        self._stops: tuple[str, ...] = ()
        self._counts: dict[str, object] = {}

    @property
    def usage(self) -> Usage:
        return _metered(self._counts, self._ctx)

    @property
    def answered(self) -> Answered:
        message_id = self._id if type(self._id) is str else None
        return Answered(message_id, self._model, self._stops)

    def feed(self, event: Event) -> list[bytes]:
        if self.ended:
            return []
        name, data = event.event, event.data
        if name in _OPAQUE:
            self._said = self._said or name == "content_block_start"
            return [_frame(name, data)]
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            if not data.strip() or data.strip() == b"[DONE]":
                return []  # a blank event; an OpenAI-style end some compatible servers add
            return self.fail(UpstreamProtocolError("The upstream sent an event that is not JSON"))
        if not isinstance(payload, dict):
            return self.fail(
                UpstreamProtocolError("The upstream sent an event that is not an object")
            )
        kind = payload.get("type")
        if name == "message" and isinstance(kind, str):
            name = kind  # no event: line: named by its type, as Anthropic names its events
            if name in _OPAQUE:
                return self.feed(Event(data, name))
        if name == "message_start":
            return self._message_start(payload)
        if name == "message_delta":
            self._take_counts(payload.get("usage"))
            self._stops = _stop_reasons(payload.get("delta")) or self._stops
        elif name == "message_stop":
            self.ended = True
        elif name == "error":
            return self._error(payload, data)
        return [_frame(name, data)]

    def finish(self) -> list[bytes]:
        """The upstream's body ended: an error event if it never said the message was done."""
        if self.ended:
            return []
        return self.fail(UpstreamProtocolError(_CUT_SHORT))

    def fail(self, exc: ProxyError) -> list[bytes]:
        """End the client's stream with one error event (the only frame if nothing was sent:
        the relay then answers with an HTTP error)."""
        if self.ended:
            return []
        self.ended = True
        self.error = exc
        if self._ctx.redact is not None:  # the upstream's words, on their way to the client
            self._ctx.redact.error(exc)
        return [error_event(exc)]

    def _message_start(self, payload: dict[str, Any]) -> list[bytes]:
        message = payload.get("message")
        if not isinstance(message, dict):
            return self.fail(UpstreamProtocolError("The upstream's message_start has no message"))
        if self._started:
            if self._said and message.get("id") != self._id:
                # An upstream retry spliced into the body: its blocks would follow the first
                # attempt's, mixed into one message.
                return self.fail(UpstreamProtocolError(_SPLICED))
            if message.get("id") != self._id:
                self._counts.clear()  # the first said nothing: the second is the answer
                self._take_counts(message.get("usage"))
            return []  # the client has its message_start (SOURCES.md, duplicate-message-start)
        self._started = True
        self._id = message.get("id")
        self._take_counts(message.get("usage"))
        self._model = upstream_model(message)
        message["model"] = self._ctx.model
        return [_frame("message_start", orjson.dumps(payload))]

    def _error(self, payload: dict[str, Any], data: bytes) -> list[bytes]:
        error = payload.get("error")
        redact = self._ctx.redact
        if redact is not None and isinstance(error, dict):
            # The upstream's words, on their way to the client; the event's bytes stay as
            # they came unless a secret was in them.
            said = dict(error)
            redact.error_object(error)
            if error != said:
                data = orjson.dumps(payload)
        kind = error.get("type") if isinstance(error, dict) else None
        self.error = upstream_error(
            error, _STATUSES.get(kind, 502) if isinstance(kind, str) else 502
        )
        if redact is not None:
            redact.error(self.error)
        self.ended = True
        return [_frame("error", data)]

    def _take_counts(self, usage: object) -> None:
        if isinstance(usage, dict):
            for key in _COUNTS:
                value = usage.get(key)
                if type(value) is int and value >= 0:
                    self._counts[key] = value


def passthrough_message(raw: bytes, ctx: RequestContext) -> Normalized:
    """An Anthropic upstream's whole Message: ``model`` the client's name, usage metered."""
    body = upstream_object(raw)
    if body.get("type") == "error":
        # HTTP 200 and an error: the upstream failed, whatever it says.
        raise upstream_error(body.get("error"))
    model = upstream_model(body)
    body["model"] = ctx.model
    usage = body.get("usage")
    counts = {key: usage.get(key) for key in _COUNTS} if isinstance(usage, dict) else {}
    message_id = body.get("id")
    return Normalized(
        orjson.dumps(body),
        _metered(counts, ctx),
        frozenset(),
        message_id if type(message_id) is str else None,
        model,
        _stop_reasons(body),
    )


# How an ``api: anthropic`` provider's answers to a /v1/messages request are read.
ANTHROPIC_PASSTHROUGH: Final = ApiFamily(AnthropicPassthrough, passthrough_message, chat=False)
