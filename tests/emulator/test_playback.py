"""Playback: a stream is written in its units (SSE events, NDJSON lines, JSON array elements),
byte for byte, paced by the chunk delay."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import build_emulator_app
from proxy.emulator.recording import split_array, split_events, split_lines
from tests.emulator.exchange import CRLF_STREAM, packaged, read_writes, served_type


async def test_crlf_stream_is_served_exactly_one_event_per_chunk(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings))
    body = {"model": "crlf", "stream": True}
    async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        chunks = await read_writes(resp)
    assert b"".join(chunks) == CRLF_STREAM
    assert chunks == list(split_events(CRLF_STREAM))
    assert len(chunks) == 4


async def test_ndjson_is_served_line_by_line(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings))
    body = {"model": "lines.chat.stream.ndjson"}
    async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
        assert resp.headers["Content-Type"] == "application/x-ndjson"
        chunks = await read_writes(resp)
    assert chunks == [b'{"a":1}\n', b'{"b":2}\r\n', b'{"c":3}']


async def test_chunk_delay_paces_events(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings, chunk_delay=0.1))
    started = time.monotonic()
    body = {"model": "three", "stream": True}
    async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
        chunks = await read_writes(resp)
    assert chunks == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(
    ("path", "body", "name", "split"),
    [
        (
            "/v1/messages",
            {"model": "anthropic", "stream": True},
            "anthropic.messages.stream.sse",
            split_events,
        ),
        (
            "/v1beta/models/gemini:streamGenerateContent?alt=sse",
            {"contents": []},
            "gemini.generate-content.stream.sse",
            split_events,
        ),
        (
            "/v1beta/models/gemini:streamGenerateContent",
            {"contents": []},
            "gemini.generate-content.stream.json-array.json",
            split_array,
        ),
        ("/v2/chat", {"model": "cohere", "stream": True}, "cohere.chat.stream.sse", split_events),
        ("/api/chat", {"model": "ollama"}, "ollama.api-chat.stream.ndjson", split_lines),
        ("/tgi/tgi/generate_stream", {"inputs": "Hi"}, "tgi.generate-stream.sse", split_events),
    ],
)
async def test_native_stream_is_written_in_its_units(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: object,
    name: str,
    split: Callable[[bytes], tuple[bytes, ...]],
) -> None:
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == served_type(name)
        assert "Content-Length" not in resp.headers
        chunks = await read_writes(resp)
    assert b"".join(chunks) == packaged(name)
    assert chunks == list(split(packaged(name)))
    assert len(chunks) > 2


async def test_gemini_array_stream_is_written_one_element_at_a_time(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    url = emulator.make_url("/v1beta/models/gemini:streamGenerateContent")
    async with session.post(url, json={"contents": []}) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        chunks = await read_writes(resp)
    assert [chunk[:1] for chunk in chunks] == [b"[", b",", b",", b"]"]
    elements = orjson.loads(b"".join(chunks))
    assert [len(element["candidates"]) for element in elements] == [1, 1, 1]


def test_chunk_delay_must_be_seconds() -> None:
    with pytest.raises(ValueError, match="chunk_delay"):
        build_emulator_app(chunk_delay=-1)
