"""Streams that are not Server-Sent Events, cut into the same ``Event`` values (sans-IO).

Ollama's native API streams newline-delimited JSON (``application/x-ndjson``), Bedrock AWS
event stream frames (``proxy.core.eventstream``); Gemini, asked
without ``alt=sse``, streams one JSON array whose elements arrive one by one
(fixtures/providers/SOURCES.md, section A). Both decoders take reads of any size and boundary,
like ``SSEDecoder``, and bound one object to ``max_event_bytes``.
"""

from __future__ import annotations

from typing import Protocol

from proxy.core.errors import UpstreamProtocolError
from proxy.core.eventstream import CONTENT_TYPE as EVENT_STREAM
from proxy.core.eventstream import EventStreamDecoder
from proxy.core.sse import Event, SSEDecoder

__all__ = ["Decoder", "JSONArrayDecoder", "NDJSONDecoder", "decoder_for"]

_MAX_EVENT = 1 << 20


class Decoder(Protocol):
    def feed(self, data: bytes) -> list[Event]: ...

    def close(self) -> list[Event]: ...


def _too_large(limit: int) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"The upstream sent an event larger than {limit} bytes")


class NDJSONDecoder:
    """One event per non-blank line; a last line without its LF is one too."""

    def __init__(self, max_event_bytes: int = _MAX_EVENT) -> None:
        self._max = max_event_bytes
        # Reads that have not yet ended a line: joined once its LF comes, so a long line in
        # many small reads is copied once, not once per read.
        self._tail: list[bytes] = []
        self._tail_len = 0

    def feed(self, data: bytes) -> list[Event]:
        end = data.rfind(b"\n")
        if end < 0:
            self._tail.append(data)
            self._tail_len += len(data)
            if self._tail_len > self._max:
                raise _too_large(self._max)
            return []
        buf = b"".join((*self._tail, data)) if self._tail else data
        end += len(buf) - len(data)
        rest = buf[end + 1 :]
        self._tail = [rest] if rest else []
        self._tail_len = len(rest)
        if self._tail_len > self._max:
            raise _too_large(self._max)
        return [self._event(line) for line in buf[:end].split(b"\n") if line.strip()]

    def close(self) -> list[Event]:
        tail = b"".join(self._tail)
        self._tail, self._tail_len = [], 0
        return [self._event(tail)] if tail.strip() else []

    def _event(self, line: bytes) -> Event:
        if len(line) > self._max:
            raise _too_large(self._max)
        return Event(line.rstrip(b"\r"))


# Bytes that open and close a JSON value; strings are skipped with their escapes.
_OPEN = frozenset(b"{[")
_CLOSE = frozenset(b"}]")
_QUOTE = 0x22
_BACKSLASH = 0x5C


class JSONArrayDecoder:
    """The elements of one top-level JSON array, each an event as soon as it is complete.

    Only the array's structure is followed (depth, strings, escapes); each element's bytes go to
    the normalizer whole, which parses them as it parses any event. Bytes outside the array
    (whitespace, the commas between elements) are skipped; anything else is the upstream's
    error, told by the normalizer when it cannot parse what it is given.
    """

    def __init__(self, max_event_bytes: int = _MAX_EVENT) -> None:
        self._max = max_event_bytes
        self._started = False  # the array's "[" has come
        self._depth = 0  # inside an element: its nesting depth (1 = the element's own braces)
        self._in_string = False
        self._escaped = False
        self._element: list[bytes] = []  # the current element's bytes so far
        self._size = 0
        self._broken = False  # something not an array came: handed on once, then ignored

    def feed(self, data: bytes) -> list[Event]:
        if self._broken:
            return []
        events: list[Event] = []
        start = 0  # where the current element's bytes begin in this read, if one is open
        i = 0
        n = len(data)
        while i < n:
            byte = data[i]
            if self._depth:
                if self._in_string:
                    if self._escaped:
                        self._escaped = False
                    elif byte == _BACKSLASH:
                        self._escaped = True
                    elif byte == _QUOTE:
                        self._in_string = False
                    i += 1
                    continue
                if byte == _QUOTE:
                    self._in_string = True
                elif byte in _OPEN:
                    self._depth += 1
                elif byte in _CLOSE:
                    self._depth -= 1
                    if not self._depth:
                        events.append(self._take(data[start : i + 1]))
                i += 1
                continue
            if not self._started:
                if byte == 0x5B:  # "["
                    self._started = True
                elif byte not in b" \t\r\n":
                    return self._stray(events, data[i:])
            elif byte in _OPEN:
                self._depth = 1
                start = i
            elif byte == _QUOTE or byte not in b" \t\r\n,]":
                # A scalar element: no Gemini answer has one; the normalizer refuses it.
                return self._stray(events, data[i:])
            i += 1
        if self._depth:
            self._element.append(data[start:])
            self._size += n - start
            if self._size > self._max:
                raise _too_large(self._max)
        return events

    def close(self) -> list[Event]:
        if self._depth and not self._broken:
            return [Event(b"".join(self._element))]  # cut short: the normalizer says so
        return []

    def _stray(self, events: list[Event], rest: bytes) -> list[Event]:
        # Not an array: the normalizer, failing to read it as an object, ends the stream.
        self._broken = True
        events.append(Event(rest[: self._max]))
        return events

    def _take(self, last: bytes) -> Event:
        if self._element:
            self._element.append(last)
            data = b"".join(self._element)
            self._element.clear()
            self._size = 0
        else:
            data = last
        if len(data) > self._max:
            raise _too_large(self._max)
        return Event(data)


def decoder_for(content_type: str, *, json_array: bool) -> Decoder | None:
    """The decoder for a streamed answer of ``content_type``; None: it is one whole JSON body.

    ``json_array``: the dialect streams a JSON array when it does not stream events (Gemini).
    """
    if content_type == "text/event-stream":
        return SSEDecoder()
    if content_type in ("application/x-ndjson", "application/jsonl", "application/ndjson"):
        return NDJSONDecoder()
    if content_type == EVENT_STREAM:
        return EventStreamDecoder()  # Bedrock's ConverseStream
    if json_array and content_type == "application/json":
        return JSONArrayDecoder()
    return None
