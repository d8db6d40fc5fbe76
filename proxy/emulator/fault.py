"""Fault specifications: how a test asks the emulator to misbehave.

The proxy forwards only the body's fields, never a client's own headers, so a fault rides in the
model name, ``<model>@<fault>[=<arg>]`` (``claude-sonnet-4@20250514@status=429``), or is
set for a whole endpoint when the app is built (the model's own fault comes first). One fault
per request.

    fault                 the client gets                                        recording
    status=<code>         <code> (400..599), an error body in the provider's own     no
                          envelope (``envelope``); Retry-After: 1 with 429 and 503
    html=<code>           <code> (400..599), text/html error page, as from nginx     no
    reset-after=<n>       200 and the first n bytes of the body, then the            yes
                          connection aborted (no last chunk / short Content-Length)
    stall-after=<n>       200 and the first n bytes, then nothing until shutdown     yes
    slow-first-byte=<s>   nothing for s seconds, then the recording as usual         yes
    hang                  nothing at all until shutdown                              no
    garbage[=<n>]         200 text/event-stream, n (4096) bytes that are not UTF-8   no
    endless               200 and a stream of valid events in the endpoint's own     no
                          dialect and form that never ends, one write per
                          chunk_delay (1 ms without one)
    no-newline            200 text/event-stream "data: " and a line that never ends  no
    not-object            200 application/json ``[1,2,3]``                           no
    wrong-type            200 text/plain ``hello``                                   no

A fault that alters a recording needs one (404 without); the others accept any model name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

GARBAGE_SIZE: Final = 4096


class FaultError(ValueError):
    """A fault specification that cannot be understood."""


@dataclass(frozen=True)
class Fault:
    kind: str
    arg: float | None = None

    @property
    def count(self) -> int:
        """The argument as an integer: a status code or a byte count."""
        return int(self.arg or 0)

    @property
    def needs_recording(self) -> bool:
        """Whether the fault alters a recording rather than replacing it."""
        return self.kind in _ALTERS_RECORDING


def _nothing(text: str | None) -> float | None:
    if text is not None:
        raise FaultError("takes no argument")
    return None


def _status(text: str | None) -> float | None:
    code = _integer(text)
    if not 400 <= code <= 599:
        raise FaultError(f"needs an error status from 400 to 599, not {code}")
    return code


def _byte_count(text: str | None) -> float | None:
    count = _integer(text)
    if count < 0:
        raise FaultError(f"needs a byte count, not {count}")
    return count


def _optional_byte_count(text: str | None) -> float | None:
    return GARBAGE_SIZE if text is None else _byte_count(text)


def _seconds(text: str | None) -> float | None:
    try:
        seconds = float(text or "")
    except ValueError:
        raise FaultError(f"needs a number of seconds, not {text!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise FaultError(f"needs a number of seconds, not {text!r}")
    return seconds


def _integer(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        raise FaultError(f"needs an integer, not {text!r}") from None


# Each fault's argument parser, which raises FaultError for a missing or malformed argument.
_ARGUMENTS: Final[MappingProxyType[str, Callable[[str | None], float | None]]] = MappingProxyType(
    {
        "status": _status,
        "html": _status,
        "reset-after": _byte_count,
        "stall-after": _byte_count,
        "slow-first-byte": _seconds,
        "garbage": _optional_byte_count,
        "hang": _nothing,
        "endless": _nothing,
        "no-newline": _nothing,
        "not-object": _nothing,
        "wrong-type": _nothing,
    }
)
_ALTERS_RECORDING: Final = frozenset({"reset-after", "stall-after", "slow-first-byte"})

FAULT_KINDS: Final = tuple(_ARGUMENTS)


def parse_fault(spec: str) -> Fault:
    """The fault ``spec`` (``kind`` or ``kind=arg``) describes; FaultError if none."""
    kind, equals, text = spec.partition("=")
    parse_argument = _ARGUMENTS.get(kind)
    if parse_argument is None:
        raise FaultError(f"unknown fault {kind!r}; known faults: {', '.join(FAULT_KINDS)}")
    try:
        return Fault(kind, parse_argument(text if equals else None))
    except FaultError as exc:
        raise FaultError(f"fault {kind!r} {exc}") from None


def split_model(model: str) -> tuple[str, str | None]:
    """``model`` without its ``@<fault>`` suffix, and the suffix (None when there is none).

    An ``@`` followed by digits only is part of the name: Vertex AI's Claude models are
    versioned so (``claude-sonnet-4@20250514``), and no fault is a number.
    """
    base, *rest = model.split("@")
    while rest and rest[0].isdigit():
        base = f"{base}@{rest.pop(0)}"
    return base, ("@".join(rest) if rest else None)
