"""Bedrock's wire forms in the emulator: its error types, and its event-stream recordings.

ConverseStream answers ``application/vnd.amazon.eventstream``: binary frames, each a prelude
(lengths, CRC), headers, a JSON payload and a CRC. A recording of one is kept readable as JSON
lines (``.eventstream.jsonl``) and framed with ``proxy.core.eventstream`` when it is loaded:

    {"messageStart": {"role": "assistant"}}           an event: ``:event-type`` messageStart
    {"throttlingException": {"message": "..."}}        a type ending in ``Exception``: an
                                                       exception frame (``:exception-type``)
    {"error": {"code": "...", "message": "..."}}       an error frame (``:error-code``,
                                                       ``:error-message``, empty payload)

The key is the member of the API reference's ``ConverseStreamOutput`` union, the value its
payload. A recording already framed (``.eventstream``, as captured) is served as it is.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

import orjson

from proxy.core.eventstream import encode_event, encode_exception, encode_message

# The Converse and InvokeModel API references' "Errors", with their statuses.
BEDROCK_STATUSES: Final = MappingProxyType(
    {
        "AccessDeniedException": 403,
        "InternalServerException": 500,
        "ModelErrorException": 424,
        "ModelNotReadyException": 429,
        "ModelTimeoutException": 408,
        "ResourceNotFoundException": 404,
        "ServiceQuotaExceededException": 400,
        "ServiceUnavailableException": 503,
        "ThrottlingException": 429,
        "ValidationException": 400,
    }
)
# Refused by AWS's request authentication, before Bedrock itself sees the request.
_AWS_AUTH_ERRORS: Final = frozenset(
    {
        "IncompleteSignatureException",
        "InvalidSignatureException",
        "MissingAuthenticationTokenException",
        "UnrecognizedClientException",
        "ExpiredTokenException",
    }
)
_PRELUDE: Final = 12  # total length, headers length, prelude CRC: 4 bytes each


def bedrock_error_type(exception: str) -> str:
    """The ``x-amzn-ErrorType`` value for ``exception``: the type, then the namespace of the
    service that raised it (clients keep what precedes the colon)."""
    namespace = (
        "com.amazon.coral.service" if exception in _AWS_AUTH_ERRORS else "com.amazon.bedrock"
    )
    return f"{exception}:http://internal.amazon.com/coral/{namespace}/"


def frame_lines(data: bytes) -> tuple[bytes, ...]:
    """The frames of a ``.eventstream.jsonl`` recording, one per non-blank line.

    ValueError for a line that is not an object of one member, or an error without its fields.
    """
    frames = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        item = orjson.loads(line)
        if not isinstance(item, dict) or len(item) != 1:
            raise ValueError(f"line {number}: expected an object of one member")
        ((kind, payload),) = item.items()
        frames.append(_frame(kind, payload, number))
    return tuple(frames)


def split_frames(data: bytes) -> tuple[bytes, ...]:
    """A binary event stream split into its messages by their prelude's total length, keeping
    every byte (what cannot be a whole message stays as one last piece)."""
    pieces = []
    start = 0
    while len(data) - start >= _PRELUDE:
        length = int.from_bytes(data[start : start + 4], "big")
        if length < _PRELUDE or start + length > len(data):
            break
        pieces.append(data[start : start + length])
        start += length
    if start < len(data):
        pieces.append(data[start:])
    return tuple(pieces)


def _frame(kind: str, payload: object, number: int) -> bytes:
    if kind == "error":
        if not isinstance(payload, dict):
            raise ValueError(f"line {number}: an error needs its code and message")
        headers = {
            ":message-type": "error",
            ":error-code": str(payload.get("code", "")),
            ":error-message": str(payload.get("message", "")),
        }
        return encode_message(headers, b"")
    body = orjson.dumps(payload)
    if kind.endswith("Exception"):
        return encode_exception(kind, body)
    return encode_event(kind, body)
