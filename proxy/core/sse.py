"""Incremental Server-Sent Events decoder, and the one frame the proxy writes.

Sans-IO: ``SSEDecoder.feed(data) -> list[Event]`` takes reads of any size and boundary, and
``close()`` ends the stream. Parsing follows the WHATWG rules for interpreting an event stream,
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
with three deliberate differences, each marked where it happens:

* the stream stays bytes. Lines are split on CR and LF, which never occur inside a UTF-8
  multi-byte sequence, so a read that ends mid-character cannot corrupt anything; ``data``
  stays bytes for orjson, and only ``event`` and ``id`` are decoded (with replacement).
* ``close()`` dispatches an event whose blank line never came, where the spec discards it:
  Perplexity, Anthropic, Gemini and Friendli legacy end their streams that way
  (fixtures/providers/SOURCES.md, section A).
* one event (its pending line plus its data so far) may not exceed ``max_event_bytes``.
"""

from __future__ import annotations

from typing import NamedTuple

from proxy.core.errors import UpstreamProtocolError

__all__ = ["DONE_FRAME", "Event", "SSEDecoder", "encode_data", "is_done"]

DONE_FRAME = b"data: [DONE]\n\n"

_BOM = b"\xef\xbb\xbf"


# The most digits of a retry: field that is read (a year in milliseconds has 11).
_RETRY_DIGITS = 15


class Event(NamedTuple):
    """One dispatched event; ``data`` is its ``data:`` lines joined with LF.

    A named tuple: one is made per relayed event, twice as fast as a frozen dataclass.
    """

    data: bytes
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Turns ``text/event-stream`` bytes, split anywhere, into ``Event`` values."""

    def __init__(self, max_event_bytes: int = 1 << 20) -> None:
        self._max = max_event_bytes
        # Reads that have not yet ended a line; joined once a line end arrives, so a long
        # line delivered in many small reads is copied once, not once per read.
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._bom_checked = False
        # The previous read ended in CR. That CR already ended its line, so an event closed by
        # it is dispatched without waiting for another read; an LF opening this read is then
        # the rest of a CRLF, not a second (blank) line, however the reads split the pair.
        self._after_cr = False
        self._closed = False
        # The event being built: its data lines (joined at dispatch) and their size with LFs.
        self._data: list[bytes] = []
        self._data_len = 0
        self._event = b""
        self._retry: int | None = None
        # The spec's "last event ID buffer": survives dispatch, so it is stream state.
        self._last_id: str | None = None

    def feed(self, data: bytes) -> list[Event]:
        """Decode one read; return the events whose blank line it completed."""
        if self._closed:
            raise ValueError("SSEDecoder.feed() called after close()")
        if not data:
            return []
        if not self._bom_checked:
            # "One leading U+FEFF BYTE ORDER MARK character must be ignored if any are
            # present": hold reads until three bytes show whether one is there.
            data = b"".join(self._tail) + data
            self._tail.clear()
            self._tail_len = 0
            if len(data) < 3 and _BOM.startswith(data):
                self._tail.append(data)
                self._tail_len = len(data)
                return []
            self._bom_checked = True
            if data.startswith(_BOM):
                data = data[3:]
                if not data:
                    return []
        if (
            data.startswith(b"data: ")
            and data.find(b"\n") == len(data) - 2
            and data.endswith(b"\n\n")
            and not self._tail
            and not self._data
            and not self._event
            and self._retry is None
            and b"\r" not in data
        ):
            # The read is one whole event of one data line, nothing pending before it: what an
            # upstream that flushes every event (a slow stream) sends. Its event, without the
            # line-by-line pass (the general path below gives the same). A CR that ended the
            # previous read ended its line; this read does not open with the LF of a CRLF.
            if len(data) - 7 > self._max:
                raise _too_large(self._max)
            self._after_cr = False
            return [Event(data[6:-2], "message", self._last_id, None)]
        if b"\n" not in data and b"\r" not in data:
            # No line ends here: park the read (no copy) until one arrives.
            self._after_cr = False
            self._tail.append(data)
            self._tail_len += len(data)
            self._check_size()
            return []
        if self._tail:
            self._tail.append(data)
            buf = b"".join(self._tail)
            self._tail.clear()
            self._tail_len = 0
        else:
            buf = data
        # bytes.splitlines() splits on exactly CRLF, LF and CR: the spec's three line ends.
        lines = buf.splitlines()
        if self._after_cr and buf.startswith(b"\n"):
            del lines[0]  # the LF half of a CRLF whose CR ended the previous read
        self._after_cr = buf.endswith(b"\r")
        if not self._after_cr and not buf.endswith(b"\n"):
            tail = lines.pop()
            self._tail.append(tail)
            self._tail_len = len(tail)
        events = self._process(lines)
        self._check_size()
        return events

    def close(self) -> list[Event]:
        """End of input: flush an unterminated last line and event; later feeds raise."""
        if self._closed:
            return []
        self._closed = True
        lines = b"".join(self._tail).splitlines()
        self._tail.clear()
        self._tail_len = 0
        # Deviation: the spec discards an event without its blank line at end of stream, but
        # several upstreams end exactly so (SOURCES.md section A); losing their last chunk
        # would lose the finish_reason and usage it carries.
        lines.append(b"")
        return self._process(lines)

    def _process(self, lines: list[bytes]) -> list[Event]:
        # The hot loop: one pass per line, state in locals, written back once at the end.
        events: list[Event] = []
        data = self._data
        data_len = self._data_len
        limit = self._max
        for line in lines:
            if line.startswith(b"data:"):
                # "If value starts with a U+0020 SPACE character, remove it from value."
                value = line[6:] if line.startswith(b" ", 5) else line[5:]
                data.append(value)
                data_len += len(value) + 1
                if data_len > limit:
                    raise _too_large(limit)
            elif not line:
                # Blank line: dispatch. "If the data buffer is an empty string, set the data
                # buffer and the event type buffer to the empty string and return."
                if data:
                    events.append(
                        Event(
                            # Joining with LF is appending value + LF per line and then
                            # removing the last LF, without the extra copy.
                            b"\n".join(data),
                            self._event.decode("utf-8", "replace") if self._event else "message",
                            self._last_id,
                            self._retry,
                        )
                    )
                    data = []
                    data_len = 0
                self._event = b""
                self._retry = None
            elif line[0] == 0x3A:  # ":" opens a comment
                continue
            elif line == b"data":  # no colon: "the field value is the empty string"
                data.append(b"")
                data_len += 1
                if data_len > limit:
                    raise _too_large(limit)
            else:
                self._take_field(line)
        self._data = data
        self._data_len = data_len
        return events

    def _take_field(self, line: bytes) -> None:
        # Every field but "data", which _process handles inline as the hot case. A line with
        # no colon is a field named by the whole line, with an empty value.
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"event":
            self._event = value
        elif name == b"id" and b"\0" not in value:
            # "If the field value does not contain U+0000 NULL, then set the last event ID
            # buffer to the field value. Otherwise, ignore the field."
            self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit() and len(value) <= _RETRY_DIGITS:
            # "If the field value consists of only ASCII digits": bytes.isdigit() is ASCII
            # only, and False for an empty value. Longer than any delay in milliseconds is
            # ignored too: Python refuses int() of over 4,300 digits.
            self._retry = int(value)
        # "Otherwise: The field is ignored." (so are id with NUL and retry with non-digits)

    def _check_size(self) -> None:
        # A line that never ends would otherwise grow the tail without limit.
        if self._tail_len + self._data_len > self._max:
            raise _too_large(self._max)


def _too_large(limit: int) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"upstream sent an event larger than {limit} bytes")


def is_done(data: bytes) -> bool:
    """Whether an event's data is OpenAI's end-of-stream marker, spelled loosely.

    ``data:[DONE]`` and ``data: [DONE] `` both occur (SOURCES.md section A, done-variants).
    """
    return data.strip() == b"[DONE]"


def encode_data(payload: bytes) -> bytes:
    """One unnamed event carrying ``payload``, which must not contain CR or LF."""
    return b"data: " + payload + b"\n\n"
