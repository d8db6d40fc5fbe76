"""AWS event stream messages (``application/vnd.amazon.eventstream``), decoded and encoded
(sans-IO).

Bedrock's ConverseStream answers in these binary frames, not in Server-Sent Events. Each
message is (https://docs.aws.amazon.com/transcribe/latest/dg/event-stream.html)::

    total length (4) | headers length (4) | prelude CRC (4) | headers | payload | message CRC (4)

big-endian, the lengths counting the whole message; the prelude CRC covers the first 8 bytes,
the message CRC everything before it, both the CRC32 of gzip. A header is its name's length (1),
its name, a value type (1) and the value: 0 true, 1 false, 2 byte, 3 short, 4 int, 5 long
(signed, big-endian), 6 byte array and 7 string (a 2-byte length, then the bytes), 8 timestamp
(milliseconds since the epoch, 8 bytes), 9 UUID (16 bytes).

``EventStreamDecoder`` takes reads split anywhere, the prelude and the CRCs included, and makes
each message the ``Event`` an adapter reads: ``{"<type>": <payload>}`` named ``<type>``, where
the type is the ``:event-type`` header of an event and the ``:exception-type`` of an exception
(``throttlingException``); an ``error`` message becomes the ``error`` event that every stream's
error is, ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping
from typing import Final

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.core.sse import Event

__all__ = [
    "CONTENT_TYPE",
    "EventStreamDecoder",
    "HeaderValue",
    "decode_headers",
    "encode_event",
    "encode_exception",
    "encode_message",
]

CONTENT_TYPE: Final = "application/vnd.amazon.eventstream"
HeaderValue = bool | int | bytes | str | uuid.UUID
_PRELUDE: Final = struct.Struct(">III")  # total length, headers length, prelude CRC
_PRELUDE_LEN: Final = 12
_CRC_LEN: Final = 4
_OVERHEAD: Final = _PRELUDE_LEN + _CRC_LEN
_MAX_MESSAGE: Final = 1 << 20
# Fixed-size integer values by type: (size, struct format).
_INTEGERS: Final = {2: (1, ">b"), 3: (2, ">h"), 4: (4, ">i"), 5: (8, ">q"), 8: (8, ">q")}
_STRING: Final = 7
_BYTES: Final = 6
_UUID: Final = 9
# Distinct header blocks remembered per stream: a stream's events repeat a handful of them.
_KNOWN_HEADERS: Final = 32


def _broken(what: str) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"The upstream sent a broken event stream message: {what}")


class EventStreamDecoder:
    """Turns event stream bytes, split anywhere, into ``Event`` values; a message failing its
    CRCs or its lengths, one over ``max_message_bytes``, or one cut short at ``close`` is an
    ``UpstreamProtocolError``."""

    def __init__(self, max_message_bytes: int = _MAX_MESSAGE) -> None:
        self._max = max_message_bytes
        self._buffer = bytearray()
        self._need = _PRELUDE_LEN  # bytes the message being read has, once all have come
        self._headers_len = 0
        # A header block already read -> its event's (name, data prefix): every delta of a
        # stream has the same headers, and reading them is most of a message's cost.
        self._known: dict[bytes, tuple[str, bytes]] = {}

    def feed(self, data: bytes) -> list[Event]:
        buffer = self._buffer
        buffer += data
        if len(buffer) < self._need:
            return []
        events: list[Event] = []
        view = memoryview(buffer)
        start = 0
        try:
            while len(buffer) - start >= self._need:
                if self._need == _PRELUDE_LEN:
                    self._read_prelude(view, start)
                    continue
                end = start + self._need
                events.append(self._message(view, start, end))
                start = end
                self._need = _PRELUDE_LEN
        finally:
            view.release()
        if start:
            del buffer[:start]
        return events

    def close(self) -> list[Event]:
        if self._buffer:
            raise _broken(f"the stream ended {len(self._buffer)} bytes into a message")
        return []

    def _read_prelude(self, view: memoryview, start: int) -> None:
        total, headers_len, crc = _PRELUDE.unpack_from(view, start)
        if zlib.crc32(view[start : start + 8]) != crc:
            raise _broken("its prelude fails its CRC")
        if total < _OVERHEAD or headers_len > total - _OVERHEAD:
            raise _broken(f"lengths {total} and {headers_len} do not fit together")
        if total > self._max:
            raise UpstreamProtocolError(
                f"The upstream sent an event stream message larger than {self._max} bytes"
            )
        self._need = total
        self._headers_len = headers_len

    def _message(self, view: memoryview, start: int, end: int) -> Event:
        body_end = end - _CRC_LEN
        (crc,) = struct.unpack_from(">I", view, body_end)
        if zlib.crc32(view[start:body_end]) != crc:
            raise _broken("it fails its message CRC")
        payload_start = start + _PRELUDE_LEN + self._headers_len
        raw = bytes(view[start + _PRELUDE_LEN : payload_start])
        payload = bytes(view[payload_start:body_end]) or b"{}"
        known = self._known.get(raw)
        if known is None:
            headers = decode_headers(raw)
            if headers.get(":message-type") == "error":
                return _error(headers)
            known = _named(headers)
            if len(self._known) >= _KNOWN_HEADERS:
                self._known.clear()
            self._known[raw] = known
        name, prefix = known
        return Event(prefix + payload + b"}", name)


def _error(headers: Mapping[str, HeaderValue]) -> Event:
    error = {"code": headers.get(":error-code"), "message": headers.get(":error-message")}
    return Event(orjson.dumps({"error": error}), "error")


def _named(headers: Mapping[str, HeaderValue]) -> tuple[str, bytes]:
    """An event's or exception's name, and the start of its ``{"<name>": payload}``."""
    kind = headers.get(":message-type")
    name = headers.get(":exception-type" if kind == "exception" else ":event-type")
    if kind not in ("event", "exception") or not isinstance(name, str) or not name:
        raise _broken(f"a message of type {kind!r} named {name!r}")
    return name, b"{%s:" % orjson.dumps(name)


def decode_headers(data: bytes | memoryview) -> dict[str, HeaderValue]:
    """A message's headers by name, each value of its own type (timestamps as milliseconds)."""
    headers: dict[str, HeaderValue] = {}
    at = 0
    end = len(data)
    try:
        while at < end:
            name_len = data[at]
            name = bytes(data[at + 1 : at + 1 + name_len]).decode()
            at += 1 + name_len
            kind = data[at]
            at += 1
            value: HeaderValue
            if kind in (0, 1):
                value = kind == 0
            elif kind in _INTEGERS:
                size, form = _INTEGERS[kind]
                (value,) = struct.unpack_from(form, data, at)
                at += size
            elif kind in (_BYTES, _STRING):
                (size,) = struct.unpack_from(">H", data, at)
                raw = bytes(data[at + 2 : at + 2 + size])
                if len(raw) != size:
                    raise _broken("a header value runs past its headers")
                value = raw.decode() if kind == _STRING else raw
                at += 2 + size
            elif kind == _UUID:
                raw = bytes(data[at : at + 16])
                if len(raw) != 16:
                    raise _broken("a header value runs past its headers")
                value = uuid.UUID(bytes=raw)
                at += 16
            else:
                raise _broken(f"a header value of unknown type {kind}")
            if at > end:
                raise _broken("a header value runs past its headers")
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError):
        raise _broken("its headers cannot be read") from None
    return headers


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One message with string ``headers`` (type 7) and ``payload``, its CRCs computed."""
    parts = []
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        parts.append(
            struct.pack(">B", len(raw_name))
            + raw_name
            + struct.pack(">BH", _STRING, len(raw_value))
            + raw_value
        )
    encoded = b"".join(parts)
    total = _OVERHEAD + len(encoded) + len(payload)
    prelude = struct.pack(">II", total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return head + struct.pack(">I", zlib.crc32(head))


def encode_event(event_type: str, payload: bytes) -> bytes:
    """An event as AWS sends it (``contentBlockDelta``, ...), its payload JSON."""
    return encode_message(
        {
            ":event-type": event_type,
            ":content-type": "application/json",
            ":message-type": "event",
        },
        payload,
    )


def encode_exception(exception_type: str, payload: bytes) -> bytes:
    """An exception as AWS sends it mid-stream (``throttlingException``, ...)."""
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        payload,
    )
