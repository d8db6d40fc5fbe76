"""The request log (``GET``/``DELETE /_emulator/requests``): what the emulator was sent, bad
requests too, kept to a bounded length."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer

from proxy.emulator.request_log import REQUEST_LOG_SIZE
from tests.emulator.exchange import post


async def test_request_log_shows_what_was_sent(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai", "stream": True, "stream_options": {"include_usage": True}}
    headers = [("Authorization", "Bearer sk-upstream"), ("X-Dup", "a"), ("X-Dup", "b")]
    params = {"api-version": "2024-10-21"}
    url = emulator.make_url("/openai/deployments/d/chat/completions")
    async with session.post(url, json=body, headers=headers, params=params) as resp:
        await resp.read()
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert len(log) == 1
    (entry,) = log
    assert entry["method"] == "POST"
    assert entry["path"] == entry["raw_path"] == "/openai/deployments/d/chat/completions"
    assert entry["query_string"] == "api-version=2024-10-21"
    assert entry["query"] == {"api-version": "2024-10-21"}
    assert entry["headers"]["authorization"] == "Bearer sk-upstream"
    assert entry["headers"]["x-dup"] == "a, b"
    assert entry["json"] == body

    async with session.delete(emulator.make_url("/_emulator/requests")) as resp:
        assert resp.status == 204
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        assert await resp.json() == []


async def test_request_log_records_bad_requests_too(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    async with session.post(emulator.make_url("/v1/chat/completions"), data=b"{") as resp:
        assert resp.status == 400
    async with session.get(emulator.make_url("/nowhere")) as resp:
        assert resp.status == 404
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert [(e["method"], e["path"], e["json"]) for e in log] == [
        ("POST", "/v1/chat/completions", None),
        ("GET", "/nowhere", None),
    ]


async def test_request_log_shows_native_requests(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    gemini = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    tgi = {"inputs": "Hi", "parameters": {"details": True}}
    anthropic = {"model": "anthropic", "max_tokens": 16, "messages": [], "stream": True}
    requests = [
        ("/v1beta/models/gemini:streamGenerateContent?alt=sse", gemini),
        ("/tgi/tgi.generate-stream.sse/generate_stream", tgi),
        ("/v1/messages", anthropic),
    ]
    for path, body in requests:
        assert (await post(session, emulator, path, body))[0] == 200
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert [(e["method"], e["path"], e["query"], e["json"]) for e in log] == [
        ("POST", "/v1beta/models/gemini:streamGenerateContent", {"alt": "sse"}, gemini),
        ("POST", "/tgi/tgi.generate-stream.sse/generate_stream", {}, tgi),
        ("POST", "/v1/messages", {}, anthropic),
    ]


async def test_request_log_is_bounded(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    for index in range(REQUEST_LOG_SIZE + 2):
        async with session.get(emulator.make_url(f"/nowhere/{index}")) as resp:
            await resp.read()
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert len(log) == REQUEST_LOG_SIZE
    assert (log[0]["path"], log[-1]["path"]) == ("/nowhere/2", f"/nowhere/{REQUEST_LOG_SIZE + 1}")
