"""Claude on Bedrock for the Anthropic face: the client's own Messages body through InvokeModel
(``POST {base_url}/model/{model}/invoke``) and InvokeModelWithResponseStream
(``/invoke-with-response-stream``), as Anthropic documents Claude on Bedrock (sans-IO).

The body is the Messages request without ``model`` (it is in the URL) and ``stream`` (the path
says it), with ``"anthropic_version": "bedrock-2023-05-31"``. A whole answer is Anthropic's own
message. A stream's event-stream frames are each a ``chunk`` whose ``bytes`` are one of
Anthropic's events, base64-encoded; ``InvokeChunks`` hands the pass-through those events as an
Anthropic stream's would be, and Bedrock's exception frames as Anthropic's ``error`` events.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.core.framing import Decoder
from proxy.core.sse import Event

VERSION: Final = "bedrock-2023-05-31"
_SET_BY_PATH: Final = ("model", "stream", "anthropic_version")
# Bedrock's stream exceptions -> the Anthropic error type a client of the face knows.
_ERROR_TYPES: Final = {
    "throttlingException": "rate_limit_error",
    "serviceUnavailableException": "overloaded_error",
    "modelNotReadyException": "overloaded_error",
    "validationException": "invalid_request_error",
}


def takes(model: str) -> bool:
    """Whether ``model`` is Claude (a model id or an inference profile's: ``anthropic.claude-…``,
    ``us.anthropic.claude-…``); an ARN says nothing of its model, and is translated."""
    return not model.startswith("arn:") and "anthropic.claude" in model


def invoke_body(messages: dict[str, Any]) -> dict[str, Any]:
    body = {key: value for key, value in messages.items() if key not in _SET_BY_PATH}
    return {"anthropic_version": VERSION, **body}


class InvokeChunks:
    """Anthropic's events out of InvokeModelWithResponseStream's frames (``decoder``)."""

    def __init__(self, decoder: Decoder) -> None:
        self._decoder = decoder

    def feed(self, data: bytes) -> list[Event]:
        return [self._event(event) for event in self._decoder.feed(data)]

    def close(self) -> list[Event]:
        return [self._event(event) for event in self._decoder.close()]

    def _event(self, event: Event) -> Event:
        try:
            payload = orjson.loads(event.data)[event.event]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise UpstreamProtocolError("Bedrock sent a frame that is not JSON") from None
        if event.event != "chunk":
            message = payload.get("message") if isinstance(payload, dict) else None
            error = {
                "type": _ERROR_TYPES.get(event.event, "api_error"),
                "message": message if isinstance(message, str) else f"Bedrock: {event.event}",
            }
            return Event(orjson.dumps({"type": "error", "error": error}), "error")
        try:
            inner = base64.b64decode(payload["bytes"], validate=True)
            kind = orjson.loads(inner)["type"]
        except (binascii.Error, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise UpstreamProtocolError("Bedrock sent a chunk that is not an event") from None
        if not isinstance(kind, str):
            raise UpstreamProtocolError("Bedrock sent a chunk that is not an event")
        return Event(inner, kind)
