"""Team limits in a real redis-server, through the running proxy, when what Redis is given or
holds is not what a sane upstream or the proxy itself would put there (docs/limits.md):
one team's data is that team's trouble, never every team's, never a 500 or a traceback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.core.limits.admission import COUNT_MAX
from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers
from tests.support.hostile import proxied
from tests.support.redis_server import RedisServer, redis_server

ADMIN_KEY = "sk-test-admin"
HUGE = 2**53 - 1  # the largest count the proxy takes from an upstream
HELLO = [{"role": "user", "content": "Hello"}]
PRICE = {"input": 1.0, "output": 2.0}
BUDGET = {"usd": 100, "period": "month"}


def _answer(prompt: int, completion: int) -> bytes:
    body = orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1764600000, "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    })  # fmt: skip
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


async def _huge(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_answer(HUGE, HUGE))


async def _fine(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_answer(10, 20))


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as running:
        yield running


@pytest.fixture
def proxy(servers: Servers, redis: RedisServer) -> Iterator[str]:
    teams = {
        # 60 a minute: near enough its limit that each request waits for the store (no
        # reservations made ahead), so each sees what the store holds.
        "research": {
            "keys": [TEAM_KEY],
            "models": ["*"],
            "limits": {"budget": BUDGET, "requests_per_minute": 60},
        },
        "support": {
            "keys": [SUPPORT_KEY],
            "models": ["*"],
            "limits": {"budget": BUDGET, "requests_per_minute": 1000},
        },
    }
    with proxied(
        servers,
        {"huge": _huge, "fine": _fine},
        metrics=True,
        teams=teams,
        prices={"huge": PRICE, "fine": PRICE},
        admin={"keys": [ADMIN_KEY]},
        state={"redis": redis.url, "on_failure": "closed"},
    ) as (_, url, _gateway):
        yield url


async def ask(url: str, model: str, key: str) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/chat/completions", json={"model": model, "messages": HELLO}, headers=headers
        ) as response,
    ):
        return response.status, await response.json()


async def get(url: str, path: str) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.removesuffix("/v1") + path, headers=headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def metric(url: str, name: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.removesuffix("/v1") + "/metrics") as response,
    ):
        text = await response.text()
    return next(line for line in text.splitlines() if line.startswith(name))


async def test_a_huge_usage_spends_its_teams_budget_and_nobody_elses(
    proxy: str, redis: RedisServer
) -> None:
    """2**53 - 1 prompt and completion tokens on a priced model: the team's budget is spent
    (its counter held at the bound, not wrapped to -2**63 and then cleared to 0), the store
    stays up, and another team is answered as ever."""
    assert (await ask(proxy, "huge", TEAM_KEY))[0] == 200
    await asyncio.sleep(0.3)  # settled after the answer
    status, other = await ask(proxy, "fine", SUPPORT_KEY)
    assert status == 200, other
    status, refused = await ask(proxy, "fine", TEAM_KEY)
    assert status == 429 and refused["error"]["code"] == "budget", refused
    status, limits = await get(proxy, "/admin/limits")
    assert status == 200 and limits["up"] is True, limits
    research = next(t["limits"] for t in limits["data"] if t["team"] == "research")
    assert research["budget"]["remaining"] == 0 and research["budget"]["used"] >= 100
    client = redis.client()
    month = time.strftime("%Y-%m", time.gmtime())
    assert int(client.get(f"lim:{{research}}:budget:usd:{month}")) == COUNT_MAX
    ledger = client.hgetall(f"use:{{research}}:month:{month}")
    assert ledger["huge|prompt_tokens"] == str(HUGE) and ledger["huge|requests"] == "1"
    assert int(ledger["huge|cost_nanos"]) == COUNT_MAX
    client.close()
    status, usage = await get(proxy, f"/admin/usage?period={month}")
    assert status == 200, usage
    assert await metric(proxy, "llm_proxy_state_up") == "llm_proxy_state_up 1.0"
    errors = await metric(proxy, 'llm_proxy_state_errors_total{operation="settle"}')
    assert errors.endswith(" 0.0")


async def test_a_counter_redis_holds_that_is_no_integer_is_its_teams_trouble_alone(
    proxy: str, redis: RedisServer
) -> None:
    """A counter that holds what the proxy never writes: the admin endpoints answer 503 naming
    it (not 500); that team's requests are answered by on_failure (closed: 503); the other
    team's are counted as ever, and the store is not taken for down."""
    assert (await ask(proxy, "fine", TEAM_KEY))[0] == 200
    month = time.strftime("%Y-%m", time.gmtime())
    key = f"lim:{{research}}:budget:usd:{month}"
    client = redis.client()
    client.set(key, "not a number")
    status, body = await get(proxy, "/admin/limits")
    assert status == 503 and body["error"]["code"] == "state_unavailable", body
    assert key in body["error"]["message"]
    status, refused = await ask(proxy, "fine", TEAM_KEY)
    assert status == 503 and refused["error"]["code"] == "limits_unavailable", refused
    assert "counters" in refused["error"]["message"]
    for _ in range(3):
        assert (await ask(proxy, "fine", SUPPORT_KEY))[0] == 200
    await asyncio.sleep(0.3)
    assert await metric(proxy, "llm_proxy_state_up") == "llm_proxy_state_up 1.0"
    ledger = client.hgetall(f"use:{{support}}:month:{month}")
    assert ledger["fine|requests"] == "3" and ledger["fine|cost_nanos"] == str(3 * 50_000)
    assert client.get(key) == "not a number"  # left alone by the settlements
    client.delete(key)
    assert (await ask(proxy, "fine", TEAM_KEY))[0] == 200
    assert (await get(proxy, "/admin/limits"))[0] == 200
    client.close()
