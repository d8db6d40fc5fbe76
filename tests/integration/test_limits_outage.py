"""Spend during a Redis outage reaches the team's counters once Redis answers again: a proxy
with ``on_failure: open`` in front of a real redis-server that stops answering for a while
(docs/limits.md, "When Redis fails")."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.http.test_limits_proxy import ADMIN_KEY, COMPLETION, HELLO, PROMPT, admin
from tests.support.harness import TEAM_KEY, Servers
from tests.support.redis_server import RedisServer, redis_server

SPENT = PROMPT + COMPLETION  # what each answer of the "openai" fixture reports


@pytest.fixture
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


def budget_used(url: str) -> Any:
    status, body = admin(url, "/admin/limits")
    assert status == 200, body
    return body["data"][0]["limits"]["budget"]["used"] if body["up"] else None


def test_what_requests_admitted_unchecked_spent_is_charged_once_redis_answers(
    servers: Servers, redis: RedisServer
) -> None:
    """Stopped, not killed, Redis keeps what it counted: only the outage's spend is missing
    from its counters, unless the proxy charges it there once Redis answers."""
    url, _ = servers.start_proxy(
        {"gpt": {"provider": "emu", "model": "openai"}},
        teams={
            "research": {
                "keys": [TEAM_KEY],
                "models": ["*"],
                "limits": {"budget": {"tokens": 3000, "period": "day"}},
            }
        },
        admin={"keys": [ADMIN_KEY]},
        state={"redis": redis.url, "on_failure": "open", "timeout": 0.2},
    )
    assert redis.process is not None
    with openai.OpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0) as client:
        client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=400)
        redis.process.send_signal(signal.SIGSTOP)
        try:
            # Without max_tokens, each would reserve 4096 tokens, more than the budget: Redis
            # would refuse every one. Unchecked, each is admitted, and spends.
            for _ in range(6):
                client.chat.completions.create(model="gpt", messages=HELLO)
        finally:
            redis.process.send_signal(signal.SIGCONT)
        # The settlements wait for the store to be tried again (a second after it failed).
        deadline = time.monotonic() + 10
        while (used := budget_used(url)) != 7 * SPENT and time.monotonic() < deadline:
            time.sleep(0.2)
        assert used == 7 * SPENT
        # 2653 spent of 3000: a reservation of 400 tokens and the prompt does not fit.
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=400)
    assert refused.value.code == "budget"
