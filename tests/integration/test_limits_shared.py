"""Limits that hold across processes: three ``llm-proxy serve`` processes sharing one real
redis-server, and two workers of one server sharing their supervisor's store (docs/limits.md).

Every request goes over a fresh connection to one of the processes in turn, all at once, so
the decisions race as a fleet's would. Each test has a team of its own: counters never mix.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.metrics import Served, Stage, read_samples, scrape, serve, stage, total
from tests.support.metrics import write_config as write_proxy_config
from tests.support.redis_server import RedisServer, redis_server

ADMIN_KEY = "sk-shared-admin"
HELLO = [{"role": "user", "content": "Hello"}]
MODELS = {
    "gpt": {"provider": "emu", "model": "openai"},
    # Held a moment before its first byte: the streams of one test are all in flight at once.
    "gpt-held": {"provider": "emu", "model": "openai.chat.stream.sse@slow-first-byte=0.5"},
}
STREAM_USAGE = 16 + 300  # openai.chat.stream.sse
# What a stream of ``burst`` with max_tokens 400 reserves: its body (151 bytes), estimated.
RESERVED = 400 + 38
WHOLE_USAGE = 16 + 363  # openai.chat.json
TEAMS: dict[str, dict[str, Any]] = {
    "rpm": {"requests_per_minute": 25},
    # Far enough from its limit, at first, for the workers to reserve ahead (docs/limits.md).
    "rpm-ahead": {"requests_per_minute": 300},
    "tpm": {"tokens_per_minute": 6000},
    "budget": {"budget": {"tokens": 5000, "period": "day"}},
    "restart": {"budget": {"tokens": 790, "period": "month"}},
    "outage-open": {"requests_per_minute": 3},
    "outage-closed": {"requests_per_minute": 3},
    "workers": {"requests_per_minute": 10},
}


def key(team: str) -> str:
    return f"sk-shared-{team}"


def write_config(path: Path, emulator_url: str, **extra: Any) -> Path:
    teams = {
        name: {"keys": [key(name)], "models": ["*"], "limits": limits}
        for name, limits in TEAMS.items()
    }
    return write_proxy_config(
        path, emulator_url, MODELS, teams=teams, admin={"keys": [ADMIN_KEY]}, **extra
    )


@pytest.fixture(scope="module")
def emulator() -> Iterator[Stage]:
    with stage() as built:
        yield built


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


def start_fleet(config: Path, tmp: Path, count: int, stack: ExitStack) -> list[Served]:
    tmp.mkdir(parents=True, exist_ok=True)
    return [stack.enter_context(serve(config, 1, tmp / f"proxy-{i}")) for i in range(count)]


@pytest.fixture(scope="module")
def fleet_config(
    emulator: Stage, redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    tmp = tmp_path_factory.mktemp("fleet")
    return write_config(tmp / "proxy.yaml", emulator.emulator_url, state={"redis": redis.url})


@pytest.fixture(scope="module")
def fleet(fleet_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Served]]:
    with ExitStack() as stack:
        yield start_fleet(fleet_config, tmp_path_factory.mktemp("runs"), 3, stack)


@pytest.fixture
def window_start() -> None:
    """A minute with room for the test: a burst straddling two windows would see two
    allowances."""
    left = 60 - time.time() % 60
    if left < 20:
        time.sleep(left + 0.1)


async def one(
    session: aiohttp.ClientSession, proxy: Served, team: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any], int]:
    """(status, the body or the error, tokens used as the client saw them)."""
    url = f"{proxy.url}/chat/completions"
    headers = {"Authorization": f"Bearer {key(team)}", "Connection": "close"}
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200 or not body.get("stream"):
            answer = await response.json()
            used = answer.get("usage", {}).get("total_tokens", 0) if response.status == 200 else 0
            return response.status, answer, used
        used = 0
        async for line in response.content:
            if line.startswith(b"data: {"):
                usage = orjson.loads(line[6:]).get("usage")
                if usage:
                    used = usage["total_tokens"]
        return 200, {}, used


def burst(
    fleet: Sequence[Served], team: str, count: int, **body: Any
) -> list[tuple[int, dict[str, Any], int]]:
    async def run() -> list[tuple[int, dict[str, Any], int]]:
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            request = {"model": "gpt", "messages": HELLO, **body}
            return await asyncio.gather(
                *(one(session, fleet[i % len(fleet)], team, request) for i in range(count))
            )

    return asyncio.run(run())


def admin(proxy: Served, path: str) -> Any:
    async def get() -> Any:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(proxy.root + path, headers=headers) as response,
        ):
            assert response.status == 200, await response.text()
            return await response.json()

    return asyncio.run(get())


def limits_of(proxy: Served, team: str) -> dict[str, Any]:
    found = admin(proxy, "/admin/limits")["data"]
    return next(entry["limits"] for entry in found if entry["team"] == team)


def statuses(results: Sequence[tuple[int, dict[str, Any], int]]) -> dict[int, int]:
    counted: dict[int, int] = {}
    for status, _, _ in results:
        counted[status] = counted.get(status, 0) + 1
    return counted


def test_three_proxies_admit_exactly_the_requests_per_minute(
    fleet: list[Served], window_start: None
) -> None:
    results = burst(fleet, "rpm", 75)
    assert statuses(results) == {200: 25, 429: 50}
    codes = {answer["error"]["code"] for status, answer, _ in results if status == 429}
    assert codes == {"requests_per_minute"}
    assert limits_of(fleet[0], "rpm")["requests_per_minute"]["used"] == 25


def test_reservations_made_ahead_never_pass_the_limit_and_leave_it_whole(
    fleet: list[Served],
) -> None:
    """Waves of 100 requests at once on three proxies that reserve ahead while the team is far
    from its 300 a minute: no wave passes the limit, and once the reservations a proxy made
    ahead and did not use are released (within a second and a half), the next wave is
    admitted up to the limit exactly, until a wave finds nothing left."""
    left = 60 - time.time() % 60
    if left < 40:
        time.sleep(left + 0.1)
    admitted = 0
    ahead = []  # after each wave, what the proxies held ahead: counted, not yet used
    for _ in range(8):
        results = burst(fleet, "rpm-ahead", 100)
        codes = {answer["error"]["code"] for status, answer, _ in results if status == 429}
        assert codes <= {"requests_per_minute"}
        wave = statuses(results).get(200, 0)
        admitted += wave
        used = limits_of(fleet[0], "rpm-ahead")["requests_per_minute"]["used"]
        assert admitted <= used <= 300
        ahead.append(used - admitted)
        if not wave:
            break
        time.sleep(1.5)
    assert admitted == 300 and not wave
    assert max(ahead) > 0, ahead
    assert limits_of(fleet[0], "rpm-ahead")["requests_per_minute"]["used"] == 300


def test_tokens_per_minute_holds_with_50_concurrent_streams(
    fleet: list[Served], window_start: None
) -> None:
    """Each stream reserves about 438 tokens (its body of 151 bytes, estimated, and max_tokens)
    and uses 316: it never spends more than it reserved, so the documented bound is the limit
    itself."""
    results = burst(fleet, "tpm", 50, model="gpt-held", stream=True, max_tokens=400,
                    stream_options={"include_usage": True})  # fmt: skip
    admitted = [used for status, _, used in results if status == 200]
    assert all(used == STREAM_USAGE for used in admitted)
    assert len(admitted) >= 6000 // RESERVED and sum(admitted) <= 6000
    time.sleep(0.2)
    assert limits_of(fleet[1], "tpm")["tokens_per_minute"]["used"] == sum(admitted)


def test_a_budget_holds_with_50_concurrent_streams(fleet: list[Served]) -> None:
    results = burst(fleet, "budget", 50, model="gpt-held", stream=True, max_tokens=400,
                    stream_options={"include_usage": True})  # fmt: skip
    admitted = [used for status, _, used in results if status == 200]
    refused = {answer["error"]["code"] for status, answer, _ in results if status == 429}
    assert refused == {"budget"}
    assert len(admitted) >= 5000 // RESERVED and sum(admitted) <= 5000
    time.sleep(0.2)
    budget = limits_of(fleet[2], "budget")["budget"]
    assert budget["used"] == sum(admitted) and budget["remaining"] == 5000 - sum(admitted)


def test_a_spent_budget_stays_spent_after_every_proxy_restarts(
    fleet_config: Path, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        proxies = start_fleet(fleet_config, tmp_path / "first", 3, stack)
        # 379 tokens each, 42 reserved (max_tokens and "Hello"): two fit in 790, a third not.
        assert [s for s, _, _ in burst(proxies[:1], "restart", 1, max_tokens=40)] == [200]
        time.sleep(0.2)
        assert [s for s, _, _ in burst(proxies[1:2], "restart", 1, max_tokens=40)] == [200]
        time.sleep(0.2)
    with ExitStack() as stack:  # every process stopped; new ones, the same Redis
        proxies = start_fleet(fleet_config, tmp_path / "second", 3, stack)
        results = burst(proxies, "restart", 3, max_tokens=40)
        assert [(s, a["error"]["code"]) for s, a, _ in results] == [(429, "budget")] * 3
        assert limits_of(proxies[2], "restart")["budget"]["used"] == 2 * WHOLE_USAGE
        month = time.strftime("%Y-%m", time.gmtime())
        usage = admin(proxies[0], f"/admin/usage?period={month}")["data"]
        restart = next(team for team in usage if team["team"] == "restart")
        assert restart["requests"] == 2
        assert restart["prompt_tokens"] + restart["completion_tokens"] == 2 * WHOLE_USAGE


def state_up(proxy: Served) -> float:
    return total(read_samples(scrape(proxy.root + "/metrics")), "llm_proxy_state_up")


def said(proxy: Served, text: str) -> int:
    return sum(text in line for line in proxy.lines)


def test_redis_killed_mid_run_follows_on_failure_both_ways(
    emulator: Stage, tmp_path: Path, window_start: None
) -> None:
    with redis_server(tmp_path / "redis") as down, ExitStack() as stack:
        url, emulator_url = down.url, emulator.emulator_url
        open_ = write_config(
            tmp_path / "open.yaml", emulator_url, state={"redis": url, "on_failure": "open"}
        )
        closed = write_config(
            tmp_path / "closed.yaml", emulator_url, state={"redis": url, "on_failure": "closed"}
        )
        opened = stack.enter_context(serve(open_, 1, tmp_path / "open"))
        shut = stack.enter_context(serve(closed, 1, tmp_path / "closed"))
        assert statuses(burst([opened], "outage-open", 4)) == {200: 3, 429: 1}
        assert statuses(burst([shut], "outage-closed", 4)) == {200: 3, 429: 1}

        down.kill()
        started = time.monotonic()
        during_open = burst([opened], "outage-open", 6)
        during_closed = burst([shut], "outage-closed", 6)
        assert time.monotonic() - started < 5  # nobody waited on the dead store for long
        assert statuses(during_open) == {200: 6}  # admitted unchecked
        assert statuses(during_closed) == {503: 6}
        assert {a["error"]["code"] for _, a, _ in during_closed} == {"limits_unavailable"}
        assert said(opened, "state store (redis) failed") == 1  # one line per change
        assert said(shut, "state store (redis) failed") == 1
        assert state_up(opened) == 0 and state_up(shut) == 0

        down.start()  # empty: this Redis kept nothing
        time.sleep(1.2)  # the limiter leaves a failed store alone for a second
        assert statuses(burst([opened], "outage-open", 4)) == {200: 3, 429: 1}
        assert statuses(burst([shut], "outage-closed", 4)) == {200: 3, 429: 1}
        assert said(opened, "answers again") == 1 and said(shut, "answers again") == 1
        assert state_up(opened) == 1 and state_up(shut) == 1
        metrics = read_samples(scrape(opened.root + "/metrics"))
        assert total(metrics, "llm_proxy_state_errors_total") >= 1


def test_the_workers_of_one_server_share_limits_without_redis(
    emulator: Stage, tmp_path: Path, window_start: None
) -> None:
    config = write_config(tmp_path / "proxy.yaml", emulator.emulator_url)
    with serve(config, 2, tmp_path / "run") as served:
        results = burst([served], "workers", 30)
        assert statuses(results) == {200: 10, 429: 20}
        time.sleep(0.2)
        month = time.strftime("%Y-%m", time.gmtime())
        for _ in range(4):  # whichever worker answers, the ledger is the same
            usage = admin(served, f"/admin/usage?period={month}")["data"]
            workers = next(team for team in usage if team["team"] == "workers")
            assert workers["requests"] == 10
            assert workers["prompt_tokens"] + workers["completion_tokens"] == 10 * WHOLE_USAGE
