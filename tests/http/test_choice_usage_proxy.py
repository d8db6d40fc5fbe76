"""Usage on the chunks of a stream of several choices, through the running proxy
(docs/metering.md): a prompt is counted once, and the client is told what is metered.

Running totals on every chunk (Perplexity, xAI 2024) are the response's, whichever choice the
chunk carries: the last one standing. A batch of prompts (legacy completions' ``prompt`` as a
list; TGI answers each with a count of its own) is the one case where the counts add up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.harness import TEAM_KEY, UPSTREAM_SECRET, Servers
from tests.support.hostile import EVENT_STREAM_HEAD, HostileUpstream, chunk, proxied
from tests.support.metrics import read_samples, total

AUTH = {"Authorization": f"Bearer {TEAM_KEY}"}
PROMPT = 11


def _event(
    chat: bool, index: int, text: str, usage: dict[str, int] | None, finish: Any = None
) -> bytes:
    choice: dict[str, Any] = {"index": index, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    payload = {
        "id": "hostile-1",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1764600000,
        "model": "up",
        "choices": [choice],
        "usage": usage,
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def _running(request: bytes, writer: asyncio.StreamWriter) -> None:
    """Two choices taking turns, each chunk with the response's running total: 9 at the end."""
    events = [
        _event(True, 0, "Hello", _usage(PROMPT, 1)),
        _event(True, 1, "Hi", _usage(PROMPT, 2)),
        _event(True, 0, " there", _usage(PROMPT, 4)),
        _event(True, 1, " you", _usage(PROMPT, 5)),
        _event(True, 0, ".", _usage(PROMPT, 8), "stop"),
        _event(True, 1, "!", _usage(PROMPT, 9), "stop"),
    ]
    writer.write(EVENT_STREAM_HEAD + chunk(b"".join(events) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def _batch(request: bytes, writer: asyncio.StreamWriter) -> None:
    """TGI's answer to two prompts of the same length: each choice's finish carries its own
    count, prompt and completion."""
    events = [
        _event(False, 0, " A", None),
        _event(False, 1, " B", None),
        _event(False, 0, " sub", _usage(3, 5), "length"),
        _event(False, 1, " set", _usage(3, 4), "length"),
    ]
    writer.write(EVENT_STREAM_HEAD + chunk(b"".join(events) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


SCRIPTS = {"running": _running, "batch": _batch}


@pytest.fixture(scope="module")
def hostile(servers: Servers) -> Iterator[tuple[HostileUpstream, str]]:
    with proxied(servers, SCRIPTS, provider={"api_key": UPSTREAM_SECRET}, metrics=True) as (
        upstream,
        url,
        _,
    ):
        yield upstream, url


async def _stream(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The usage the client is shown at the end of its stream."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, json=body, headers=AUTH) as response,
    ):
        raw = await response.read()
    assert response.status == 200, raw
    frames = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
    assert frames[-1] == b"[DONE]"
    usage: dict[str, Any] = orjson.loads(frames[-2])["usage"]
    return usage


async def _metered(url: str, model: str) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.removesuffix("/v1") + "/metrics") as response,
    ):
        samples = read_samples(await response.text())
    return {
        kind: total(samples, "llm_proxy_tokens_total", model=model, type=kind, source="upstream")
        for kind in ("prompt", "completion")
    }


async def test_running_totals_of_two_choices_count_the_prompt_once(
    hostile: tuple[HostileUpstream, str],
) -> None:
    _, url = hostile
    before = await _metered(url, "running")
    messages = [{"role": "user", "content": "Hello"}]
    usage = await _stream(
        url, "/chat/completions", {"model": "running", "messages": messages, "n": 2}
    )
    assert usage == {"prompt_tokens": PROMPT, "completion_tokens": 9, "total_tokens": PROMPT + 9}
    after = await _metered(url, "running")
    assert after["prompt"] - before["prompt"] == PROMPT
    assert after["completion"] - before["completion"] == 9


async def test_a_batch_of_prompts_adds_each_prompt_s_count(
    hostile: tuple[HostileUpstream, str],
) -> None:
    """Two prompts of 3 tokens each: counted once each, though the counts look alike."""
    _, url = hostile
    before = await _metered(url, "batch")
    body = {"model": "batch", "prompt": ["Deep learning is", "Machine learning is"]}
    usage = await _stream(url, "/completions", body)
    assert usage == {"prompt_tokens": 6, "completion_tokens": 9, "total_tokens": 15}
    after = await _metered(url, "batch")
    assert after["prompt"] - before["prompt"] == 6
    assert after["completion"] - before["completion"] == 9
