"""What the emulator tests share: one request and its answer, a body as it was written, the
packaged recordings as served, and the providers' error envelopes."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from proxy.emulator import RECORDINGS_DIR

CRLF_STREAM = (
    b'data: {"n":1}\r\n\r\n'
    b": keep-alive comment\r\n\r\n"
    b'event: message\r\nid: 7\r\ndata: {"n":2}\r\n\r\n'
    b"data: [DONE]\r\n"
)


async def post(
    session: aiohttp.ClientSession, server: TestServer, path: str, body: object, **kwargs: Any
) -> tuple[int, dict[str, str], bytes]:
    async with session.post(server.make_url(path), data=orjson.dumps(body), **kwargs) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def read_writes(resp: aiohttp.ClientResponse, count: int | None = None) -> list[bytes]:
    """The body as the server wrote it, one piece per HTTP chunk: only the first ``count`` if
    given, as an endless stream has no end."""
    chunks, current = [], b""
    async for data, end_of_chunk in resp.content.iter_chunks():
        current += data
        if end_of_chunk:
            chunks.append(current)
            current = b""
            if len(chunks) == count:
                return chunks
    assert current == b""
    return chunks


async def read_until_reset(
    session: aiohttp.ClientSession, server: TestServer, path: str, body: object
) -> bytes:
    """What a 200 answer delivered before its connection was aborted (``reset-after``)."""
    received = b""
    async with session.post(server.make_url(path), json=body) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for data in resp.content.iter_any():
                received += data
    return received


def packaged(name: str) -> bytes:
    return (RECORDINGS_DIR / name).read_bytes()


def served_type(name: str) -> str:
    if name.endswith((".eventstream", ".eventstream.jsonl")):
        return "application/vnd.amazon.eventstream"
    if name.endswith(".sse"):
        return "text/event-stream"
    return "application/x-ndjson" if name.endswith(".ndjson") else "application/json"


def anthropic_error(kind: str, message: str) -> object:
    return {"type": "error", "error": {"type": kind, "message": message}}


def google_error(code: int, status: str, message: str) -> object:
    return {"error": {"code": code, "message": message, "status": status}}


def tgi_error(kind: str, message: str) -> object:
    return {"error": message, "error_type": kind}
