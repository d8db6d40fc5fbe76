"""Claude on Bedrock for the Anthropic face (proxy/normalize/dialects/bedrock_invoke.py): the
InvokeModel body, which models take it, and InvokeModelWithResponseStream's chunk frames made
Anthropic's own events again, fed in any reads."""

from __future__ import annotations

import base64
import random

import orjson
import pytest

from proxy.core.errors import UpstreamProtocolError
from proxy.core.eventstream import EventStreamDecoder, encode_event, encode_exception
from proxy.core.sse import Event, SSEDecoder
from proxy.normalize.dialects.bedrock_invoke import InvokeChunks, invoke_body, takes
from tests.support.replay import FIXTURES

STREAM = (FIXTURES / "anthropic.messages.stream.sse").read_bytes()


def anthropic_events() -> list[Event]:
    decoder = SSEDecoder()
    return decoder.feed(STREAM) + decoder.close()


def framed(events: list[Event]) -> bytes:
    return b"".join(
        encode_event("chunk", orjson.dumps({"bytes": base64.b64encode(e.data).decode()}))
        for e in events
    )


def decode(body: bytes, reads: list[int]) -> list[Event]:
    chunks = InvokeChunks(EventStreamDecoder())
    found: list[Event] = []
    at = 0
    for size in reads:
        found += chunks.feed(body[at : at + size])
        at += size
    return found + chunks.feed(body[at:]) + chunks.close()


def test_the_body_is_the_clients_less_what_the_path_says() -> None:
    asked = {
        "model": "claude",
        "stream": True,
        "anthropic_version": "x",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "enabled"},
    }
    assert list(invoke_body(asked).items()) == [
        ("anthropic_version", "bedrock-2023-05-31"),
        ("max_tokens", 9),
        ("messages", [{"role": "user", "content": "Hi"}]),
        ("thinking", {"type": "enabled"}),
    ]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("anthropic.claude-3-5-haiku-20241022-v1:0", True),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", True),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", True),
        ("meta.llama3-70b-instruct-v1:0", False),
        ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/anthropic.claude-x", False),
    ],
)
def test_which_models_take_messages(model: str, expected: bool) -> None:
    assert takes(model) is expected


@pytest.mark.parametrize("how", ["whole", "byte by byte", "random splits"])
def test_chunks_are_anthropics_events_again(how: str) -> None:
    events = anthropic_events()
    body = framed(events)
    if how == "whole":
        reads = [len(body)]
    elif how == "byte by byte":
        reads = [1] * len(body)
    else:
        rng = random.Random(7)
        reads = [rng.randint(1, 40) for _ in range(len(body))]
    assert decode(body, reads) == [Event(e.data, e.event) for e in events]


def test_an_exception_frame_is_an_anthropic_error_event() -> None:
    body = encode_exception("throttlingException", b'{"message":"Too many requests."}')
    (event,) = decode(body, [len(body)])
    assert event.event == "error"
    assert orjson.loads(event.data) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Too many requests."},
    }


@pytest.mark.parametrize(
    "payload", [b'{"bytes": "not base64!"}', b'{"bytes": "e30="}', b'{"nothing": 1}', b"[]"]
)
def test_a_chunk_that_is_no_event_is_the_upstreams_error(payload: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        decode(encode_event("chunk", payload), [100])
