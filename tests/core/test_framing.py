"""NDJSON and streamed JSON arrays cut into events (proxy.core.framing), fed in every way."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import UpstreamProtocolError
from proxy.core.framing import Decoder, JSONArrayDecoder, NDJSONDecoder, decoder_for
from proxy.core.sse import SSEDecoder
from tests.support.replay import FIXTURES


def run(decoder: Decoder, reads: list[bytes]) -> list[bytes]:
    events = [event for read in reads for event in decoder.feed(read)]
    return [event.data for event in events + decoder.close()]


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


NDJSON = [
    (b'{"a":1}\n{"b":2}\n', [b'{"a":1}', b'{"b":2}']),
    (b'{"a":1}\n{"b":2}', [b'{"a":1}', b'{"b":2}']),  # the last line without its LF
    (b'{"a":1}\r\n\n  \n{"b":2}\r\n', [b'{"a":1}', b'{"b":2}']),  # CRLF, blank lines
    (b"", []),
    (b"\n\n", []),
    (b'{"t":"a\\nb"}\n', [b'{"t":"a\\nb"}']),  # an escaped LF is no line end
]


@pytest.mark.parametrize(("data", "expected"), NDJSON)
def test_ndjson_whole_and_byte_by_byte(data: bytes, expected: list[bytes]) -> None:
    assert run(NDJSONDecoder(), [data]) == expected
    assert run(NDJSONDecoder(), byte_by_byte(data)) == expected


ARRAYS = [
    (b'[{"a":1},{"b":[1,{"c":2}]}]', [b'{"a":1}', b'{"b":[1,{"c":2}]}']),
    (b'[\n  {"a": 1}\n,\n  {"b": 2}\n]\n', [b'{"a": 1}', b'{"b": 2}']),  # Gemini's pretty print
    # Brackets, braces and escaped quotes inside strings are text, not structure.
    (b'[{"t":"]}{[\\"\\\\"},{"u":"\\u005d"}]', [b'{"t":"]}{[\\"\\\\"}', b'{"u":"\\u005d"}']),
    (b"[]", []),
    (b"", []),
    (b'[{"a":1}', [b'{"a":1}']),  # no closing bracket: the elements that came still count
]


@pytest.mark.parametrize(("data", "expected"), ARRAYS)
def test_json_array_whole_and_byte_by_byte(data: bytes, expected: list[bytes]) -> None:
    assert run(JSONArrayDecoder(), [data]) == expected
    assert run(JSONArrayDecoder(), byte_by_byte(data)) == expected


def test_an_element_is_an_event_as_soon_as_it_is_complete() -> None:
    decoder = JSONArrayDecoder()
    assert decoder.feed(b'[{"a":') == []
    assert [e.data for e in decoder.feed(b'1},{"b"')] == [b'{"a":1}']
    assert [e.data for e in decoder.feed(b":2}]")] == [b'{"b":2}']
    assert decoder.close() == []


@pytest.mark.parametrize(
    "data",
    [b'{"error": {"code": 500}}', b"<html>oops</html>", b'[1, {"a": 1}]', b'["x"]'],
)
def test_what_is_not_an_array_of_objects_reaches_the_normalizer_to_be_refused(data: bytes) -> None:
    """Handed on once, as it is: the normalizer fails to read it as an event object."""
    events = run(JSONArrayDecoder(), [data, b'{"more": 1}'])
    assert len(events) == 1
    assert data.lstrip(b"[").startswith(events[0][:1])


def test_an_element_cut_short_is_handed_on_and_fails_to_parse() -> None:
    events = run(JSONArrayDecoder(), [b'[{"a":1},{"b":'])
    assert events[0] == b'{"a":1}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(events[1])


@pytest.mark.parametrize("make", [NDJSONDecoder, JSONArrayDecoder])
def test_an_event_over_the_bound_is_refused(make: type[NDJSONDecoder | JSONArrayDecoder]) -> None:
    decoder = make(max_event_bytes=100)
    big = b'[{"t":"' + b"x" * 200 if make is JSONArrayDecoder else b'{"t":"' + b"x" * 200
    with pytest.raises(UpstreamProtocolError):
        for piece in (big[:50], big[50:]):
            decoder.feed(piece)


@pytest.mark.parametrize(
    "fixture", ["gemini.generate-content.stream.json-array.json", "ollama.api-chat.stream.ndjson"]
)
def test_recorded_streams_split_anywhere_give_the_same_events(fixture: str) -> None:
    body = (FIXTURES / fixture).read_bytes()
    make = JSONArrayDecoder if fixture.endswith(".json") else NDJSONDecoder
    whole = run(make(), [body])
    assert whole and all(isinstance(orjson.loads(event), dict) for event in whole)
    assert run(make(), byte_by_byte(body)) == whole

    @settings(max_examples=25, deadline=None)
    @given(cuts=st.lists(st.integers(0, len(body)), max_size=10))
    def split(cuts: list[int]) -> None:
        points = [0, *sorted(cuts), len(body)]
        assert run(make(), [body[a:b] for a, b in itertools.pairwise(points)]) == whole

    split()


@pytest.mark.parametrize(
    ("content_type", "json_array", "expected"),
    [
        ("text/event-stream", False, SSEDecoder),
        ("application/x-ndjson", False, NDJSONDecoder),
        ("application/jsonl", True, NDJSONDecoder),
        ("application/json", True, JSONArrayDecoder),
        ("application/json", False, type(None)),  # one whole body, streamed to the client at once
        ("text/plain", True, type(None)),
    ],
)
def test_the_decoder_follows_the_content_type(
    content_type: str, json_array: bool, expected: type
) -> None:
    assert type(decoder_for(content_type, json_array=json_array)) is expected
