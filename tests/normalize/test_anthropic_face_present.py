"""The canonical chat answer presented on the Anthropic face (faces/anthropic/present.py).

Every one-choice chat fixture goes through the normalizer as on the chat endpoint, event by
event, and the presenter's stream around it is held to Anthropic's stream grammar
(tests/support/messages_stream.py); the message the events add up to must be the presenter's
whole answer for the same canonical answer, and its counts those of the canonical usage.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import ProxyError, UpstreamProtocolError, UpstreamTimeout
from proxy.core.sse import Event, SSEDecoder
from proxy.core.usage import Usage
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.convert import frames_from_response, response_from_frames
from proxy.normalize.dialects.anthropic import finish_reason
from proxy.normalize.faces.anthropic.message import message_usage, stop_reason, tool_input
from proxy.normalize.faces.anthropic.present import MessagesPresenter
from proxy.normalize.faces.anthropic.stream import MessageEvents
from proxy.normalize.present import EventStream
from tests.support.messages_stream import check_messages_stream, check_usage_consistent
from tests.support.replay import CLIENT_MODEL, Golden, goldens

CREATED = 1_600_000_000
MESSAGE_ID = "msg_" + "a" * 24
STOPS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
STOPS["content_filter"] = "refusal"
ONE_CHOICE = [g for g in goldens() if g.endpoint == "chat" and list(g.data["choices"]) == ["0"]]
STREAMS = [g for g in ONE_CHOICE if g.stream]
WHOLES = [g for g in ONE_CHOICE if not g.stream and g.data["outcome"] == "ok"]
_ids = lambda g: g.name  # noqa: E731


def context(golden: Golden | None = None) -> RequestContext:
    return RequestContext(
        endpoint="chat",
        model=CLIENT_MODEL,
        created=CREATED,
        include_usage=True,  # as the Anthropic face asks
        dialect="openai" if golden is None else golden.data["dialect"],
    )


def presenter() -> MessagesPresenter:
    return MessagesPresenter(message_id=MESSAGE_ID, model=CLIENT_MODEL)


class Recorder:
    """The chat stream, its frames kept on their way to the presenter (the canonical answer
    that the Messages one must tell)."""

    def __init__(self, inner: StreamNormalizer) -> None:
        self.inner = inner
        self.frames: list[bytes] = []

    @property
    def ended(self) -> bool:
        return self.inner.ended

    @property
    def error(self) -> ProxyError | None:
        return self.inner.error

    @property
    def fixes(self) -> set[str]:
        return self.inner.fixes

    @property
    def usage(self) -> Usage:
        return self.inner.usage

    def _kept(self, frames: list[bytes]) -> list[bytes]:
        self.frames += frames
        return frames

    def feed(self, event: Event) -> list[bytes]:
        return self._kept(self.inner.feed(event))

    def finish(self) -> list[bytes]:
        return self._kept(self.inner.finish())

    def fail(self, exc: ProxyError) -> list[bytes]:
        return self._kept(self.inner.fail(exc))


def drive(stream: EventStream, events: list[Event]) -> list[list[bytes]]:
    """What each call of the relay's gets, as the relay calls (frames_for)."""
    calls = []
    for event in events:
        calls.append(stream.feed(event))
        if stream.ended:
            return calls
    calls.append(stream.finish())
    return calls


def golden_events(golden: Golden) -> list[Event]:
    decoder = golden.decoder()
    events = [event for read in golden.reads() for event in decoder.feed(read)]
    return events + decoder.close()


def expected_blocks(golden: Golden) -> list[dict[str, Any]]:
    want = golden.data["choices"]["0"]
    blocks: list[dict[str, Any]] = []
    if want["reasoning_content"]:
        blocks.append({"type": "thinking", "thinking": want["reasoning_content"], "signature": ""})
    text = (want["content"] or "") + (want["refusal"] or "")
    if text:
        blocks.append({"type": "text", "text": text})
    for call in want["tool_calls"]:
        block = {"type": "tool_use", "name": call["name"], "input": orjson.loads(call["arguments"])}
        if call["id"] is not None:
            block["id"] = call["id"]
        blocks.append(block)
    return blocks


def without_made_ids(blocks: list[dict[str, Any]], golden: Golden) -> list[dict[str, Any]]:
    calls = iter(golden.data["choices"]["0"]["tool_calls"])
    out = []
    for block in blocks:
        if block["type"] == "tool_use" and next(calls)["id"] is None:
            block = {key: value for key, value in block.items() if key != "id"}
        out.append(block)
    return out


@pytest.mark.parametrize("golden", STREAMS, ids=_ids)
def test_every_stream_keeps_the_grammar(golden: Golden) -> None:
    recorder = Recorder(StreamNormalizer(context(golden)))
    stream = presenter().stream(recorder)
    calls = drive(stream, golden_events(golden))
    body = b"".join(frame for call in calls for frame in call)
    assert stream.ended
    assert stream.usage == recorder.usage and stream.fixes is recorder.fixes
    if golden.data["outcome"] == "error":
        assert stream.error is recorder.error is not None
        said = [call for call in calls if call]
        if said[0] == said[-1] and len(said[0]) == 1:
            # Nothing said before the failure: the relay answers it as an HTTP error.
            assert said[0][0].startswith(b'data: {"error"')
        else:
            message = check_messages_stream(body, failed=True)
            assert message["id"] == MESSAGE_ID
        return
    assert stream.error is None
    message = check_messages_stream(body)
    assert (message["id"], message["model"]) == (MESSAGE_ID, CLIENT_MODEL)
    assert without_made_ids(message["content"], golden) == expected_blocks(golden)
    assert message["stop_reason"] == STOPS[golden.data["choices"]["0"]["finish_reason"]]
    assert message["stop_sequence"] is None
    canonical = recorder.inner.usage_report()
    check_usage_consistent(message["usage"], canonical)
    # The accumulated message is the whole answer the presenter gives for the same answer.
    whole = presenter().whole(response_from_frames(recorder.frames, canonical))
    assert message == orjson.loads(whole)


def test_message_start_counts_what_the_upstream_counted_first() -> None:
    golden = next(g for g in STREAMS if g.name == "anthropic.messages.stream.sse")
    stream = presenter().stream(StreamNormalizer(context(golden)))
    body = b"".join(b"".join(call) for call in drive(stream, golden_events(golden)))
    start = orjson.loads(body.split(b"\n\n")[0].split(b"data: ", 1)[1])
    assert start["message"]["usage"] == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }


def test_message_start_says_zero_when_nothing_is_counted_yet() -> None:
    golden = next(g for g in STREAMS if g.name == "openai.chat.stream.sse")
    stream = presenter().stream(StreamNormalizer(context(golden)))
    first = next(call for call in drive(stream, golden_events(golden)) if call)
    start = orjson.loads(first[0].split(b"data: ", 1)[1])
    assert start["type"] == "message_start"
    assert set(start["message"]["usage"].values()) == {0}


@pytest.mark.parametrize("golden", WHOLES, ids=_ids)
def test_whole_answers_and_their_frames(golden: Golden) -> None:
    ctx = context(golden)
    body = normalize_response(golden.body(), ctx).body
    message = orjson.loads(presenter().whole(body))
    assert list(message) == [
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "usage",
    ]
    assert (message["id"], message["model"], message["type"]) == (
        MESSAGE_ID,
        CLIENT_MODEL,
        "message",
    )
    want = golden.data["choices"]["0"]
    assert without_made_ids(message["content"], golden) == expected_blocks(golden)
    assert message["stop_reason"] == STOPS[want["finish_reason"]]
    check_usage_consistent(message["usage"], orjson.loads(body)["usage"])
    # The same answer as a whole canonical stream (an upstream that ignored "stream").
    streamed = check_messages_stream(b"".join(presenter().frames(frames_from_response(body, ctx))))
    assert streamed == message


def test_frames_cut_short_end_with_an_error_event() -> None:
    golden = next(g for g in WHOLES if g.name == "openai.chat.json")
    frames = frames_from_response(normalize_response(golden.body(), context()).body, context())
    message = check_messages_stream(b"".join(presenter().frames(frames[:-1])), failed=True)
    assert message["error"]["type"] == "api_error"


def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return Event(orjson.dumps({"id": "c", "created": CREATED, "choices": [choice]}))


def test_a_failure_before_anything_is_said_is_left_to_the_relay() -> None:
    stream = presenter().stream(StreamNormalizer(context()))
    # The role chunk alone says nothing on this face: the failure after it is still first.
    assert stream.feed(chunk({"role": "assistant", "content": ""})) == []
    frames = stream.fail(UpstreamTimeout("The upstream sent nothing within 5 s (idle)"))
    assert len(frames) == 1 and frames[0].startswith(b'data: {"error"')
    assert isinstance(stream.error, UpstreamTimeout) and stream.ended
    assert stream.finish() == [] and stream.feed(chunk({"content": "late"})) == []


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (UpstreamTimeout("The upstream sent nothing within 5 s (idle)"), "timeout_error"),
        (UpstreamProtocolError("The upstream sent an event that is not JSON"), "api_error"),
    ],
)
def test_a_failure_after_the_first_byte_is_an_error_event(exc: ProxyError, kind: str) -> None:
    stream = presenter().stream(StreamNormalizer(context()))
    out = stream.feed(chunk({"role": "assistant", "reasoning_content": "Hm."}))
    out += stream.feed(chunk({"content": "Hel"}))
    out += stream.fail(exc)
    message = check_messages_stream(b"".join(out), failed=True)
    assert message["error"] == {"type": kind, "message": exc.message}
    assert [block["type"] for block in message["content"]] == ["thinking", "text"]
    assert stream.error is exc and stream.ended
    assert stream.fail(exc) == [] and stream.finish() == []


def test_an_upstream_error_event_midway() -> None:
    stream = presenter().stream(StreamNormalizer(context()))
    out = stream.feed(chunk({"role": "assistant", "content": "Hi"}))
    out += stream.feed(Event(b'{"error": {"message": "Overloaded", "type": "overloaded_error"}}'))
    message = check_messages_stream(b"".join(out), failed=True)
    assert message["error"] == {"type": "overloaded_error", "message": "Overloaded"}


def call(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        fragment.update(id=f"call_{index}", type="function")
        fragment["function"]["name"] = name
    return fragment


def test_text_after_tool_calls_is_a_block_of_its_own() -> None:
    stream = presenter().stream(StreamNormalizer(context()))
    out: list[bytes] = []
    for delta in (
        {"role": "assistant", "content": "Let me look."},
        {"tool_calls": [call(0, '{"q": ', "search")]},
        {"tool_calls": [call(0, '"a"}')]},
        {"tool_calls": [call(1, "{}", "fetch")]},
        {"content": "Done."},
    ):
        out += stream.feed(chunk(delta))
    out += stream.feed(chunk({}, "tool_calls"))
    out += stream.feed(Event(b"[DONE]"))
    message = check_messages_stream(b"".join(out))
    assert message["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_0", "name": "search", "input": {"q": "a"}},
        {"type": "tool_use", "id": "call_1", "name": "fetch", "input": {}},
        {"type": "text", "text": "Done."},
    ]
    assert message["stop_reason"] == "tool_use"


def test_interleaved_tool_call_arguments_fail_the_stream() -> None:
    # Anthropic's blocks do not interleave, and a stopped block takes no more input.
    stream = presenter().stream(StreamNormalizer(context()))
    out: list[bytes] = []
    for delta in (
        {"role": "assistant", "tool_calls": [call(0, '{"q": ', "search")]},
        {"tool_calls": [call(1, "{", "fetch")]},
        {"tool_calls": [call(0, '"a"}')]},
    ):
        out += stream.feed(chunk(delta))
    message = check_messages_stream(b"".join(out), failed=True)
    assert message["error"]["type"] == "api_error"
    assert isinstance(stream.error, UpstreamProtocolError) and stream.ended
    assert stream.feed(chunk({"content": "more"})) == [] and stream.finish() == []


@pytest.mark.parametrize("finish", ["stop", "length", "tool_calls", "content_filter"])
def test_stop_reasons_round_trip_through_the_upstream_dialect(finish: str) -> None:
    assert finish_reason(stop_reason(finish), finish == "tool_calls") == finish


@pytest.mark.parametrize(
    ("usage", "counts"),
    [
        (None, (0, 0, 0, 0)),
        ({"prompt_tokens": 10, "completion_tokens": 3}, (10, 0, 0, 3)),
        (
            {
                "prompt_tokens": 100,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30},
            },
            (10, 30, 60, 7),
        ),
        # Garbage: never negative, never null.
        (
            {
                "prompt_tokens": 5,
                "completion_tokens": None,
                "prompt_tokens_details": {"cached_tokens": 9},
            },
            (0, 0, 9, 0),
        ),
    ],
)
def test_usage_counts(usage: object, counts: tuple[int, int, int, int]) -> None:
    assert tuple(message_usage(usage).values()) == counts


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [("", {}), (None, {}), ("  ", {}), ('{"a": [1]}', {"a": [1]})],
)
def test_tool_input(arguments: object, expected: dict[str, Any]) -> None:
    assert tool_input(arguments) == expected


@pytest.mark.parametrize("arguments", ["[1]", '"text"', '{"a": ', "null", "{'a': 1}"])
def test_tool_input_that_is_no_object_is_the_upstreams_failure(arguments: str) -> None:
    with pytest.raises(UpstreamProtocolError):
        tool_input(arguments)


def test_whole_refusal_is_text() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": "I can't help."},
                "finish_reason": "content_filter",
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    }
    message = orjson.loads(presenter().whole(orjson.dumps(body)))
    assert message["content"] == [{"type": "text", "text": "I can't help."}]
    assert message["stop_reason"] == "refusal"


def test_events_decode_as_sse() -> None:
    golden = next(g for g in STREAMS if g.name == "openai.chat.stream.tool-calls.sse")
    stream = presenter().stream(StreamNormalizer(context(golden)))
    body = b"".join(b"".join(call) for call in drive(stream, golden_events(golden)))
    decoded = SSEDecoder().feed(body)
    assert [event.event for event in decoded][:2] == ["message_start", "content_block_start"]
    assert decoded[-1].event == "message_stop"


TRICKY_TEXTS = [
    "plain",
    'a quote " and a \\ backslash',
    "é 😀 \u2028 \x00",
    "two\n\nlines",
    '"},"logprobs":null,"finish_reason":null}]}\n\n',
    '"choices":[{"index":0,"delta":{"content":"',
]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_ordinary_text_is_told_as_the_general_path_tells_it(text: str) -> None:
    # frame() makes an ordinary text chunk's delta from its frame's bytes: the same bytes as
    # chunk() makes of the decoded chunk, whatever the text.
    normalizer = StreamNormalizer(context())
    frames: list[bytes] = []
    for delta in ({"role": "assistant", "content": "A"}, {"content": text}, {"content": text}):
        frames += normalizer.feed(chunk(delta))
    frames += normalizer.feed(chunk({}, "stop")) + normalizer.feed(Event(b"[DONE]"))
    shortcut = MessageEvents(message_id=MESSAGE_ID, model=CLIENT_MODEL)
    general = MessageEvents(message_id=MESSAGE_ID, model=CLIENT_MODEL)
    told = [shortcut.frame(frame) for frame in frames]
    for frame, events in zip(frames, told, strict=True):
        payload = frame.removeprefix(b"data: ").strip()
        assert events == (
            general.end() if payload == b"[DONE]" else general.chunk(orjson.loads(payload))
        )
    message = check_messages_stream(b"".join(b"".join(events) for events in told))
    assert message["content"] == [{"type": "text", "text": "A" + text + text}]


def test_frames_that_only_look_ordinary_take_the_general_path() -> None:
    def chunk_frame(*texts: str) -> bytes:
        choices = [
            {"index": i, "delta": {"content": t}, "logprobs": None, "finish_reason": None}
            for i, t in enumerate(texts)
        ]
        return b"data: " + orjson.dumps({"id": "c", "choices": choices}) + b"\n\n"

    for frame in (
        chunk_frame("a", "b"),  # a second choice after the first one's text
        chunk_frame("a") + chunk_frame("b"),  # two events in one frame
        chunk_frame(""),  # no text
    ):
        events = MessageEvents(message_id=MESSAGE_ID, model=CLIENT_MODEL)
        events.chunk(orjson.loads(chunk_frame("open")[6:]))  # a text block is open
        general = MessageEvents(message_id=MESSAGE_ID, model=CLIENT_MODEL)
        general.chunk(orjson.loads(chunk_frame("open")[6:]))
        expected: list[bytes] = []
        for part in frame.split(b"\n\n")[:-1]:
            expected += general.chunk(orjson.loads(part[6:]))
        assert events.frame(frame) == expected
