"""Error bodies in each provider's own envelope, for the errors the emulator makes up.

    dialect     body
    openai      {"error": {"message", "type", "param", "code"}}  (also Maritaca's)
    anthropic   {"type": "error", "error": {"type", "message"}}
    gemini      {"error": {"code", "message", "status"}}          (Google's google.rpc.Status)
    cohere      {"message"}
    ollama      {"error": "<message>"}
    tgi         {"error": "<message>", "error_type"}
    bedrock     {"message"}, and the exception's type in the x-amzn-ErrorType header
    vertex-anthropic  Anthropic's for 529 (the model's own overload), else Google's (Vertex's)

Anthropic's ``type``, Google's ``status`` and Bedrock's exception type follow from the HTTP
status as the providers document them (a Bedrock ``code`` ending in ``Exception`` names the
type instead); only OpenAI's body carries the ``type``, ``param`` and ``code`` given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import orjson

from proxy.emulator.bedrock import bedrock_error_type
from proxy.emulator.recording import OVERLOADED_STATUS


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


def error_headers(dialect: str, error: ErrorInfo) -> dict[str, str]:
    """The headers that go with ``error``'s body: Bedrock names the exception in one."""
    if dialect != "bedrock":
        return {}
    return {"x-amzn-ErrorType": bedrock_error_type(bedrock_exception(error))}


def bedrock_exception(error: ErrorInfo) -> str:
    """The Bedrock exception ``error`` is: its ``code`` when that names one, else by status."""
    if error.code is not None and error.code.endswith("Exception"):
        return error.code
    fallback = "InternalServerException" if error.status >= 500 else "ValidationException"
    return _BEDROCK_TYPES.get(error.status, fallback)


_BEDROCK_TYPES: Final = MappingProxyType(
    {
        400: "ValidationException",
        403: "AccessDeniedException",
        404: "ResourceNotFoundException",
        408: "ModelTimeoutException",
        424: "ModelErrorException",
        429: "ThrottlingException",
        500: "InternalServerException",
        503: "ServiceUnavailableException",
    }
)


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


def _bedrock(error: ErrorInfo) -> object:
    return {"message": error.message}


def _vertex_anthropic(error: ErrorInfo) -> object:
    # Vertex answers for Claude in Google's envelope (quota, auth, a bad path), but passes the
    # model's own overloaded_error through as Anthropic wrote it.
    return _anthropic(error) if error.status == OVERLOADED_STATUS else _gemini(error)


_ENVELOPES: Final[MappingProxyType[str, Callable[[ErrorInfo], object]]] = MappingProxyType(
    {
        "bedrock": _bedrock,
        "vertex-anthropic": _vertex_anthropic,
        "openai": _openai,
        "anthropic": _anthropic,
        "gemini": _gemini,
        "cohere": _cohere,
        "ollama": _ollama,
        "tgi": _tgi,
    }
)
