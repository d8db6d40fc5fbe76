"""Recorded response bodies, and how a file's name and extension say how to serve it.

A recording is served with the status and content type its name implies, in the units its
format is written in: a whole JSON body at once, an event stream event by event, NDJSON line by
line. Splitting never changes a byte, so the client receives exactly the file (but see
``.eventstream.jsonl`` below).

    name ends in       content type           written as                 status
    .json-array.json   application/json       one chunk per element      200
    .json              application/json       one body (Content-Length)  200, or an error (below)
    .sse               text/event-stream      one chunk per event        200
    .ndjson            application/x-ndjson   one chunk per line         200
    .eventstream.jsonl application/vnd.amazon.eventstream  one frame per line  200
    .eventstream       application/vnd.amazon.eventstream  one chunk per frame 200

An ``.eventstream.jsonl`` recording is the exception to byte-exact serving: Bedrock's binary
frames are kept as readable JSON lines and framed when the recording is loaded (see
``bedrock``); ``body`` is then the frames, so faults cut the binary stream.

A ``.json-array.json`` recording is a stream too: Gemini's ``streamGenerateContent`` without
``alt=sse`` answers with one JSON array whose elements arrive as the model makes them.

A ``.json`` recording whose name has an ``error`` segment replays a provider's error response:
``error.<3-digit code>`` (``gemini.error.429.json``) is served with that status,
``error.overloaded`` (``anthropic.error.overloaded.json``) with Anthropic's 529,
``error.<Bedrock exception>`` (``bedrock.error.ThrottlingException.json``) with its status in
Bedrock's API reference, and any other (``openai.error.json``) with 400. A Bedrock endpoint
sends the exception's type in ``x-amzn-ErrorType``: the segment after the status that names one
(``bedrock.error.429.ModelNotReadyException.json``), else the status's usual type. Streams
named ``...error.sse`` are mid-stream errors, which providers send after a 200, so they keep 200.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from proxy.emulator.bedrock import BEDROCK_STATUSES, frame_lines, split_frames

# The alternation tries CRLF first, so a CR immediately followed by LF is one line ending.
_LINE_ENDING: Final = re.compile(rb"\r\n|\r|\n")

OVERLOADED_STATUS: Final = 529  # Anthropic's "overloaded_error"; not an IANA status.


@dataclass(frozen=True)
class Recording:
    name: str
    status: int
    content_type: str
    streamed: bool
    body: bytes
    events: tuple[bytes, ...]
    """``body`` in the units it is written in: joined, exactly ``body``."""


@dataclass(frozen=True)
class _Format:
    content_type: str
    streamed: bool
    split: Callable[[bytes], tuple[bytes, ...]]


def split_events(data: bytes) -> tuple[bytes, ...]:
    """Split an event stream after each blank line, keeping every byte.

    Lines end in CRLF, LF or CR, and an empty line dispatches an event (WHATWG HTML 9.2.5
    "Parsing an event stream", 9.2.6 "Interpreting an event stream"), so a CRLF file splits
    after each ``\\r\\n\\r\\n``. Comments stay inside their event, and a last event with no
    blank line after it is kept as it is.
    """
    events: list[bytes] = []
    start = line_start = 0
    for ending in _LINE_ENDING.finditer(data):
        if ending.start() == line_start:
            events.append(data[start : ending.end()])
            start = ending.end()
        line_start = ending.end()
    if start < len(data):
        events.append(data[start:])
    return tuple(events)


def split_lines(data: bytes) -> tuple[bytes, ...]:
    """Split NDJSON after each LF, keeping every byte."""
    # Not bytes.splitlines: it also breaks at a bare CR, which NDJSON does not end lines with.
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return tuple(lines)


def split_array(data: bytes) -> tuple[bytes, ...]:
    """Split a JSON array before each top-level comma and before its closing bracket, keeping
    every byte: ``[{..}\r\n``, ``,\r\n{..}\r\n``, ..., ``]``, as Gemini writes it.

    Bytes inside strings are skipped, so a bracket or comma in a text never splits; a body
    that is not an array stays whole.
    """
    if not data.lstrip().startswith(b"["):
        return (data,) if data else ()
    pieces: list[bytes] = []
    start = depth = 0
    in_string = escaped = False
    for index, byte in enumerate(data):
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPENERS:
            depth += 1
        elif byte in _CLOSERS:
            depth -= 1
            if depth == 0 and index > start:
                pieces.append(data[start:index])
                start = index
        elif byte == _COMMA and depth == 1 and index > start:
            pieces.append(data[start:index])
            start = index
    if start < len(data):
        pieces.append(data[start:])
    return tuple(pieces)


_QUOTE: Final = ord('"')
_BACKSLASH: Final = ord("\\")
_COMMA: Final = ord(",")
_OPENERS: Final = frozenset(b"[{")
_CLOSERS: Final = frozenset(b"]}")


def _whole(data: bytes) -> tuple[bytes, ...]:
    return (data,)


# Searched in order: the first ending a name has is its format.
_EVENTSTREAM: Final = "application/vnd.amazon.eventstream"
_FORMATS: Final = (
    (".eventstream.jsonl", _Format(_EVENTSTREAM, streamed=True, split=frame_lines)),
    (".eventstream", _Format(_EVENTSTREAM, streamed=True, split=split_frames)),
    (".json-array.json", _Format("application/json", streamed=True, split=split_array)),
    (".json", _Format("application/json", streamed=False, split=_whole)),
    (".sse", _Format("text/event-stream", streamed=True, split=split_events)),
    (".ndjson", _Format("application/x-ndjson", streamed=True, split=split_lines)),
)

_ERROR_STATUSES: Final = MappingProxyType({"overloaded": OVERLOADED_STATUS})
_DEFAULT_ERROR_STATUS: Final = 400


def is_recording_name(name: str) -> bool:
    """Whether ``name`` can name a recording: a plain file name with a known extension.

    Model names come from clients, so anything that could leave the directory is refused.
    """
    return (
        bool(name)
        and not name.startswith(".")
        and not any(char in name for char in "/\\\0")
        and _format(name) is not None
    )


def recording_status(name: str) -> int:
    """The status a recording is served with (see the module docstring)."""
    segments = name.split(".")
    if segments[-1] != "json" or "error" not in segments[:-1]:
        return 200
    following = segments[segments.index("error") + 1 : -1]
    qualifier = following[0] if following else ""
    if len(qualifier) == 3 and qualifier.isdigit() and 400 <= int(qualifier) <= 599:
        return int(qualifier)
    return _ERROR_STATUSES.get(qualifier, BEDROCK_STATUSES.get(qualifier, _DEFAULT_ERROR_STATUS))


def recording_exception(name: str) -> str | None:
    """The Bedrock exception an error recording's name gives, if any (module docstring)."""
    segments = name.split(".")
    if "error" not in segments[:-1]:
        return None
    named = [s for s in segments[segments.index("error") + 1 : -1] if s.endswith("Exception")]
    return named[0] if named else None


def parse_recording(name: str, data: bytes) -> Recording:
    """A recording named ``name`` with body ``data``; ``name`` must pass ``is_recording_name``."""
    form = _format(name)
    if form is None:
        raise ValueError(f"{name!r} is not a recording's name")
    body_events = form.split(data)
    if form.split is frame_lines:
        data = b"".join(body_events)
    return Recording(
        name=name,
        status=recording_status(name),
        content_type=form.content_type,
        streamed=form.streamed,
        body=data,
        events=body_events,
    )


def content_type(ending: str) -> str:
    """The content type of a recording whose name ends in ``ending`` (``.sse``, ...)."""
    form = _format(f"x{ending}")
    if form is None:
        raise ValueError(f"no recording format ends in {ending!r}")
    return form.content_type


def _format(name: str) -> _Format | None:
    for ending, form in _FORMATS:
        if name.endswith(ending) and len(name) > len(ending):
            return form
    return None
