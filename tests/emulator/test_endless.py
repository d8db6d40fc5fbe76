"""The ``endless`` fault: valid events of each endpoint's own dialect, framed as its stream is,
forever."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from proxy.emulator.recording import split_events
from tests.emulator.exchange import read_writes
from tests.support.schema import validate

RESPONSE_OPENERS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]


def decode_writes(content_type: str, chunks: list[bytes]) -> list[tuple[str | None, Any]]:
    """The events in an endless stream's first writes: each SSE event's name and data, each
    NDJSON line, or each element of the JSON array (closed here, as the stream never is)."""
    if content_type == "application/x-ndjson":
        assert all(chunk.count(b"\n") == 1 and chunk.endswith(b"\n") for chunk in chunks)
        return [(None, orjson.loads(chunk)) for chunk in chunks]
    if content_type == "application/json":
        assert chunks[0].startswith(b"[")
        assert all(chunk.startswith(b",") for chunk in chunks[1:])
        return [(None, element) for element in orjson.loads(b"".join(chunks) + b"]")]
    events: list[tuple[str | None, Any]] = []
    for event in (event for chunk in chunks for event in split_events(chunk)):
        fields = dict(line.split(": ", 1) for line in event.decode().splitlines() if line)
        events.append((fields.get("event"), orjson.loads(fields["data"])))
    return events


def anthropic_text(data: Any) -> str:
    return str(data["delta"]["text"])


def cohere_text(data: Any) -> str:
    return str(data["delta"]["message"]["content"]["text"])


def gemini_text(data: Any) -> str:
    return str(data["candidates"][0]["content"]["parts"][0]["text"])


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/v1/chat/completions", lambda c: c["object"] == "chat.completion.chunk"),
        ("/v1/completions", lambda c: c["object"] == "text_completion"),
        ("/api/chat/inference", lambda c: c == {"text": "x "}),
    ],
)
async def test_fault_endless(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, check: Any
) -> None:
    body = {"model": "openai@endless", "stream": True}
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for _ in range(20):
            line = await resp.content.readline()
            assert line.startswith(b"data: ")
            assert check(orjson.loads(line[6:]))
            assert await resp.content.readline() == b"\n"


@pytest.mark.parametrize(
    ("path", "body", "content_type", "names", "text"),
    [
        (
            "/v1/messages",
            {"model": "anthropic@endless", "stream": True},
            "text/event-stream",
            ["message_start", "content_block_start"] + ["content_block_delta"] * 4,
            anthropic_text,
        ),
        (
            "/v2/chat",
            {"model": "cohere@endless", "stream": True},
            "text/event-stream",
            ["message-start", "content-start"] + ["content-delta"] * 4,
            cohere_text,
        ),
        (
            "/v1beta/models/x@endless:streamGenerateContent?alt=sse",
            {},
            "text/event-stream",
            [None] * 4,
            gemini_text,
        ),
        (
            "/v1beta/models/x@endless:streamGenerateContent",
            {},
            "application/json",
            [None] * 4,
            gemini_text,
        ),
        (
            "/api/chat",
            {"model": "x@endless"},
            "application/x-ndjson",
            [None] * 4,
            lambda data: data["message"]["content"],
        ),
        (
            "/api/generate",
            {"model": "x@endless"},
            "application/x-ndjson",
            [None] * 4,
            lambda data: data["response"],
        ),
        (
            "/tgi/x@endless/generate_stream",
            {},
            "text/event-stream",
            [None] * 4,
            lambda data: data["token"]["text"],
        ),
    ],
)
async def test_native_fault_endless_speaks_the_dialect(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: object,
    content_type: str,
    names: list[str | None],
    text: Callable[[Any], str],
) -> None:
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.headers["Content-Type"] == content_type
        chunks = await read_writes(resp, 4)
    events = decode_writes(content_type, chunks)
    assert [name for name, _ in events] == names
    # Named events carry their name as their type too, as Anthropic's and Cohere's do.
    assert all(data["type"] == name for name, data in events if name is not None)
    assert text(events[-1][1]) == "x "


async def test_fault_endless_on_responses_streams_responses_events(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai@endless", "input": "Hi", "stream": True}
    async with session.post(emulator.make_url("/v1/responses"), json=body) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        chunks = await read_writes(resp, 4)
    events = decode_writes("text/event-stream", chunks)
    assert [name for name, _ in events] == RESPONSE_OPENERS + ["response.output_text.delta"] * 4
    for name, data in events:
        validate(data, "ResponseStreamEvent")
        assert data["type"] == name
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert events[0][1]["response"]["model"] == "openai"
    assert events[-1][1]["delta"] == "x "
