"""Findings 3, 4 and 5 of the security review with every store, through ``llm-proxy serve``:
this process's own (one worker), the supervisor's (two workers), and Redis (one and two
workers), in front of a hostile upstream of the tests' own (docs/limits.md).

- 3: a reservation counts the whole body (tools, response_format, Responses instructions and
  max_output_tokens), not only the messages' text.
- 4: a usage of 2**53 - 1 tokens on a priced model spends its team's budget, held at the bound,
  and nobody else's: no counter wraps, no store is taken for down.
- 5: what requests admitted unchecked spent while a shared store did not answer (stopped with
  SIGSTOP: Redis, or the supervisor that serves the workers' store) is charged once it does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.core.limits.admission import COUNT_MAX
from tests.support.harness import LoopThread
from tests.support.hostile import HostileUpstream, Script
from tests.support.metrics import Served, read_samples, scrape, serve, total, write_config
from tests.support.redis_server import RedisServer, redis_server

ADMIN_KEY = "sk-hostile-admin"
HELLO = [{"role": "user", "content": "Hello"}]
HUGE = 2**53 - 1  # the largest count the proxy takes from an upstream
HOLD = 1.0  # how long the "held" upstreams wait: a burst's requests are all in flight at once
SPENT = 10 + 20  # the usage of each answer of "fine" and "held"
RESPONSE = Path(__file__).parents[1] / "fixtures/responses/contract.openai.responses.json"
PRICE = {"input": 1.0, "output": 2.0}
USD_BUDGET = {"usd": 100, "period": "month"}
TEAMS: dict[str, dict[str, Any]] = {
    **{
        team: {"tokens_per_minute": 20_000}
        for team in ("tools", "format", "instructions", "output")
    },
    # 60 a minute: near its limit, so that no worker reserves ahead for it (docs/limits.md),
    # and each of its requests sees what the store holds.
    "huge": {"budget": USD_BUDGET, "requests_per_minute": 60},
    "bystander": {"budget": USD_BUDGET, "requests_per_minute": 1000},
    # A request without max_tokens reserves 4096 tokens: more than all of it.
    "outage": {"budget": {"tokens": 600, "period": "day"}},
}
# About 24 KB of JSON that is no message text: about 6000 tokens at four bytes a token.
BIG_SCHEMA = {
    "type": "object",
    "properties": {f"field_{i}": {"type": "string", "description": "x" * 200} for i in range(100)},
}
BIG_TOOLS = [{"type": "function", "function": {"name": "big", "parameters": BIG_SCHEMA}}]
BIG_FORMAT = {"type": "json_schema", "json_schema": {"name": "big", "schema": BIG_SCHEMA}}
BUILT_IN = [{"type": "web_search_preview"}]  # only a Responses upstream takes it: passed through


def key(team: str) -> str:
    return f"sk-hostile-{team}"


def answer(body: bytes) -> bytes:
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def chat(prompt: int, completion: int) -> bytes:
    return answer(orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1764600000, "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }))  # fmt: skip


def script(data: bytes, hold: float = 0.0) -> Script:
    async def run(request: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(hold)
        writer.write(data)

    return run


SCRIPTS = {
    "held": script(chat(10, 20), HOLD),
    "native": script(answer(RESPONSE.read_bytes()), HOLD),
    "huge": script(chat(HUGE, HUGE)),
    "fine": script(chat(10, 20)),
}


@dataclass
class Proxy:
    served: Served
    store: str  # "memory", "workers" or "redis"
    stoppable: int | None  # the pid that serves its shared store, stopped for an outage


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    loop = LoopThread()
    hostile = HostileUpstream(SCRIPTS)
    loop.call(hostile.start)
    try:
        yield hostile
    finally:
        loop.call(hostile.stop)
        loop.stop()


@pytest.fixture(
    scope="module", params=[("memory", 1), ("workers", 2), ("redis", 1), ("redis", 2)],
    ids=["memory-1", "workers-2", "redis-1", "redis-2"],
)  # fmt: skip
def proxy(
    request: pytest.FixtureRequest,
    upstream: HostileUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proxy]:
    store, workers = request.param
    tmp = tmp_path_factory.mktemp(f"{store}-{workers}")
    providers: dict[str, Any] = {name: {"base_url": upstream.url(name)} for name in SCRIPTS}
    providers["native"]["responses"] = True
    extra: dict[str, Any] = {}
    with ExitStack() as stack:
        stoppable = None
        if store == "redis":
            redis: RedisServer = stack.enter_context(redis_server(tmp / "redis"))
            assert redis.process is not None
            stoppable = redis.process.pid
            # As the supervisor's store is (its settings are for Redis alone): open, 0.25 s.
            extra["state"] = {"redis": redis.url}
        config = write_config(
            tmp / "proxy.yaml",
            f"http://127.0.0.1:{upstream.port}",
            {name: {"provider": name, "model": "up"} for name in SCRIPTS},
            providers=providers,
            teams={name: {"keys": [key(name)], "models": ["*"], "limits": limits}
                   for name, limits in TEAMS.items()},
            prices=dict.fromkeys(SCRIPTS, PRICE),
            admin={"keys": [ADMIN_KEY]},
            **extra,
        )  # fmt: skip
        served = stack.enter_context(serve(config, workers, tmp / "run"))
        if store == "workers":
            stoppable = served.process.pid  # the supervisor: its thread serves the store
        yield Proxy(served, store, stoppable)


async def post(proxy: Proxy, team: str, body: dict[str, Any], path: str) -> tuple[int, Any]:
    # A connection each: with two workers, the kernel spreads them over both.
    headers = {"Authorization": f"Bearer {key(team)}", "Connection": "close"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.served.url + path, json=body, headers=headers) as response,
    ):
        return response.status, await response.json()


async def chat_of(proxy: Proxy, team: str, model: str, **body: Any) -> tuple[int, Any]:
    return await post(proxy, team, {"model": model, "messages": HELLO, **body}, "/chat/completions")


async def admin(proxy: Proxy, path: str) -> Any:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Connection": "close"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(proxy.served.root + path, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def limits_of(proxy: Proxy, team: str) -> dict[str, Any]:
    found = (await admin(proxy, "/admin/limits"))["data"]
    return next(entry["limits"] for entry in found if entry["team"] == team)


async def budget_reaches(proxy: Proxy, team: str, used: float) -> float:
    """The team's budget used, once it is ``used`` (settled off the requests' path, by any
    worker), or as it is after 10 seconds."""
    deadline = time.monotonic() + 10
    while (found := (await limits_of(proxy, team))["budget"]["used"]) != used:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    return float(found)


async def test_a_reservation_counts_the_whole_body(proxy: Proxy) -> None:
    """Ten requests at once per team, each reserving its body at four bytes a token: 24 KB of
    tools or of a response_format schema (6000 tokens: 3 fit in 20,000), 48 KB of Responses
    instructions (12,000: 1 fits), or a Responses max_output_tokens of 8000 (2 fit)."""
    left = 60 - time.time() % 60
    if left < 3:  # a burst straddling two minutes would see two allowances
        await asyncio.sleep(left + 0.05)
    chats = {"model": "held", "messages": HELLO, "max_tokens": 1}
    responses = {"model": "native", "input": "Hello", "tools": BUILT_IN}
    bursts = {
        "tools": ({**chats, "tools": BIG_TOOLS}, "/chat/completions"),
        "format": ({**chats, "response_format": BIG_FORMAT}, "/chat/completions"),
        "instructions": (
            {**responses, "instructions": "x" * 48_000, "max_output_tokens": 16},
            "/responses",
        ),
        "output": ({**responses, "max_output_tokens": 8000}, "/responses"),
    }
    sent = [(team, body, path) for team, (body, path) in bursts.items() for _ in range(10)]
    results = await asyncio.gather(*(post(proxy, *request) for request in sent))
    admitted = {team: 0 for team in bursts}
    for (team, _, _), (status, body) in zip(sent, results, strict=True):
        assert status == 200 or body["error"]["code"] == "tokens_per_minute", body
        admitted[team] += status == 200
    assert admitted == {"tools": 3, "format": 3, "instructions": 1, "output": 2}


async def test_a_huge_usage_spends_its_teams_budget_and_nobody_elses(proxy: Proxy) -> None:
    """2**53 - 1 prompt and completion tokens on a priced model: the team's budget counter is
    held at the bound (not wrapped, nor past what the store can count), the store answers as
    ever, and another team is answered as ever."""
    assert (await chat_of(proxy, "huge", "huge"))[0] == 200
    bound = round(COUNT_MAX / 1e9, 9)  # nano-USD, shown in USD
    assert await budget_reaches(proxy, "huge", bound) == bound
    status, other = await chat_of(proxy, "bystander", "fine")
    assert status == 200, other
    status, refused = await chat_of(proxy, "huge", "fine")
    assert status == 429 and refused["error"]["code"] == "budget", refused
    limits = await admin(proxy, "/admin/limits")
    assert limits["up"] is True and limits["store"] == proxy.store
    assert (await limits_of(proxy, "huge"))["budget"]["remaining"] == 0
    month = time.strftime("%Y-%m", time.gmtime())
    # A shared store's settlements go out a moment after the request (docs/limits.md).
    for _ in range(100):
        usage = (await admin(proxy, f"/admin/usage?period={month}"))["data"]
        if next(team for team in usage if team["team"] == "bystander")["requests"]:
            break
        await asyncio.sleep(0.05)
    huge = next(team for team in usage if team["team"] == "huge")
    assert huge["prompt_tokens"] == HUGE and huge["cost_usd"] == bound
    bystander = next(team for team in usage if team["team"] == "bystander")
    assert bystander["requests"] == 1 and bystander["cost_usd"] == 50e-6
    samples = read_samples(scrape(proxy.served.root + "/metrics"))
    assert total(samples, "llm_proxy_state_up") == 1
    assert total(samples, "llm_proxy_state_errors_total", operation="settle") == 0


async def test_spend_while_the_store_is_stopped_is_charged_once_it_answers(proxy: Proxy) -> None:
    """Stopped, not killed, the store keeps what it counted: only the outage's spend is missing
    from its counters, unless the workers charge it there once it answers again."""
    if proxy.stoppable is None:
        pytest.skip("this process's own store never fails to answer")
    assert (await chat_of(proxy, "outage", "fine", max_tokens=400))[0] == 200
    assert await budget_reaches(proxy, "outage", SPENT) == SPENT
    os.kill(proxy.stoppable, signal.SIGSTOP)
    try:
        # Each would reserve 4096 tokens, more than the budget: the store would refuse every
        # one. Unchecked (on_failure open), each is admitted, and spends.
        for _ in range(6):
            status, body = await chat_of(proxy, "outage", "fine")
            assert status == 200, body
    finally:
        os.kill(proxy.stoppable, signal.SIGCONT)
    # Settled once the store is tried again (a second after it failed).
    assert await budget_reaches(proxy, "outage", 7 * SPENT) == 7 * SPENT
    # 210 spent of 600: a reservation of 400 tokens and the prompt does not fit.
    status, refused = await chat_of(proxy, "outage", "fine", max_tokens=400)
    assert status == 429 and refused["error"]["code"] == "budget", refused
