"""The proxy's errors told in Anthropic's envelope (sans-IO).

``{"type": "error", "error": {"type", "message"}}``, with the status and type that Anthropic's
API gives for the same failure (https://docs.anthropic.com/en/api/errors), so that its SDKs
raise the exception class they would raise against Anthropic, and retry where they would:

    status                                   type
    400 (and every other 4xx but these)      invalid_request_error
    401                                      authentication_error
    402                                      billing_error
    403                                      permission_error
    404                                      not_found_error
    413                                      request_too_large
    429                                      rate_limit_error
    500, 502 (and every other 5xx)           api_error
    504                                      timeout_error
    529 (our 503, an upstream's 503 or 529)  overloaded_error

The status is the one ``ProxyError.http_status`` gives (as on the chat endpoint), but for an
overloaded or unavailable upstream: Anthropic says 529 where OpenAI's clients are told 503.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.core.errors import ProxyError, UpstreamStatusError

__all__ = [
    "OVERLOADED",
    "anthropic_status",
    "body_event",
    "encode_event",
    "error_event",
    "error_payload",
    "error_reply",
]

OVERLOADED: Final = 529  # not an IANA status: Anthropic's "overloaded_error"
_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    504: "timeout_error",
    OVERLOADED: "overloaded_error",
}
# A chat error body's type (proxy.core.errors) -> Anthropic's, for an error known only by its
# body: a whole canonical stream's error frame.
_BY_OPENAI_TYPE: Final = {
    "invalid_request_error": "invalid_request_error",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "rate_limit_error": "rate_limit_error",
    "service_unavailable": "overloaded_error",
    "timeout_error": "timeout_error",
}


def anthropic_status(exc: ProxyError) -> tuple[int, str]:
    """The status and Anthropic error type for ``exc``."""
    status = exc.http_status
    if status == 503 or (isinstance(exc, UpstreamStatusError) and exc.upstream_status == 503):
        # Unavailable or overloaded (Anthropic's 529 is our 503 already): Anthropic's SDKs
        # retry a 529 as they would against Anthropic itself.
        status = OVERLOADED
    kind = _TYPES.get(status)
    if kind is None:
        kind = "invalid_request_error" if 400 <= status < 500 else "api_error"
    return status, kind


def error_payload(kind: str, message: str) -> dict[str, Any]:
    """Anthropic's error envelope."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_reply(exc: ProxyError) -> tuple[int, bytes]:
    """The status and JSON body of an HTTP error answer for ``exc``."""
    status, kind = anthropic_status(exc)
    return status, orjson.dumps(error_payload(kind, exc.message))


def error_event(exc: ProxyError) -> bytes:
    """The ``error`` event that ends a stream failing after its first byte."""
    return encode_event("error", error_payload(anthropic_status(exc)[1], exc.message))


def body_event(body: object) -> bytes:
    """The ``error`` event for a chat ``ErrorResponse`` body (or its ``error`` object)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    error = body if isinstance(body, dict) else {}
    kind = _BY_OPENAI_TYPE.get(str(error.get("type")), "api_error")
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = "The upstream failed"
    return encode_event("error", error_payload(kind, message))


def encode_event(name: str, payload: dict[str, Any]) -> bytes:
    """One event as Anthropic writes it: its type on the ``event:`` line, one ``data:`` line."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
