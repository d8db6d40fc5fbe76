"""Error bodies in each provider's own envelope, for the errors the emulator makes up.

    dialect     body
    openai      {"error": {"message", "type", "param", "code"}}  (also Maritaca's)
    anthropic   {"type": "error", "error": {"type", "message"}}
    gemini      {"error": {"code", "message", "status"}}          (Google's google.rpc.Status)
    cohere      {"message"}
    ollama      {"error": "<message>"}
    tgi         {"error": "<message>", "error_type"}

Anthropic's ``type`` and Google's ``status`` follow from the HTTP status as the providers
document them; only OpenAI's body carries the ``type``, ``param`` and ``code`` given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import orjson


@dataclass(frozen=True)
class ErrorInfo:
    status: int
    message: str
    type: str = "invalid_request_error"
    """OpenAI's error type."""
    param: str | None = None
    code: str | None = None


def error_body(dialect: str, error: ErrorInfo) -> bytes:
    """``error`` in ``dialect``'s envelope (OpenAI's for a dialect not in the table above)."""
    return orjson.dumps(_ENVELOPES.get(dialect, _openai)(error))


def _openai(error: ErrorInfo) -> object:
    fields = {"message": error.message, "type": error.type, "param": error.param}
    return {"error": {**fields, "code": error.code}}


# https://docs.claude.com/en/api/errors ("HTTP errors"): other 4xx are invalid_request_error.
_ANTHROPIC_TYPES: Final = MappingProxyType(
    {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        529: "overloaded_error",
    }
)


def _anthropic(error: ErrorInfo) -> object:
    fallback = "api_error" if error.status >= 500 else "invalid_request_error"
    kind = _ANTHROPIC_TYPES.get(error.status, fallback)
    return {"type": "error", "error": {"type": kind, "message": error.message}}


# google.rpc.Code by the HTTP status it maps to (googleapis google/rpc/code.proto).
_GOOGLE_STATUSES: Final = MappingProxyType(
    {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        409: "ABORTED",
        429: "RESOURCE_EXHAUSTED",
        499: "CANCELLED",
        500: "INTERNAL",
        501: "UNIMPLEMENTED",
        503: "UNAVAILABLE",
        504: "DEADLINE_EXCEEDED",
    }
)


def _gemini(error: ErrorInfo) -> object:
    fallback = "INTERNAL" if error.status >= 500 else "FAILED_PRECONDITION"
    status = _GOOGLE_STATUSES.get(error.status, fallback)
    return {"error": {"code": error.status, "message": error.message, "status": status}}


def _cohere(error: ErrorInfo) -> object:
    return {"message": error.message}


def _ollama(error: ErrorInfo) -> object:
    return {"error": error.message}


def _tgi(error: ErrorInfo) -> object:
    # TGI's router names the kind: "validation" (422), "overloaded" (429), "generation".
    if error.status == 429:
        kind = "overloaded"
    else:
        kind = "generation" if error.status >= 500 else "validation"
    return {"error": error.message, "error_type": kind}


_ENVELOPES: Final[MappingProxyType[str, Callable[[ErrorInfo], object]]] = MappingProxyType(
    {
        "openai": _openai,
        "anthropic": _anthropic,
        "gemini": _gemini,
        "cohere": _cohere,
        "ollama": _ollama,
        "tgi": _tgi,
    }
)
