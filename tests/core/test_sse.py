from __future__ import annotations

import base64
import itertools
import random
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import UpstreamProtocolError
from proxy.core.sse import DONE_FRAME, Event, SSEDecoder, encode_data, is_done

FIXTURES = Path(__file__).parents[1] / "fixtures" / "providers"
SSE_FILES = sorted(FIXTURES.glob("*.sse"))
BOM = b"\xef\xbb\xbf"


def decode(reads: list[bytes], max_event_bytes: int = 1 << 20) -> list[Event]:
    decoder = SSEDecoder(max_event_bytes)
    events: list[Event] = []
    for read in reads:
        events += decoder.feed(read)
    return events + decoder.close()


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def byte_by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def reference(stream: bytes) -> list[Event]:
    """The spec's algorithm transcribed line by line, on a whole stream: the oracle."""
    events: list[Event] = []
    data, event_type, last_id, retry = b"", b"", None, None
    if stream.startswith(BOM):
        stream = stream[3:]
    # The final element is the unterminated last line; the extra blank line is our close().
    for line in [*re.split(rb"\r\n|\r|\n", stream), b""]:
        if not line:
            if data:
                event = event_type.decode("utf-8", "replace") or "message"
                events.append(Event(data[:-1], event, last_id, retry))
            data, event_type, retry = b"", b"", None
            continue
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data":
            data += value + b"\n"
        elif name == b"event":
            event_type = value
        elif name == b"id" and b"\0" not in value:
            last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and re.fullmatch(rb"[0-9]+", value):
            retry = int(value)
    return events


# The worked examples of https://html.spec.whatwg.org/multipage/server-sent-events.html
# (sections "Server-sent events: introduction" and "Interpreting an event stream").
SPEC_EXAMPLES = [
    pytest.param(
        b"data: This is the first message.\n\n"
        b"data: This is the second message, it\ndata: has two lines.\n\n"
        b"data: This is the third message.\n\n",
        [
            Event(b"This is the first message."),
            Event(b"This is the second message, it\nhas two lines."),
            Event(b"This is the third message."),
        ],
        id="introduction-three-messages",
    ),
    pytest.param(
        b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n",
        [Event(b"73857293", "add"), Event(b"2153", "remove"), Event(b"113411", "add")],
        id="introduction-add-remove",
    ),
    pytest.param(
        b"data: YHOO\ndata: +2\ndata: 10\n\n", [Event(b"YHOO\n+2\n10")], id="stock-one-event"
    ),
    pytest.param(
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
        b"data:  third event\n\n",
        # "id" with no colon sets the last event ID to the empty string.
        [
            Event(b"first event", id="1"),
            Event(b"second event", id=""),
            Event(b" third event", id=""),
        ],
        id="four-blocks-with-ids",
    ),
    pytest.param(
        b"data\n\ndata\ndata\n\ndata:\n\n",
        [Event(b""), Event(b"\n"), Event(b"")],
        id="empty-data-and-newline",
    ),
    pytest.param(
        b"data:test\n\ndata: test\n\n", [Event(b"test"), Event(b"test")], id="space-optional"
    ),
]


@pytest.mark.parametrize(("stream", "expected"), SPEC_EXAMPLES)
def test_spec_examples(stream: bytes, expected: list[Event]) -> None:
    assert decode([stream]) == expected
    assert decode(byte_by_byte(stream)) == expected
    assert reference(stream) == expected


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(b"data:  third event", id="four-blocks-tail"),
        pytest.param(b"data\n\ndata\ndata\n\ndata:", id="empty-data-tail"),
    ],
)
def test_unterminated_last_event_waits_for_close(stream: bytes) -> None:
    # The spec discards these last blocks ("not followed by a blank line"); close() flushes
    # them instead, because real upstreams end that way (SOURCES.md section A).
    decoder = SSEDecoder()
    pending = decoder.feed(stream)
    flushed = decoder.close()
    assert len(flushed) == 1
    assert pending + flushed == reference(stream)


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        pytest.param(b"data: a\n\ndata: b\n\n", [b"a", b"b"], id="lf"),
        pytest.param(b"data: a\r\n\r\ndata: b\r\n\r\n", [b"a", b"b"], id="crlf"),
        pytest.param(b"data: a\r\rdata: b\r\r", [b"a", b"b"], id="cr"),
        pytest.param(
            b"data: a\r\ndata: b\n\rdata: c\r\r\ndata: d\n\n", [b"a\nb", b"c", b"d"], id="mix"
        ),
        pytest.param(b"data: a\n\r\n\n\r\rdata: b\n\n", [b"a", b"b"], id="blank-lines-collapse"),
        pytest.param(b"data: a:b: c\n\n", [b"a:b: c"], id="colon-in-value"),
        pytest.param(b"data:   a \n\n", [b"  a "], id="one-space-removed"),
        pytest.param(b"data:\tx\n\n", [b"\tx"], id="tab-kept"),
        pytest.param(b"Data: x\n\ndata : y\n\n", [], id="field-names-exact"),
        pytest.param(
            b"data: \xf0\x9f\xa7\xa1 \xff\n\n", [b"\xf0\x9f\xa7\xa1 \xff"], id="bytes-kept"
        ),
        pytest.param(b"data: x\n", [b"x"], id="no-blank-line"),
        pytest.param(b"data: x", [b"x"], id="no-line-end"),
        pytest.param(b"data: x\r", [b"x"], id="trailing-cr"),
    ],
)
def test_line_ends_and_values(stream: bytes, expected: list[bytes]) -> None:
    for reads in ([stream], byte_by_byte(stream)):
        assert [e.data for e in decode(reads)] == expected


def test_cr_then_lf_in_next_read_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []  # a second line end here would dispatch "a"
    assert decoder.feed(b"\n\r") == [Event(b"a\nb")]
    assert decoder.feed(b"\n") == []  # completes the CRLF; not another blank line
    assert decoder.feed(b"data: c\n\n") == [Event(b"c")]
    assert decoder.close() == []


def test_comments_and_unknown_fields_are_ignored() -> None:
    stream = b": ping\n:\nfoo: bar\nnocolon\ndata: x\n: between\n\n: after\n\n"
    assert decode([stream]) == [Event(b"x")]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        pytest.param(b"event: add\ndata: x\n\n", Event(b"x", "add"), id="event"),
        pytest.param(b"event:\ndata: x\n\n", Event(b"x"), id="empty-event-is-message"),
        pytest.param(b"event: \xffx\ndata: x\n\n", Event(b"x", "\ufffdx"), id="event-replacement"),
        pytest.param(b"id: 7\ndata: x\n\n", Event(b"x", id="7"), id="id"),
        pytest.param(b"id: 7\nid: a\0b\ndata: x\n\n", Event(b"x", id="7"), id="id-nul-ignored"),
        pytest.param(b"retry: 3000\ndata: x\n\n", Event(b"x", retry=3000), id="retry"),
        pytest.param(b"retry: 3s\ndata: x\n\n", Event(b"x"), id="retry-non-digits"),
        pytest.param(b"retry: -1\ndata: x\n\n", Event(b"x"), id="retry-sign"),
        pytest.param(b"retry:\ndata: x\n\n", Event(b"x"), id="retry-empty"),
        pytest.param(b"retry: \xef\xbc\x91\ndata: x\n\n", Event(b"x"), id="retry-fullwidth-digit"),
    ],
)
def test_fields(stream: bytes, expected: Event) -> None:
    assert decode([stream]) == [expected]


def test_event_type_and_retry_reset_but_id_persists() -> None:
    stream = b"event: a\nid: 1\nretry: 5\n\ndata: x\n\nevent: b\ndata: y\n\ndata: z\n\n"
    # A block without data dispatches nothing but still resets the event type.
    assert decode([stream]) == [Event(b"x", id="1"), Event(b"y", "b", "1"), Event(b"z", id="1")]


@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        pytest.param([BOM + b"data: x\n\n"], [b"x"], id="whole"),
        pytest.param([b"\xef", b"\xbb", b"\xbf", b"data: x\n\n"], [b"x"], id="split"),
        pytest.param([BOM + BOM + b"data: x\n\n"], [], id="only-one-skipped"),
        pytest.param([b"data: x\n\n" + BOM + b"data: y\n\n"], [b"x"], id="only-at-start"),
        pytest.param([b"\xef\xbb", b"data: x\n\n"], [], id="partial-bom-is-garbage"),
        pytest.param([b"\xef\xbb"], [], id="partial-bom-then-close"),
    ],
)
def test_bom(reads: list[bytes], expected: list[bytes]) -> None:
    assert [e.data for e in decode(reads)] == expected


def test_close_flushes_and_then_refuses_input() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b"') == [Event(b'{"a":1}')]
    assert decoder.feed(b":2}") == []
    assert decoder.close() == [Event(b'{"b":2}')]
    assert decoder.close() == []
    with pytest.raises(ValueError, match="after close"):
        decoder.feed(b"data: x\n\n")


@pytest.mark.parametrize(
    ("reads", "limit"),
    [
        pytest.param([b"data: " + b"x" * 200 + b"\n\n"], 100, id="one-big-line"),
        pytest.param([b"data: " + b"x" * 40 + b"\n"] * 3 + [b"\n"], 100, id="many-data-lines"),
        pytest.param([b"data: " + b"x" * 60] * 2, 100, id="line-never-ends"),
        pytest.param([b":" + b"x" * 50] * 3, 100, id="comment-never-ends"),
        pytest.param([b"data: x\n", b"y" * 100], 100, id="data-plus-pending-line"),
        pytest.param([b"data: " + b"x" * 8 + b"\n", b"data: 1\n\n"], 10, id="limit-plus-one"),
    ],
)
def test_oversized_event_raises(reads: list[bytes], limit: int) -> None:
    with pytest.raises(UpstreamProtocolError, match=f"larger than {limit} bytes"):
        decode(reads, limit)


def test_limit_is_per_event() -> None:
    # Data bytes plus one LF per line: 9 + 1 is exactly the limit, and each event starts over.
    stream = b"data: 123456789\n\n" * 1000
    assert len(decode([stream], 10)) == 1000


def test_never_ending_line_in_small_reads_stays_bounded() -> None:
    decoder = SSEDecoder(max_event_bytes=1 << 16)
    with pytest.raises(UpstreamProtocolError):
        for _ in range(1 << 10):
            decoder.feed(b"data: " + b"x" * 512)


@pytest.mark.parametrize(
    ("data", "done"),
    [
        (b"[DONE]", True),
        (b"[DONE] ", True),
        (b" [DONE]\r", True),
        (b"[DONE]\n", True),
        (b"[done]", False),
        (b"[DONE]x", False),
        (b'"[DONE]"', False),
        (b"", False),
    ],
)
def test_is_done(data: bytes, done: bool) -> None:
    assert is_done(data) is done


@pytest.mark.parametrize("frame", [b"data:[DONE]\n\n", b"data: [DONE] \n\n", DONE_FRAME])
def test_done_spellings_decode_to_done(frame: bytes) -> None:
    [event] = decode([frame])
    assert is_done(event.data)


def test_encode_data_round_trips() -> None:
    assert DONE_FRAME == encode_data(b"[DONE]") == b"data: [DONE]\n\n"
    payload = orjson.dumps({"choices": [{"delta": {"content": "a\nb 🧡"}}]})
    assert decode([encode_data(payload)]) == [Event(payload)]


def test_fixtures_are_present() -> None:
    assert len(SSE_FILES) >= 50
    assert {p.name for p in SSE_FILES} >= {"openai.chat.stream.sse", "sse-quirks.crlf.sse"}


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: p.name)
def test_fixture_replay(path: Path) -> None:
    stream = path.read_bytes()
    expected = decode([stream])
    assert expected, "every recording holds at least one event"
    assert expected == reference(stream)
    for event in expected:
        if not is_done(event.data):
            orjson.loads(event.data)
    assert decode(byte_by_byte(stream)) == expected
    rng = random.Random(path.name)
    for _ in range(200):
        assert decode(split_at(stream, [rng.randrange(len(stream) + 1)])) == expected
    for _ in range(20):
        cuts = rng.sample(range(len(stream) + 1), min(len(stream), 30))
        assert decode(split_at(stream, cuts)) == expected
    # Every single cut position, on a prefix so large recordings stay quick.
    prefix = stream[:1500]
    whole = decode([prefix])
    for cut in range(len(prefix) + 1):
        assert decode([prefix[:cut], prefix[cut:]]) == whole


def test_tcp_splits_fixture() -> None:
    # reads_base64[i] are successive socket reads; joined_utf8 is the body (SOURCES.md).
    spec = orjson.loads((FIXTURES / "sse-quirks.tcp-splits.json").read_bytes())
    reads = [base64.b64decode(r) for r in spec["reads_base64"]]
    assert [len(r) for r in reads] == spec["reads_len"]
    assert b"".join(reads) == spec["joined_utf8"].encode()
    with pytest.raises(UnicodeDecodeError):
        reads[1].decode()  # the cut really falls inside a UTF-8 sequence
    assert reads[2].endswith(b"\r") and reads[3].startswith(b"\n")
    events = decode(reads)
    assert events == decode([b"".join(reads)])
    first, done = events
    assert orjson.loads(first.data)["choices"][0]["delta"]["content"] == "🧡💙"
    assert is_done(done.data)


SSE_TOKENS = st.sampled_from(
    [
        *(b"data", b"data:", b"data: ", b"event:", b"id:", b"retry:", b":", b" ", b"x", b"7"),
        *(b"\r", b"\n", b"\r\n", b"\0", BOM, b"\xf0\x9f\xa7", b"\xa1", b"[DONE]", b"{}"),
    ]
)
STREAMS = st.one_of(st.binary(max_size=300), st.lists(SSE_TOKENS, max_size=80).map(b"".join))


@given(stream=STREAMS, data=st.data())
def test_split_points_do_not_matter(stream: bytes, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    expected = decode([stream])
    assert expected == reference(stream)
    assert decode(split_at(stream, cuts)) == expected
    assert decode(byte_by_byte(stream)) == expected


@given(stream=STREAMS, data=st.data(), limit=st.integers(1, 64))
def test_small_limit_only_ever_raises_upstream_protocol_error(
    stream: bytes, data: st.DataObject, limit: int
) -> None:
    # Smaller reads see the pending line at more moments, so they may trip the bound where
    # one whole read does not; they never decode differently.
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    try:
        expected = decode([stream], limit)
    except UpstreamProtocolError:
        expected = None
    try:
        got = decode(split_at(stream, cuts), limit)
    except UpstreamProtocolError:
        return
    assert got == expected


# Reads that are each one whole "data: ...\n\n" event take a shortcut in the decoder; what comes
# before such a read (a pending field, a tail, a CR) must send it the general way.
ONE_EVENT_READS = st.lists(
    st.sampled_from(
        [
            b"data: {}\n\n",
            b"data: \n\n",
            b"data: a b\x00c\n\n",
            b"data:  two spaces\n\n",
            b"data: [DONE]\n\n",
            b"event: e\n",
            b"id: 7\n",
            b"retry: 5\n",
            b"data: x\n",  # an event left open: the next read's blank line closes it
            b"data: partial",  # a line left open
            b"\r",
            b"\n",
            b"data: cr\r\n\r\n",
            b": comment\n\n",
            b"data: x\n\ndata: y\n\n",
        ]
    ),
    max_size=12,
)


@given(reads=ONE_EVENT_READS)
def test_one_event_reads_decode_as_the_spec_says(reads: list[bytes]) -> None:
    stream = b"".join(reads)
    events = decode(reads)
    assert events == reference(stream)
    assert events == decode(byte_by_byte(stream))  # never a one-event read: the general path


def test_one_event_read_keeps_the_last_id_and_the_limit() -> None:
    """The limit counts the event's data and its LF, as the general path does for a whole
    line: 7 bytes of data fit in 8, 8 do not."""
    decoder = SSEDecoder(max_event_bytes=8)
    assert decoder.feed(b"id: 3\n\n") == []
    assert decoder.feed(b"data: 1234567\n\n") == [Event(b"1234567", "message", "3", None)]
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(b"data: 12345678\n\n")
    # The same reads behind a comment line never take the shortcut: the same answers.
    general = SSEDecoder(max_event_bytes=8)
    assert general.feed(b":c\ndata: 1234567\n\n") == [Event(b"1234567", "message", None, None)]
    with pytest.raises(UpstreamProtocolError):
        SSEDecoder(max_event_bytes=8).feed(b":c\ndata: 12345678\n\n")
