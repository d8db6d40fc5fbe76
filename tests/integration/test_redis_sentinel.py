"""Team limits in a Redis that Sentinel watches (``state.sentinel``, docs/limits.md): a real
master, its replica and ``redis-sentinel``; the master dies mid-run, Sentinel promotes the
replica, and the proxy goes on, by ``on_failure`` meanwhile, then counting on the new master,
with no restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import redis

from tests.http.test_limits_proxy import ADMIN_KEY, COMPLETION, HELLO, PROMPT, admin
from tests.support.harness import TEAM_KEY, Servers
from tests.support.redis_server import RedisServer, SentinelServer

SPENT = PROMPT + COMPLETION  # what each answer of the "openai" fixture reports
SERVICE = "llm-proxy"


class Watched:
    def __init__(self, master: RedisServer, replica: RedisServer, sentinel: SentinelServer):
        self.master, self.replica, self.sentinel = master, replica, sentinel


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Watched]:
    master = RedisServer(tmp_path / "master")
    replica = RedisServer(tmp_path / "replica", replica_of=master.port)
    sentinel = SentinelServer(tmp_path / "sentinel", master.port, SERVICE)
    try:
        master.start()
        replica.start()
        sentinel.start()
        # Sentinel learns of the replica from the master's INFO: a failover needs it known.
        client = redis.Redis(port=sentinel.port, decode_responses=True)
        until(lambda: bool(client.sentinel_slaves(SERVICE)), "Sentinel to see the replica")
        client.close()
        yield Watched(master, replica, sentinel)
    finally:
        for server in (sentinel, replica, master):
            server.kill()


def until(done: object, what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s for {what}")
        time.sleep(0.05)


def budget_used(url: str) -> object:
    # A 503 while the store cannot be read (no master yet): asked again.
    status, body = admin(url, "/admin/limits")
    assert status in (200, 503), body
    return body["data"][0]["limits"]["budget"]["used"] if status == 200 and body["up"] else None


def test_a_failover_mid_run_follows_on_failure_then_counts_on_the_new_master(
    servers: Servers, watched: Watched
) -> None:
    url, _ = servers.start_proxy(
        {"gpt": {"provider": "emu", "model": "openai"}},
        teams={
            "research": {
                "keys": [TEAM_KEY],
                "models": ["*"],
                "limits": {"budget": {"tokens": 10**6, "period": "day"}},
            }
        },
        admin={"keys": [ADMIN_KEY]},
        state={
            "sentinel": {"hosts": [f"127.0.0.1:{watched.sentinel.port}"], "service": SERVICE},
            "on_failure": "open",
            "timeout": 0.2,
        },
    )
    with openai.OpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0) as client:

        def ask(count: int) -> None:
            for _ in range(count):
                client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=400)

        ask(3)
        until(lambda: budget_used(url) == 3 * SPENT, "the spend counted on the master")
        master = redis.Redis(port=watched.master.port)
        assert master.wait(1, 5000) == 1  # the replica holds it all
        master.close()

        watched.master.kill()
        # Sentinel calls the master down after half a second, then promotes the replica:
        # meanwhile each request is admitted unchecked (on_failure: open), none refused.
        ask(3)
        until(
            lambda: watched.sentinel.master_port_now() == watched.replica.port,
            "Sentinel to promote the replica",
        )
        ask(3)
        # The new master counts it all: what was spent before (replicated), during the
        # failover (settled once it answered) and after, with the proxy not restarted.
        until(lambda: budget_used(url) == 9 * SPENT, "the spend counted on the new master")
    promoted = redis.Redis(port=watched.replica.port, decode_responses=True)
    try:
        assert promoted.info("replication")["role"] == "master"
        assert any(key.startswith("use:{research}") for key in promoted.scan_iter())
    finally:
        promoted.close()
