"""``ChunkDecoder``: an HTTP/1.1 chunked body (RFC 9112, section 7.1) taken apart, sans IO.

``proxy.pipe`` takes a started stream's body straight from its upstream connection with it,
rather than through aiohttp's parser and reader (docs/performance.md), and hands the parser
back the body's last chunk, from its size line on, so that the parser ends the message as it
would have. Fed bytes as they arrive, in any pieces; malformed framing raises
``UpstreamProtocolError``, and is as strict as aiohttp's parser (llhttp): CRLF line ends, a
size of hexadecimal digits, extensions after ``;``.
"""

from __future__ import annotations

import re
from typing import Final

from proxy.errors import UpstreamProtocolError

__all__ = ["MAX_LINE", "ChunkDecoder"]

# The longest size line taken (with its extensions); aiohttp's parser takes lines of 8 KiB, and
# nothing but a size and, rarely, a short extension is ever sent.
MAX_LINE: Final = 4096
# A size of at most 15 hexadecimal digits (llhttp's bound too: its sizes are 64-bit), optional
# whitespace and extensions; the line's CRLF is not part of it.
_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")

_HEX: Final = b"0123456789ABCDEFabcdef"

_LINE: Final = 0  # reading a size line (``_line`` holds what came of it so far)
_DATA: Final = 1  # reading a chunk's data (``_left`` bytes of it to come)
_CR: Final = 2  # the CR after a chunk's data to come
_LF: Final = 3  # the LF after a chunk's data to come
_LAST: Final = 4  # the last chunk's size line was read: the rest is not ours


def _size(line: bytes) -> int:
    """The size of a chunk from its size line (without its CRLF)."""
    if line and len(line) <= 15 and not line.strip(_HEX):
        return int(line, 16)  # the usual line, hexadecimal digits alone: no match needed
    match = _SIZE.fullmatch(line)
    if match is None:
        raise UpstreamProtocolError("The upstream's chunked body has a malformed chunk size")
    return int(match[1], 16)


class ChunkDecoder:
    """Takes chunks apart, from the start of a size line on."""

    __slots__ = ("_left", "_line", "_state")

    def __init__(self) -> None:
        self._state = _LINE
        self._line = b""
        self._left = 0

    @property
    def at_boundary(self) -> bool:
        """Nothing of a chunk is pending: the next byte starts a size line."""
        return self._state == _LINE and not self._line

    @property
    def ended(self) -> bool:
        """The last chunk's size line has come: the rest was handed back."""
        return self._state == _LAST

    def feed(self, data: bytes) -> tuple[bytes, bytes | None]:
        """The chunks' data in ``data``, and None while the body goes on; once the last
        chunk's size line has come, the bytes from its start on (trailers, the final CRLF and
        whatever followed them), which are for aiohttp's parser."""
        if self._state == _LAST:
            raise UpstreamProtocolError("The upstream's chunked body went on after its end")
        pieces: list[bytes] = []
        pos = 0
        end = len(data)
        while pos < end:
            state = self._state
            if state == _LINE:
                partial = self._line
                if partial and partial[-1] == 13 and data[pos] == 10:
                    line = partial[:-1]  # the line's CRLF straddled two reads
                    after = pos + 1
                else:
                    found = data.find(b"\r\n", pos)
                    if found < 0:
                        self._line = partial + data[pos:]
                        if len(self._line) > MAX_LINE:
                            raise UpstreamProtocolError(
                                "The upstream's chunk size line is too long"
                            )
                        break
                    line = partial + data[pos:found] if partial else data[pos:found]
                    after = found + 2
                self._line = b""
                if len(line) > MAX_LINE:
                    raise UpstreamProtocolError("The upstream's chunk size line is too long")
                size = _size(line)
                if not size:
                    self._state = _LAST
                    return _joined(pieces), partial + data[pos:]
                stop = after + size
                if stop + 2 <= end:
                    # The usual read: whole chunks, each with its CRLF.
                    if data[stop : stop + 2] != b"\r\n":
                        raise UpstreamProtocolError("The upstream's chunk is longer than its size")
                    pieces.append(data[after:stop])
                    pos = stop + 2
                    continue
                pos = after
                self._left = size
                self._state = _DATA
            elif state == _DATA:
                take = min(self._left, end - pos)
                pieces.append(data if take == end else data[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _CR
            elif state == _CR:
                if data[pos] != 13:
                    raise UpstreamProtocolError("The upstream's chunk is longer than its size")
                pos += 1
                self._state = _LF
            else:
                if data[pos] != 10:
                    raise UpstreamProtocolError("The upstream's chunk is longer than its size")
                pos += 1
                self._state = _LINE
        return _joined(pieces), None


def _joined(pieces: list[bytes]) -> bytes:
    if len(pieces) == 1:
        return pieces[0]
    return b"".join(pieces)
