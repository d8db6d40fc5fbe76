"""The metrics reference (docs/metrics.md) lists exactly what GET /metrics exposes after some
traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.metrics import (
    ALPHA_KEY,
    HELLO,
    TEAMS,
    Stage,
    exposed_metrics,
    readme_metrics,
    stage,
)

UNLABELLED = (
    "llm_proxy_log_lines_dropped_total",
    "llm_proxy_state_up",
    "llm_proxy_settlements_dropped_total",
    "llm_proxy_telemetry_dropped_spans_total",
)
LIMITS = {
    "requests_per_minute": 1000,
    "tokens_per_minute": 1_000_000,
    "concurrency": 50,
    "budget": {"tokens": 10_000_000, "period": "day"},
}


@pytest.fixture(scope="module")
def running() -> Iterator[Stage]:
    with stage() as built:
        yield built


def test_docs_list_metrics_with_types_and_labels() -> None:
    table = readme_metrics()
    assert len(table) == 27
    for name, (kind, labels) in table.items():
        assert name.startswith("llm_proxy_")
        assert kind in ("counter", "gauge", "histogram")
        assert (kind == "counter") == name.endswith("_total")
        assert (kind == "histogram") == name.endswith("_seconds")
        # Every metric is by something, but for what concerns the worker's stderr, the
        # limits' state store or the telemetry's collector as a whole.
        assert bool(labels) != (name in UNLABELLED)


async def test_docs_match_the_exposition(running: Stage) -> None:
    proxy = running.proxy(
        {
            "llama": {"provider": "emu", "model": "friendli"},
            "cut": {"provider": "emu", "model": "openai.chat.stream.sse@stall-after=2000"},
        },
        # llama's tokens cost something; cut's are unpriced: both series are shown.
        prices={"llama": {"input": 0.1, "output": 0.4}},
        # Every kind of limit, loose enough to refuse nothing: their series are shown.
        teams={**TEAMS, "alpha": {**TEAMS["alpha"], "limits": LIMITS}},
        # The second request is the first's answer from the cache: the cache's series are shown.
        cache={"models": ["llama"]},
    )
    auth = {"Authorization": f"Bearer {ALPHA_KEY}"}
    async with aiohttp.ClientSession() as session:
        for stream in (True, False):
            body = {"model": "llama", "messages": HELLO, "stream": stream}
            async with session.post(f"{proxy.url}/chat/completions", json=body, headers=auth) as r:
                assert r.status == 200
                await r.read()
        # A client that hangs up mid-stream, for the disconnect counter.
        body = {"model": "cut", "messages": HELLO, "stream": True}
        response = await session.post(f"{proxy.url}/chat/completions", json=body, headers=auth)
        await response.content.readline()
        response.close()
        deadline = asyncio.get_running_loop().time() + 10
        while not proxy.value("llm_proxy_client_disconnects_total"):
            assert asyncio.get_running_loop().time() < deadline, "the hang-up was never counted"
            await asyncio.sleep(0.01)
        async with session.get(f"{proxy.root}/metrics") as r:
            text = await r.text()
    assert exposed_metrics(text) == readme_metrics()
