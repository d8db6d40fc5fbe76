"""The largest body a client may send, built to be the worst case for its translation, holds up
no other team's request: through the real ``llm-proxy serve`` process (its own interpreter and
cycle collector, as deployed) with the default body limit, each endpoint and upstream dialect
gets such a body while a small request of another team is timed.

The bodies are many small items (what costs most per byte to read and to translate) and,
for the Responses API, reasoning and function calls in turn (its translation once joined
the reasoning text again for every call). The upstream answers each at once, without reading
what it got, so that the time is the proxy's.

A wait is a measure of time, which other processes on the machine would make for them: the
module runs only when pytest runs alone (not under xdist's workers), as .ci/run runs it.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from proxy.core.config import Server
from tests.support.harness import SUPPORT_KEY, TEAM_KEY, LoopThread, free_port
from tests.support.hostile import HostileUpstream

pytestmark = pytest.mark.skipif(
    int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1,
    reason="times a request: run alone (pytest -n 0 tests/integration/test_translation_time.py)",
)

LIMIT = Server().max_body_bytes  # the default
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "providers"


def _answer(body: bytes) -> Callable[[bytes, asyncio.StreamWriter], Any]:
    async def script(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    return script


_EMBEDDING = {
    "object": "list",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
    "model": "up",
    "usage": {"prompt_tokens": 1, "total_tokens": 1},
}
# Each upstream API's answer, and the provider settings that speak it.
UPSTREAMS: dict[str, tuple[bytes, dict[str, Any]]] = {
    "openai": ((FIXTURES / "openai.chat.json").read_bytes(), {}),
    "completions": ((FIXTURES / "openai.completions.json").read_bytes(), {}),
    "embeddings": (orjson.dumps(_EMBEDDING), {}),
    "anthropic": ((FIXTURES / "anthropic.messages.json").read_bytes(), {"api": "anthropic"}),
    "gemini": ((FIXTURES / "gemini.generate-content.json").read_bytes(), {"api": "gemini"}),
    "cohere": ((FIXTURES / "cohere.chat.json").read_bytes(), {"api": "cohere"}),
    "ollama": ((FIXTURES / "ollama.api-chat.json").read_bytes(), {"api": "ollama"}),
}


@pytest.fixture(scope="module")
def proxy_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    scripts = {name: _answer(body) for name, (body, _) in UPSTREAMS.items()}
    scripts["cheap"] = _answer((FIXTURES / "openai.chat.json").read_bytes())
    loop = LoopThread()
    upstream = HostileUpstream(scripts)
    loop.call(upstream.start)
    providers = {
        name: {"base_url": upstream.url(name), "api_key": "sk-upstream-0001", **settings}
        for name, (_, settings) in UPSTREAMS.items()
    }
    providers["cheap"] = {"base_url": upstream.url("cheap"), "api_key": "sk-upstream-0001"}
    models: dict[str, Any] = {name: {"provider": name, "model": "up"} for name in UPSTREAMS}
    models["llama-cheap"] = {"provider": "cheap", "model": "up"}  # the support team's
    config = tmp_path_factory.mktemp("translation") / "proxy.yaml"
    teams = {
        "research": {"keys": [TEAM_KEY], "models": ["*"]},
        "support": {"keys": [SUPPORT_KEY], "models": ["llama-*"]},
    }
    raw = {"providers": providers, "models": models, "teams": teams, "access_log": False}
    config.write_text(yaml.safe_dump(raw))
    port = free_port()
    command = [sys.executable, "-m", "proxy", "serve", "--config", str(config)]
    process = subprocess.Popen([*command, "--port", str(port)], cwd=ROOT)
    try:
        _wait_ready(port)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        loop.call(upstream.stop)
        loop.stop()


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.05)
    raise AssertionError("the proxy did not become ready")


def _filled(make: Callable[[int], dict[str, Any]]) -> bytes:
    """The body ``make(n)`` with the largest ``n`` that keeps it within the limit."""
    n = 1000
    for _ in range(2):  # an item's size grows with its index's digits: a second estimate
        n = int(n * (LIMIT - 4096) / len(orjson.dumps(make(n))))
    body = orjson.dumps(make(n))
    while len(body) > LIMIT:
        n = n * 99 // 100
        body = orjson.dumps(make(n))
    return body


def _tool_loop(model: str) -> Callable[[int], dict[str, Any]]:
    """Chat: assistant tool calls and tool results in turn, every one a message of its own."""

    def make(n: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Go"}]
        for i in range(n):
            call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "r"})
        return {"model": model, "messages": messages}

    return make


def _prompts(n: int) -> dict[str, Any]:
    return {"model": "completions", "prompt": ["p"] * n, "max_tokens": 1}


def _token_ids(n: int) -> dict[str, Any]:
    return {"model": "embeddings", "input": [[7] * n]}


def _reasoning_and_calls(model: str) -> Callable[[int], dict[str, Any]]:
    """Responses: a reasoning item and a function call in turn, all for one answer."""

    def make(n: int) -> dict[str, Any]:
        items: list[dict[str, Any]] = [{"role": "user", "content": "Go"}]
        for i in range(n):
            summary = [{"type": "summary_text", "text": "thinking it over"}]
            items.append({"type": "reasoning", "summary": summary})
            items.append(
                {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"}
            )
        return {"model": model, "input": items}

    return make


# Every endpoint, and the native dialects whose translations cost most (Cohere's and Ollama's
# are built as Anthropic's are, message by message).
CASES: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
    "chat-openai": ("/chat/completions", _tool_loop("openai")),
    "chat-anthropic": ("/chat/completions", _tool_loop("anthropic")),
    "chat-gemini": ("/chat/completions", _tool_loop("gemini")),
    "completions": ("/completions", _prompts),
    "embeddings": ("/embeddings", _token_ids),
    "responses-openai": ("/responses", _reasoning_and_calls("openai")),
    "responses-anthropic": ("/responses", _reasoning_and_calls("anthropic")),
}


async def _post(
    session: aiohttp.ClientSession, url: str, key: str, data: bytes
) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with session.post(url, data=io.BytesIO(data), headers=headers) as response:
        return response.status, await response.read()


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_largest_worst_body_holds_up_no_other_team(proxy_url: str, case: str) -> None:
    path, make = CASES[case]
    big = _filled(make)
    assert LIMIT - 64 * 1024 < len(big) <= LIMIT
    cheap = orjson.dumps({"model": "llama-cheap", "messages": [{"role": "user", "content": "Hi"}]})
    waits: list[float] = []
    async with aiohttp.ClientSession() as session:
        # Warm: the cheap request's connections are open before the big one is sent.
        assert (await _post(session, proxy_url + "/chat/completions", SUPPORT_KEY, cheap))[0] == 200
        sent = asyncio.ensure_future(_post(session, proxy_url + path, TEAM_KEY, big))
        while not sent.done():
            started = time.perf_counter()
            status, body = await _post(session, proxy_url + "/chat/completions", SUPPORT_KEY, cheap)
            waits.append(time.perf_counter() - started)
            assert status == 200, body[:300]
        status, body = await sent
    assert status == 200 or (status in (400, 413) and "error" in orjson.loads(body)), body[:300]
    assert waits, "the big request was answered before any other could be timed"
    assert max(waits) < 1.0, f"another team's request waited {max(waits):.2f} s"
