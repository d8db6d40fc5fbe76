"""An Anthropic upstream's own Messages answers relayed to the Anthropic face
(faces/anthropic/passthrough.py): the recorded streams fed whole, byte by byte and split at
random, through the SSE decoder as the relay does; what comes out is what came in, byte for
byte, but message_start's model, redaction, and the end the proxy owes a cut stream.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.errors import UpstreamProtocolError, UpstreamStatusError, UpstreamTimeout
from proxy.core.redact import Redactor
from proxy.core.sse import Event, SSEDecoder
from proxy.normalize.faces.anthropic.errors import anthropic_status
from proxy.normalize.faces.anthropic.passthrough import ANTHROPIC_PASSTHROUGH
from proxy.normalize.fields import RequestContext
from proxy.normalize.present import EventStream
from tests.support.replay import FIXTURES

MODEL = "claude-for-my-team"
SECRET = "sk-ant-upstream-key-1234"
STREAMS = sorted(FIXTURES.glob("anthropic.messages.stream*.sse"))
# What each recording says was consumed: (prompt, completion, cached) in canonical counts.
USAGE = {
    "anthropic.messages.stream.sse": (12, 30, 0),
    "anthropic.messages.stream.tool-use.sse": (849, 47, 0),
    "anthropic.messages.stream.refusal.sse": (18, 5, 0),
    "anthropic.messages.stream.input-tokens-in-delta.sse": (61, 2, None),
    "anthropic.messages.stream.duplicate-message-start.sse": (17, 227, None),
    "anthropic.messages.stream.error.sse": (12, 1, 0),
    "anthropic.messages.stream.spliced.sse": (17, 1, None),
}
CUT_SHORT = "The upstream's stream ended before the message was complete"


def context(redact: Redactor | None = None) -> RequestContext:
    return RequestContext(
        endpoint="chat", model=MODEL, created=1_600_000_000, dialect="anthropic", redact=redact
    )


def frames_of(body: bytes) -> list[bytes]:
    """Each event of an SSE body as written, with its blank line."""
    return [frame + b"\n\n" for frame in body.split(b"\n\n") if frame.strip()]


def relay(reads: list[bytes], ctx: RequestContext | None = None) -> tuple[list[bytes], EventStream]:
    """The client's frames for the upstream's ``reads``, driven as the relay drives a stream
    (proxy.http.pipe.frames_for)."""
    stream = ANTHROPIC_PASSTHROUGH.stream(ctx or context())
    decoder = SSEDecoder()
    out: list[bytes] = []
    for read in [*reads, b""]:
        events = decoder.feed(read) if read else decoder.close()
        for event in events:
            out += stream.feed(event)
            if stream.ended:
                return out, stream
        if not read:
            out += stream.finish()
    return out, stream


def with_model(frame: bytes) -> bytes:
    """A recorded message_start as the client gets it: its model the client's name."""
    head, _, data = frame.partition(b"\ndata: ")
    payload = orjson.loads(data)
    payload["message"]["model"] = MODEL
    return head + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def expected(path: Path) -> list[bytes]:
    frames = frames_of(path.read_bytes())
    out = [with_model(frames[0])]
    if path.name.endswith("duplicate-message-start.sse"):
        return out + frames[2:]  # the repeat is dropped: the client has its message_start
    if path.name.endswith("spliced.sse"):
        spliced = next(i for i, f in enumerate(frames) if i and b"message_start" in f)
        return out + frames[1:spliced]  # then the error event the proxy writes
    return out + frames[1:]


def check(path: Path, frames: list[bytes], stream: EventStream) -> None:
    want = expected(path)
    assert frames[: len(want)] == want
    if path.name.endswith("spliced.sse"):
        assert len(frames) == len(want) + 1
        assert frames[-1].startswith(b"event: error\n")
        assert isinstance(stream.error, UpstreamProtocolError)
    else:
        assert frames == want
    if path.name.endswith("error.sse"):
        error = stream.error
        assert isinstance(error, UpstreamStatusError)
        assert anthropic_status(error) == (529, "overloaded_error")
    elif not path.name.endswith("spliced.sse"):
        assert stream.error is None
    usage = stream.usage
    prompt, completion, cached = USAGE[path.name]
    assert usage.source == "upstream"
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)
    assert usage.total_tokens == prompt + completion
    assert usage.cached_tokens == (cached or 0)


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.name)
def test_streams_whole_and_byte_by_byte(path: Path) -> None:
    body = path.read_bytes()
    for reads in ([body], [body[i : i + 1] for i in range(len(body))]):
        frames, stream = relay(reads)
        check(path, frames, stream)


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.name)
def test_streams_split_anywhere(path: Path) -> None:
    body = path.read_bytes()

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cuts=st.lists(st.integers(0, len(body)), max_size=12))
    def run(cuts: list[int]) -> None:
        points = [0, *sorted(cuts), len(body)]
        reads = [body[a:b] for a, b in itertools.pairwise(points) if b > a]
        frames, stream = relay(reads)
        check(path, frames, stream)

    run()


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.name)
def test_a_stream_cut_before_message_stop_ends_with_an_error_event(path: Path) -> None:
    body = path.read_bytes()
    frames = frames_of(body)
    whole, _ = relay([body])
    for cut in range(1, len(frames)):  # every cut before the recording's last event
        out, stream = relay([b"".join(frames[:cut])])
        if out == whole[: len(out)]:
            continue  # it ended on its own before the cut (the spliced recording)
        assert out[:-1] == whole[: len(out) - 1]
        assert out[-1].startswith(b"event: error\n")
        error = orjson.loads(out[-1].split(b"data: ", 1)[1])
        assert error == {"type": "error", "error": {"type": "api_error", "message": CUT_SHORT}}
        assert isinstance(stream.error, UpstreamProtocolError)


def test_an_empty_stream_is_left_to_the_relay_as_an_http_error() -> None:
    frames, stream = relay([b""])
    assert len(frames) == 1 and frames[0].startswith(b"event: error\n")
    assert isinstance(stream.error, UpstreamProtocolError)
    assert stream.usage.source == "estimated"


def test_an_error_first_is_one_frame_the_relay_answers_as_an_http_error() -> None:
    body = b"event: error\ndata: " + (FIXTURES / "anthropic.error.overloaded.json").read_bytes()
    frames, stream = relay([body + b"\n\n"])
    assert len(frames) == 1 and stream.error is not None
    assert anthropic_status(stream.error) == (529, "overloaded_error")


@pytest.mark.parametrize(
    ("kind", "status"),
    [("rate_limit_error", 429), ("invalid_request_error", 400), ("api_error", 502)],
)
def test_error_events_are_counted_by_their_type(kind: str, status: int) -> None:
    event = orjson.dumps({"type": "error", "error": {"type": kind, "message": "no"}})
    _, stream = relay([b"event: error\ndata: " + event + b"\n\n"])
    assert stream.error is not None
    assert anthropic_status(stream.error)[0] == status


def test_error_events_are_redacted() -> None:
    body = (FIXTURES / "anthropic.messages.stream.error.sse").read_bytes()
    body = body.replace(b'"Overloaded"', f'"Overloaded (key {SECRET})"'.encode())
    frames, stream = relay([body], context(Redactor([SECRET])))
    error = orjson.loads(frames[-1].split(b"data: ", 1)[1])
    assert error == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded (key ***)"},
    }
    assert SECRET.encode() not in b"".join(frames)
    assert stream.error is not None and SECRET not in stream.error.message


def test_a_failure_midway_is_an_error_event_redacted() -> None:
    stream = ANTHROPIC_PASSTHROUGH.stream(context(Redactor([SECRET])))
    first = frames_of((FIXTURES / "anthropic.messages.stream.sse").read_bytes())[:3]
    for frame in first:
        event = SSEDecoder().feed(frame)[0]
        assert stream.feed(event)
    frames = stream.fail(UpstreamTimeout(f"No answer from https://x/?key={SECRET} in 5 s"))
    assert frames == [
        b'event: error\ndata: {"type":"error","error":{"type":"timeout_error",'
        b'"message":"No answer from https://x/?key=*** in 5 s"}}\n\n'
    ]
    assert stream.ended and stream.fail(UpstreamTimeout("again")) == [] and stream.finish() == []


def test_an_event_without_its_name_is_named_by_its_type() -> None:
    start = frames_of((FIXTURES / "anthropic.messages.stream.sse").read_bytes())[0]
    data = start.split(b"data: ", 1)[1].strip()
    stream = ANTHROPIC_PASSTHROUGH.stream(context())
    frames = stream.feed(Event(data))
    assert frames == [with_model(start)]
    assert stream.feed(Event(b'{"type":"ping"}')) == [b'event: ping\ndata: {"type":"ping"}\n\n']


def test_usage_counts_the_cached_prefix_in_the_prompt() -> None:
    stream = ANTHROPIC_PASSTHROUGH.stream(context())
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-x",
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
                "output_tokens": 1,
            },
        },
    }
    stream.feed(Event(orjson.dumps(start), "message_start"))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 9},
    }
    stream.feed(Event(orjson.dumps(delta), "message_delta"))
    usage = stream.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (125, 9, 100)
    assert usage.total_tokens == 134


def test_not_json_fails_the_stream() -> None:
    stream = ANTHROPIC_PASSTHROUGH.stream(context())
    assert stream.feed(Event(b"[DONE]")) == [] and stream.feed(Event(b"")) == []
    frames = stream.feed(Event(b"{oops", "message_delta"))
    assert len(frames) == 1 and isinstance(stream.error, UpstreamProtocolError)


def test_whole_message_model_replaced_usage_metered() -> None:
    raw = (FIXTURES / "anthropic.messages.json").read_bytes()
    normalized = ANTHROPIC_PASSTHROUGH.response(raw, context())
    want = orjson.loads(raw)
    want["model"] = MODEL
    assert orjson.loads(normalized.body) == want
    assert list(orjson.loads(normalized.body)) == list(want)  # the upstream's order of keys
    usage = normalized.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (12, 29, 41)
    assert usage.source == "upstream" and normalized.fixes == frozenset()


def test_whole_error_is_the_upstreams_failure() -> None:
    raw = (FIXTURES / "anthropic.error.overloaded.json").read_bytes()
    with pytest.raises(UpstreamStatusError) as caught:
        ANTHROPIC_PASSTHROUGH.response(raw, context())
    assert anthropic_status(caught.value) == (529, "overloaded_error")
    with pytest.raises(UpstreamProtocolError):
        ANTHROPIC_PASSTHROUGH.response(b"[]", context())


def test_whole_without_usage_is_estimated() -> None:
    raw = orjson.dumps({"id": "msg_1", "type": "message", "content": [], "model": "claude-x"})
    ctx = context()
    ctx.prompt = [{"role": "user", "content": "x" * 40}]
    usage = ANTHROPIC_PASSTHROUGH.response(raw, ctx).usage
    assert usage.source == "estimated" and usage.prompt_tokens == 10


def test_the_family_is_not_chat() -> None:
    assert ANTHROPIC_PASSTHROUGH.chat is False
