"""A whole answer asked for, an event stream answered: the provider's timeouts still bound it.

An upstream that ignores ``stream: false`` gets its stream collected into one response. Here it
then misbehaves (stalls after its first event, drips events slower than the idle limit,
streams for ever, stalls before any event), through the running proxy with retries on: the
client gets a 504 in time, an answer that had begun is not started over, and what the upstream
generated is metered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
import orjson
import pytest

from tests.support.harness import TEAM_KEY, UPSTREAM_SECRET, Servers
from tests.support.hostile import EVENT_STREAM_HEAD, HostileUpstream, chunk, proxied, text_event
from tests.support.schema import validate

AUTH = {"Authorization": f"Bearer {TEAM_KEY}"}
TIMEOUTS = {"connect": 2, "first_byte": 0.6, "idle": 0.5, "total": 2.5}


async def _stall(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + chunk(text_event("Once")))
    await writer.drain()
    await asyncio.sleep(30)


async def _drip(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    for _ in range(30):
        writer.write(chunk(text_event("drop")))
        await writer.drain()
        await asyncio.sleep(TIMEOUTS["idle"] * 1.6)


async def _endless(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    for _ in range(3000):
        writer.write(chunk(text_event("more ")))
        await writer.drain()
        await asyncio.sleep(0.01)


async def _silent(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    await writer.drain()
    await asyncio.sleep(30)


SCRIPTS = {"stall": _stall, "drip": _drip, "endless": _endless, "silent": _silent}


@pytest.fixture(scope="module")
def hostile(servers: Servers) -> Iterator[tuple[HostileUpstream, str]]:
    with proxied(
        servers,
        SCRIPTS,
        provider={"api_key": UPSTREAM_SECRET, "timeouts": TIMEOUTS},
        metrics=True,
        routing={"attempts": 3, "backoff": {"base": 0.01, "max": 0.02}},
    ) as (upstream, url, _):
        yield upstream, url


async def _completion_tokens(url: str, model: str) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.removesuffix("/v1") + "/metrics") as response,
    ):
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        wanted = (f'model="{model}"', 'type="completion"', 'source="estimated"')
        if line.startswith("llm_proxy_tokens_total{") and all(w in line for w in wanted):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize(
    ("script", "gap", "within", "attempts"),
    [
        # Stalled after its first event: idle (0.5 s) after it, and not tried again.
        ("stall", "idle", (0.4, 1.5), 1),
        # Events 0.8 s apart: the first gap is longer than idle.
        ("drip", "idle", (0.4, 1.5), 1),
        # Events every 10 ms for ever: the total (2.5 s).
        ("endless", "total", (2.4, 3.5), 1),
    ],
)
async def test_a_stream_collected_for_a_whole_answer_is_bounded(
    hostile: tuple[HostileUpstream, str],
    script: str,
    gap: str,
    within: tuple[float, float],
    attempts: int,
) -> None:
    upstream, url = hostile
    before = upstream.received[script]
    body = {"model": script, "messages": [{"role": "user", "content": "Hello"}]}
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/chat/completions",
            json=body,
            headers=AUTH,
            timeout=aiohttp.ClientTimeout(total=15),
        ) as response,
    ):
        raw = await response.read()
    elapsed = time.monotonic() - started
    assert response.status == 504, raw
    error = orjson.loads(raw)
    validate(error, "ErrorResponse")
    assert error["error"]["type"] == "timeout_error"
    assert f"({gap})" in error["error"]["message"]
    assert within[0] <= elapsed <= within[1], elapsed
    # The upstream had begun its answer: another attempt would only start it over.
    assert upstream.received[script] - before == attempts
    # What it generated is metered (an estimate: it sent no counts).
    assert await _completion_tokens(url, script) > 0


async def test_silence_before_the_first_event_is_tried_again(
    hostile: tuple[HostileUpstream, str],
) -> None:
    """Nothing but headers: no answer had begun, so each attempt waits its first-byte limit
    and the next deployment (here the same) is tried, as for any upstream that kept silent."""
    upstream, url = hostile
    before = upstream.received["silent"]
    body = {"model": "silent", "messages": [{"role": "user", "content": "Hello"}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/chat/completions", json=body, headers=AUTH) as response,
    ):
        raw = await response.read()
    assert response.status == 504, raw
    assert "(first byte)" in orjson.loads(raw)["error"]["message"]
    assert upstream.received["silent"] - before == 3
    assert await _completion_tokens(url, "silent") == 0
