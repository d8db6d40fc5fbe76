"""AWS event stream messages (proxy.core.eventstream): every frame fed whole, byte by byte and
split anywhere (the prelude and the CRCs included); broken CRCs, lengths and ends refused."""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import UpstreamProtocolError
from proxy.core.eventstream import (
    CONTENT_TYPE,
    EventStreamDecoder,
    decode_headers,
    encode_event,
    encode_exception,
    encode_message,
)
from proxy.core.framing import decoder_for
from proxy.core.sse import Event


def run(reads: list[bytes], decoder: EventStreamDecoder | None = None) -> list[Event]:
    decoder = decoder or EventStreamDecoder()
    events = [event for read in reads for event in decoder.feed(read)]
    return events + decoder.close()


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


DELTA = b'{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcdefghij"}'
# (frames, the events they make)
FRAMES = [
    (
        encode_event("messageStart", b'{"role":"assistant","p":"abcd"}'),
        [Event(b'{"messageStart":{"role":"assistant","p":"abcd"}}', "messageStart")],
    ),
    (
        encode_event("contentBlockDelta", DELTA),
        [Event(b'{"contentBlockDelta":%s}' % DELTA, "contentBlockDelta")],
    ),
    (
        encode_exception("throttlingException", b'{"message":"Too many requests"}'),
        [
            Event(
                b'{"throttlingException":{"message":"Too many requests"}}',
                "throttlingException",
            )
        ],
    ),
    (
        encode_message(
            {":message-type": "error", ":error-code": "InternalFailure", ":error-message": "x"},
            b"",
        ),
        [Event(b'{"error":{"code":"InternalFailure","message":"x"}}', "error")],
    ),
    # An event without a payload is an empty object (AWS's initial-response, say).
    (
        encode_message({":message-type": "event", ":event-type": "initial-response"}, b""),
        [Event(b'{"initial-response":{}}', "initial-response")],
    ),
    # Two messages in one read, and a multi-byte character.
    (
        encode_event("a", b'{"t":"\xc3\xa9"}') + encode_event("b", b"{}"),
        [Event(b'{"a":{"t":"\xc3\xa9"}}', "a"), Event(b'{"b":{}}', "b")],
    ),
    (b"", []),
]
IDS = ["start", "delta", "exception", "error", "no-payload", "two", "empty"]


@pytest.mark.parametrize(("data", "expected"), FRAMES, ids=IDS)
def test_whole_and_byte_by_byte(data: bytes, expected: list[Event]) -> None:
    assert run([data]) == expected
    assert run(byte_by_byte(data)) == expected


@pytest.mark.parametrize(("data", "expected"), FRAMES, ids=IDS)
def test_split_at_every_position(data: bytes, expected: list[Event]) -> None:
    # Every cut in two: inside the prelude, its CRC, the headers, the payload, the message CRC.
    for cut in range(len(data) + 1):
        assert run([data[:cut], data[cut:]]) == expected, cut


STREAM = b"".join(data for data, _ in FRAMES)
EVENTS = [event for _, events in FRAMES for event in events]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=30))
def test_random_splits(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    assert run([STREAM[a:b] for a, b in itertools.pairwise(points)]) == EVENTS


def test_the_message_layout_is_awss() -> None:
    # The worked example of the AWS SDKs' test suites: an empty message is the 16 bytes of its
    # prelude, prelude CRC and message CRC.
    frame = encode_message({}, b"")
    assert frame == bytes.fromhex("000000100000000005c248eb7d98c8ff")
    frame = encode_message({"content-type": "application/json"}, b'{"foo":"bar"}')
    total, headers_len, prelude_crc = struct.unpack(">III", frame[:12])
    assert (total, headers_len) == (len(frame), 32)
    assert prelude_crc == zlib.crc32(frame[:8])
    assert struct.unpack(">I", frame[-4:])[0] == zlib.crc32(frame[:-4])


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


FRAME = encode_event("contentBlockDelta", DELTA)
BROKEN = [
    ("prelude CRC", _flip(FRAME, 9), "prelude fails its CRC"),
    ("message CRC", _flip(FRAME, len(FRAME) - 1), "message CRC"),
    ("payload", _flip(FRAME, len(FRAME) - 10), "message CRC"),
    ("header", _flip(FRAME, 14), "message CRC"),
    ("total length", _flip(FRAME, 3), "prelude fails its CRC"),
]


@pytest.mark.parametrize(("data", "message"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_flipped_bit_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(UpstreamProtocolError, match=message):
        run([data])
    with pytest.raises(UpstreamProtocolError, match=message):
        run(byte_by_byte(data))


def _prelude(total: int, headers_len: int) -> bytes:
    prelude = struct.pack(">II", total, headers_len)
    return prelude + struct.pack(">I", zlib.crc32(prelude))


@pytest.mark.parametrize(
    ("total", "headers_len"),
    [(15, 0), (0, 0), (20, 5), (100, 200)],
    ids=["under-overhead", "zero", "headers-past-end", "headers-longer"],
)
def test_lengths_that_do_not_fit_are_refused(total: int, headers_len: int) -> None:
    with pytest.raises(UpstreamProtocolError, match="do not fit"):
        run([_prelude(total, headers_len)])


def test_an_over_large_message_is_refused_from_its_prelude() -> None:
    # Refused as soon as its prelude tells its size: nothing of it is buffered.
    decoder = EventStreamDecoder(max_message_bytes=1024)
    with pytest.raises(UpstreamProtocolError, match="larger than 1024 bytes"):
        decoder.feed(_prelude(1025, 0))
    assert run([encode_event("a", b"x" * 900)], EventStreamDecoder(1024))


@pytest.mark.parametrize("cut", [1, 11, 12, 20, len(FRAME) - 1])
def test_a_message_cut_short_is_refused_at_close(cut: int) -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(FRAME + FRAME[:cut]) == [FRAMES[1][1][0]]
    with pytest.raises(UpstreamProtocolError, match=r"ended .* into a message"):
        decoder.close()


def test_a_message_of_no_known_type_is_refused() -> None:
    with pytest.raises(UpstreamProtocolError, match="message of type"):
        run([encode_message({":message-type": "event"}, b"{}")])
    with pytest.raises(UpstreamProtocolError, match="message of type"):
        run([encode_message({":message-type": "gossip", ":event-type": "a"}, b"{}")])


def _header(name: str, kind: int, value: bytes) -> bytes:
    return bytes([len(name)]) + name.encode() + bytes([kind]) + value


ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
HEADERS = [
    (_header("t", 0, b""), True),
    (_header("f", 1, b""), False),
    (_header("b", 2, b"\xff"), -1),
    (_header("s", 3, struct.pack(">h", -300)), -300),
    (_header("i", 4, struct.pack(">i", 70000)), 70000),
    (_header("l", 5, struct.pack(">q", -(2**40))), -(2**40)),
    (_header("a", 6, struct.pack(">H", 3) + b"\x00\x01\x02"), b"\x00\x01\x02"),
    (_header("str", 7, struct.pack(">H", 2) + b"\xc3\xa9"), "é"),
    (_header("ts", 8, struct.pack(">q", 1_700_000_000_123)), 1_700_000_000_123),
    (_header("u", 9, ID.bytes), ID),
]


@pytest.mark.parametrize(("raw", "value"), HEADERS, ids=[str(h[1]) for h in HEADERS])
def test_every_header_type(raw: bytes, value: object) -> None:
    name = raw[1 : 1 + raw[0]].decode()
    assert decode_headers(raw) == {name: value}


def test_headers_of_every_type_in_one_message() -> None:
    raw = b"".join(header for header, _ in HEADERS)
    expected = {h[1 : 1 + h[0]].decode(): value for h, value in HEADERS}
    assert decode_headers(raw) == expected
    typed = (
        raw
        + _header(":message-type", 7, b"\x00\x05event")
        + _header(":event-type", 7, b"\x00\x01e")
    )
    total = 16 + len(typed) + 2
    prelude = _prelude(total, len(typed))
    head = prelude + typed + b"{}"
    frame = head + struct.pack(">I", zlib.crc32(head))
    assert run(byte_by_byte(frame)) == [Event(b'{"e":{}}', "e")]


@pytest.mark.parametrize(
    "raw",
    [
        _header("x", 7, struct.pack(">H", 10) + b"abc"),  # a string past the headers' end
        _header("x", 4, b"\x00\x01"),  # an int cut short
        _header("x", 9, b"\x00" * 8),  # a UUID cut short
        _header("x", 6, b"\x00"),  # a length cut short
        _header("x", 10, b""),  # no such type
        b"\x05ab",  # a name past the end
        _header("x", 7, struct.pack(">H", 1) + b"\xff"),  # not UTF-8
    ],
)
def test_unreadable_headers_are_refused(raw: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="broken event stream"):
        decode_headers(raw)


def test_decoder_for_the_content_type() -> None:
    assert isinstance(decoder_for(CONTENT_TYPE, json_array=False), EventStreamDecoder)


def test_events_parse_as_json() -> None:
    for event in run([STREAM]):
        assert isinstance(orjson.loads(event.data), dict)
