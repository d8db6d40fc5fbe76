"""The response cache's Redis backend (docs/cache.md) against a real redis-server: shared by two
proxies, stored compressed under hashed keys for ``ttl_seconds``, read afresh on every request
(no copy in a worker's memory), and a miss, never an error or a hang, while Redis is down or
stopped. The emulator's request log shows which requests reached the upstream."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import time
import zlib
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDictProxy
from redis import Redis

from proxy.core.cache.entry import Entry, decode_entry, encode_entry
from tests.support.harness import (
    TEAM_KEY,
    Servers,
    forget_upstream_requests,
    upstream_requests,
)
from tests.support.redis_server import RedisServer, redis_server
from tests.support.replay import parse_frames
from tests.support.schema import validate

MODELS = {"gpt": {"provider": "emu", "model": "openai"}}
TTL = 120
KEY_FORM = re.compile(r"llm-proxy:cache:v1:[0-9a-f]{64}")
# Far longer than any wait the cache may cost a request: reaching it is a hang.
HANG = aiohttp.ClientTimeout(total=20)


@pytest.fixture
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture
def fresh(servers: Servers) -> Servers:
    asyncio.run(forget_upstream_requests(servers))
    return servers


def start_proxy(servers: Servers, redis: RedisServer, **cache: Any) -> str:
    url, _ = servers.start_proxy(
        MODELS,
        state={"redis": redis.url},
        cache={"backend": "redis", "ttl_seconds": TTL, **cache},
    )
    return url


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt", "messages": [{"role": "user", "content": text}], **extra}


async def post(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, CIMultiDictProxy[str], bytes]:
    auth = {"Authorization": f"Bearer {TEAM_KEY}", **(headers or {})}
    async with (
        aiohttp.ClientSession(timeout=HANG) as session,
        session.post(url + "/chat/completions", json=body, headers=auth) as response,
    ):
        return response.status, response.headers, await response.read()


async def reached(servers: Servers) -> int:
    """How many requests reached the upstream since the last call; forgets them."""
    count = len(await upstream_requests(servers))
    await forget_upstream_requests(servers)
    return count


def bytes_client(server: RedisServer) -> Redis:
    """A client of ``server`` that reads its values as the bytes stored."""
    return Redis(port=server.port)


def all_keys(redis: RedisServer) -> list[bytes]:
    client = bytes_client(redis)
    try:
        return sorted(key for key in client.keys("*") if isinstance(key, bytes))
    finally:
        client.close()


def stored_values(redis: RedisServer, count: int = 1) -> dict[bytes, bytes]:
    """Every cache entry in Redis, once the proxy's writes (off the request's path) of ``count``
    have landed: what a replica reading the key would find."""
    client = bytes_client(redis)
    try:
        deadline = time.monotonic() + 10
        while len(keys := client.keys("llm-proxy:cache:*")) < count:
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        values = {key: client.get(key) for key in keys}
        return {k: v for k, v in values.items() if isinstance(k, bytes) and isinstance(v, bytes)}
    finally:
        client.close()


def content_of_stream(body: bytes) -> tuple[str, str | None]:
    """The text and the finish reason a canonical stream tells (validated chunk by chunk)."""
    frames = parse_frames(body)
    assert frames[-1] == "[DONE]"
    assert frames[0]["choices"][0]["delta"]["role"] == "assistant"
    text, finish = "", None
    for chunk in frames[:-1]:
        validate(chunk, "CreateChatCompletionStreamResponse")
        for choice in chunk["choices"]:
            text += choice["delta"].get("content") or ""
            finish = choice.get("finish_reason") or finish
    return text, finish


def content_of_whole(body: bytes) -> tuple[str, str | None]:
    whole = orjson.loads(body)
    validate(whole, "CreateChatCompletionResponse")
    (choice,) = whole["choices"]
    return choice["message"]["content"], choice["finish_reason"]


async def test_an_answer_one_proxy_stored_is_a_hit_on_another(
    fresh: Servers, redis: RedisServer
) -> None:
    first, second = start_proxy(fresh, redis), start_proxy(fresh, redis)

    status, headers, whole = await post(first, ask("Whole on one, streamed on the other"))
    assert (status, headers["X-Cache"]) == (200, "miss")
    stored_values(redis)
    status, headers, streamed = await post(
        second, ask("Whole on one, streamed on the other", stream=True)
    )
    assert (status, headers["X-Cache"]) == (200, "hit")
    assert int(headers["Age"]) >= 0
    assert content_of_stream(streamed) == content_of_whole(whole)
    status, headers, again = await post(second, ask("Whole on one, streamed on the other"))
    assert (status, headers["X-Cache"], again) == (200, "hit", whole)  # the same bytes
    assert await reached(fresh) == 1

    status, headers, streamed = await post(first, ask("Streamed on one", stream=True))
    assert (status, headers["X-Cache"]) == (200, "miss")
    assert len(stored_values(redis, 2)) == 2
    status, headers, whole = await post(second, ask("Streamed on one"))
    assert (status, headers["X-Cache"]) == (200, "hit")
    assert content_of_whole(whole) == content_of_stream(streamed)
    assert await reached(fresh) == 1


async def test_redis_holds_compressed_values_under_hashed_keys_for_the_ttl(
    fresh: Servers, redis: RedisServer
) -> None:
    url = start_proxy(fresh, redis)
    secret = "the zebra-crossing password is 4711"
    status, _, whole = await post(url, ask(secret, stream=True))
    assert status == 200
    (key, raw), *others = stored_values(redis).items()
    assert not others
    assert KEY_FORM.fullmatch(key.decode()), key
    # The cache's, and the limits' (lim:...) and usage ledger's (use:...), which the ledger's
    # batch writes when it will: before this read, or after.
    every = all_keys(redis)
    assert [k for k in every if not k.startswith((b"lim:", b"use:"))] == [key]
    for word in (b"zebra", b"4711", b"password"):
        assert not any(word in k for k in every) and word not in raw
    plain = zlib.decompress(raw)  # compressed, and smaller for it
    assert len(raw) < len(plain)
    entry = decode_entry(raw)
    assert entry is not None
    assert content_of_whole(entry.body) == content_of_stream(whole)
    assert secret.encode() not in plain  # the entry holds the answer, not the question

    client = bytes_client(redis)
    try:
        assert TTL - 10 <= client.ttl(key) <= TTL
    finally:
        client.close()


async def test_an_entry_replaced_or_deleted_in_redis_is_what_the_next_request_sees(
    fresh: Servers, redis: RedisServer
) -> None:
    url = start_proxy(fresh, redis)
    body = ask("Replaced by another replica")
    assert (await post(url, body))[1]["X-Cache"] == "miss"
    (key, raw), *_ = stored_values(redis).items()
    assert (await post(url, body))[1]["X-Cache"] == "hit"
    assert await reached(fresh) == 1

    # What another replica would store after a refresh: another answer under the same key.
    entry = decode_entry(raw)
    assert entry is not None
    refreshed = orjson.loads(entry.body)
    refreshed["choices"][0]["message"]["content"] = "A refreshed answer"
    replaced = Entry(orjson.dumps(refreshed), time.time() - 30, 16, 363, "upstream")
    client = bytes_client(redis)
    try:
        client.set(key, encode_entry(replaced), ex=TTL)
        status, headers, answer = await post(url, body)
        assert (status, headers["X-Cache"]) == (200, "hit")
        assert content_of_whole(answer) == ("A refreshed answer", "stop")
        assert int(headers["Age"]) >= 30

        client.delete(key)  # expired, or evicted: the next request goes upstream
        status, headers, answer = await post(url, body)
        assert (status, headers["X-Cache"]) == (200, "miss")
        assert content_of_whole(answer) == content_of_whole(entry.body)
        assert await reached(fresh) == 1
    finally:
        client.close()


def lookups_failed(caplog: pytest.LogCaptureFixture) -> int:
    return sum("cache lookup failed" in r.getMessage() for r in caplog.records)


async def test_redis_killed_mid_run_is_a_miss_then_the_cache_works_again(
    fresh: Servers, redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.cache")
    url = start_proxy(fresh, redis)
    body = ask("Asked while Redis is down")
    await post(url, body)
    stored_values(redis)
    assert (await post(url, body))[1]["X-Cache"] == "hit"
    await reached(fresh)

    redis.kill()
    for stream in (False, True, False):
        status, headers, _ = await post(url, {**body, "stream": stream})  # within HANG
        assert (status, headers["X-Cache"]) == (200, "miss")
    assert await reached(fresh) == 3
    # The first found Redis down; the others, within the second it is left alone, never tried.
    assert lookups_failed(caplog) >= 1

    redis.start()  # on the same port, empty
    await asyncio.sleep(1.2)  # the store is left alone for a second after it failed
    assert (await post(url, body))[1]["X-Cache"] == "miss"
    assert len(stored_values(redis)) == 1
    status, headers, _ = await post(url, {**body, "stream": True})
    assert (status, headers["X-Cache"]) == (200, "hit")
    assert await reached(fresh) == 1


async def test_redis_that_hangs_is_a_miss_within_the_cache_timeout(
    fresh: Servers, redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy.cache")
    url = start_proxy(fresh, redis, timeout=0.2)
    body = ask("Asked while Redis hangs")
    await post(url, body)
    stored_values(redis)
    await reached(fresh)
    assert redis.process is not None

    redis.process.send_signal(signal.SIGSTOP)
    try:
        for stream in (False, True):
            status, headers, _ = await post(url, {**body, "stream": stream})  # within HANG
            assert (status, headers["X-Cache"]) == (200, "miss")
            await asyncio.sleep(1.1)  # past the rest: the next one asks the stopped Redis too
    finally:
        redis.process.send_signal(signal.SIGCONT)
    assert await reached(fresh) == 2
    assert lookups_failed(caplog) == 2  # each waited for the stopped Redis, and gave up

    await asyncio.sleep(1.2)
    status, headers, _ = await post(url, body)
    assert (status, headers["X-Cache"]) == (200, "hit")  # what was stored before is there
    assert await reached(fresh) == 0
