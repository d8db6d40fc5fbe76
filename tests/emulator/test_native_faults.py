"""Faults on the native APIs (Anthropic, Gemini, Cohere, Ollama, TGI): the same faults, with
errors in each provider's own envelope."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import build_emulator_app
from tests.emulator.exchange import (
    anthropic_error,
    google_error,
    packaged,
    post,
    read_until_reset,
    tgi_error,
)


def fault_message(code: int) -> str:
    return f"emulated fault: status {code}"


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        (
            "/v2/embed",
            {"model": "m@status=429", "texts": ["Hi"]},
            {"message": "emulated fault: status 429"},
        ),
        (
            "/api/embed",
            {"model": "m@status=429", "input": ["Hi"]},
            {"error": "emulated fault: status 429"},
        ),
        (
            "/v1beta/models/m@status=429:batchEmbedContents",
            {"requests": []},
            {
                "error": {
                    "code": 429,
                    "message": "emulated fault: status 429",
                    "status": "RESOURCE_EXHAUSTED",
                }
            },
        ),
    ],
)
async def test_native_embeddings_faults_in_the_providers_envelope(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: dict[str, Any],
    error: dict[str, Any],
) -> None:
    status, _, got = await post(session, emulator, path, body)
    assert (status, orjson.loads(got)) == (429, error)


@pytest.mark.parametrize(
    ("path", "body", "code", "error"),
    [
        (
            "/v1/messages",
            {"model": "anthropic@status=429"},
            429,
            anthropic_error("rate_limit_error", fault_message(429)),
        ),
        (
            "/v1/messages",
            {"model": "x@status=529", "stream": True},
            529,
            anthropic_error("overloaded_error", fault_message(529)),
        ),
        (
            "/v1/messages",
            {"model": "x@status=503"},
            503,
            anthropic_error("api_error", fault_message(503)),
        ),
        (
            "/v1/messages",
            {"model": "x@status=418"},
            418,
            anthropic_error("invalid_request_error", fault_message(418)),
        ),
        (
            "/v1beta/models/gemini@status=429:generateContent",
            {},
            429,
            google_error(429, "RESOURCE_EXHAUSTED", fault_message(429)),
        ),
        (
            "/v1beta/models/x@status=503:streamGenerateContent?alt=sse",
            {},
            503,
            google_error(503, "UNAVAILABLE", fault_message(503)),
        ),
        (
            "/v1beta/models/x@status=502:streamGenerateContent",
            {},
            502,
            google_error(502, "INTERNAL", fault_message(502)),
        ),
        ("/v2/chat", {"model": "cohere@status=500"}, 500, {"message": fault_message(500)}),
        ("/api/chat", {"model": "x@status=404"}, 404, {"error": fault_message(404)}),
        (
            "/tgi/x@status=429/generate_stream",
            {"inputs": "Hi"},
            429,
            tgi_error("overloaded", fault_message(429)),
        ),
        (
            "/tgi/x@status=500/generate",
            {"inputs": "Hi"},
            500,
            tgi_error("generation", fault_message(500)),
        ),
    ],
)
async def test_native_fault_status_in_the_providers_envelope(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: object,
    code: int,
    error: object,
) -> None:
    status, headers, served = await post(session, emulator, path, body)
    assert (status, headers["Content-Type"]) == (code, "application/json")
    assert headers.get("Retry-After") == ("1" if code in (429, 503) else None)
    assert orjson.loads(served) == error


@pytest.mark.parametrize(
    ("path", "body", "name"),
    [
        (
            "/v1/messages",
            {"model": "anthropic@reset-after=300", "stream": True},
            "anthropic.messages.stream.sse",
        ),
        (
            "/v1beta/models/gemini@reset-after=300:streamGenerateContent?alt=sse",
            {},
            "gemini.generate-content.stream.sse",
        ),
        (
            "/v1beta/models/gemini@reset-after=300:streamGenerateContent",
            {},
            "gemini.generate-content.stream.json-array.json",
        ),
        (
            "/v1beta/models/gemini@reset-after=300:generateContent",
            {},
            "gemini.generate-content.json",
        ),
        ("/api/chat", {"model": "ollama@reset-after=300"}, "ollama.api-chat.stream.ndjson"),
        ("/tgi/tgi@reset-after=300/generate_stream", {"inputs": "Hi"}, "tgi.generate-stream.sse"),
    ],
)
async def test_native_fault_reset_after(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, body: object, name: str
) -> None:
    received = await read_until_reset(session, emulator, path, body)
    assert packaged(name).startswith(received)
    assert len(received) <= 300


async def test_native_fault_stall_after_and_others(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    url = emulator.make_url("/tgi/tgi@stall-after=50/generate_stream")
    async with session.post(url, json={}, timeout=aiohttp.ClientTimeout(sock_read=0.3)) as resp:
        assert await resp.content.readexactly(50) == packaged("tgi.generate-stream.sse")[:50]
        with pytest.raises(TimeoutError):
            await resp.content.read(1)
    status, headers, _ = await post(session, emulator, "/api/chat", {"model": "x@html=502"})
    assert (status, headers["Content-Type"]) == (502, "text/html")
    path = "/v1beta/models/x@wrong-type:generateContent"
    assert (await post(session, emulator, path, {}))[2] == b"hello"
    status, _, served = await post(
        session, emulator, "/v1beta/models/x@explode:generateContent", {}
    )
    assert status == 400
    assert orjson.loads(served)["error"]["status"] == "INVALID_ARGUMENT"
    assert "explode" in orjson.loads(served)["error"]["message"]


async def test_route_faults_on_native_endpoints(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    faults = {"messages": "status=529", "chat": "status=503", "generate-content": "status=429"}
    server = await aiohttp_server(build_emulator_app(faults=faults))
    status, _, served = await post(session, server, "/v1/messages", {"model": "anthropic"})
    assert (status, served) == (
        529,
        orjson.dumps(anthropic_error("overloaded_error", fault_message(529))),
    )
    # "chat" is OpenAI's endpoint name and Cohere's.
    status, _, served = await post(session, server, "/v2/chat", {"model": "cohere"})
    assert (status, orjson.loads(served)) == (503, {"message": fault_message(503)})
    for method in ("generateContent", "streamGenerateContent?alt=sse"):
        status, _, _ = await post(session, server, f"/v1beta/models/gemini:{method}", {})
        assert status == 429
    status, _, served = await post(session, server, "/api/chat", {"model": "ollama"})
    assert (status, served) == (200, packaged("ollama.api-chat.stream.ndjson"))
