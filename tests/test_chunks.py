"""``proxy.chunks``: chunked bodies taken apart as they arrive, in any pieces.

Each case is fed whole, byte by byte, and split in two at every point: the data and the rest
handed back (from the last chunk's size line on, with whatever came after it in the same read
and the reads not fed) must be the same however it came.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.chunks import MAX_LINE, ChunkDecoder
from proxy.errors import UpstreamProtocolError

LAST = b"0\r\n\r\n"
CASES = [
    # name, body (from a size line on), data, rest
    ("one chunk", b"5\r\nhello\r\n", b"hello", None),
    ("two chunks", b"5\r\nhello\r\n1\r\n!\r\n", b"hello!", None),
    ("an upper-case size", b"A\r\n0123456789\r\n", b"0123456789", None),
    ("a size with leading zeros", b"0005\r\nhello\r\n", b"hello", None),
    ("an extension", b"5;name=value\r\nhello\r\n", b"hello", None),
    ("whitespace before an extension", b"5 \t;x\r\nhello\r\n", b"hello", None),
    ("data holding CRLFs", b"6\r\n\r\n\r\n\r\n\r\n", b"\r\n\r\n\r\n", None),
    ("data that looks like the last chunk", b"5\r\n0\r\n\r\n\r\n" + LAST, b"0\r\n\r\n", LAST),
    ("the last chunk", b"5\r\nhello\r\n" + LAST, b"hello", LAST),
    ("the last chunk alone", LAST, b"", LAST),
    (
        "the last chunk with trailers",
        b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
        b"abc",
        b"0\r\nX-T: 1\r\n\r\n",
    ),
    ("the last chunk with an extension", b"0;end\r\n\r\n", b"", b"0;end\r\n\r\n"),
    ("the last chunk with leading zeros", b"000\r\n\r\n", b"", b"000\r\n\r\n"),
    ("bytes after the end are the parser's", LAST + b"HTTP/1.1", b"", LAST + b"HTTP/1.1"),
    ("a partial size line", b"5\r\nhello\r\n1", b"hello", None),
    ("a partial chunk", b"5\r\nhel", b"hel", None),
    ("a chunk without its CRLF yet", b"5\r\nhello", b"hello", None),
    ("a chunk and its CR", b"5\r\nhello\r", b"hello", None),
    (
        "an event stream",
        b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in (b"data: {}\n\n", b"data: [DONE]\n\n"))
        + LAST,
        b"data: {}\n\ndata: [DONE]\n\n",
        LAST,
    ),
    ("a large chunk", b"10000\r\n" + b"x" * 0x10000 + b"\r\n", b"x" * 0x10000, None),
]
MALFORMED = [
    ("no size", b"\r\nhello\r\n"),
    ("a size that is not hexadecimal", b"g\r\nhello\r\n"),
    ("a size with a sign", b"+5\r\nhello\r\n"),
    ("a size with a 0x", b"0x5\r\nhello\r\n"),
    ("whitespace before the size", b" 5\r\nhello\r\n"),
    ("a size of 16 digits", b"1000000000000000\r\n"),
    ("a size line ended by a bare LF", b"5\nhello\r\n"),
    ("a bare CR in a size line", b"5\r;x\r\nhello\r\n"),
    ("data longer than its size", b"3\r\nhello\r\n"),
    ("data shorter than its size", b"6\r\nhello\r\n0\r\n\r\n"),
    ("data without its CRLF", b"5\r\nhelloXY"),
    ("data with a bare LF after it", b"5\r\nhello\n\n"),
    ("a size line too long", b"5;" + b"x" * MAX_LINE + b"\r\n"),
    ("a size line too long, with no end yet", b"5;" + b"x" * MAX_LINE),
]


def splits(body: bytes) -> Iterator[list[bytes]]:
    """``body`` whole, byte by byte, and in two at every point."""
    yield [body]
    yield [body[i : i + 1] for i in range(len(body))]
    if len(body) < 2000:
        for i in range(1, len(body)):
            yield [body[:i], body[i:]]


def decoded(pieces: list[bytes]) -> tuple[bytes, bytes | None]:
    decoder = ChunkDecoder()
    data = []
    for index, piece in enumerate(pieces):
        got, rest = decoder.feed(piece)
        data.append(got)
        if rest is not None:
            return b"".join(data), rest + b"".join(pieces[index + 1 :])
    return b"".join(data), None


@pytest.mark.parametrize(
    ("body", "data", "rest"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_body_in_any_pieces_gives_the_same_data_and_rest(
    body: bytes, data: bytes, rest: bytes | None
) -> None:
    for pieces in splits(body):
        assert decoded(pieces) == (data, rest), [len(p) for p in pieces]


@pytest.mark.parametrize("body", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_framing_is_refused_in_any_pieces(body: bytes) -> None:
    for pieces in splits(body):
        with pytest.raises(UpstreamProtocolError):
            decoded(pieces)


def test_a_boundary_is_only_between_chunks() -> None:
    decoder = ChunkDecoder()
    assert decoder.at_boundary
    for piece, at_boundary in [
        (b"5", False),
        (b"\r\n", False),
        (b"hel", False),
        (b"lo\r", False),
        (b"\n", True),
        (b"1\r\n!\r\n", True),
        (b"2\r\nab\r\n3\r", False),
    ]:
        decoder.feed(piece)
        assert decoder.at_boundary is at_boundary, piece


def test_nothing_is_taken_after_the_end() -> None:
    decoder = ChunkDecoder()
    assert decoder.feed(LAST) == (b"", LAST)
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(b"5\r\nhello\r\n")


def test_a_read_of_one_whole_chunk_is_sliced_once() -> None:
    """The usual read of a stream, one event in one chunk: its data is one slice of it."""
    event = b"data: {}\n\n"
    data, rest = ChunkDecoder().feed(b"a\r\n" + event + b"\r\n")
    assert data == event and rest is None
