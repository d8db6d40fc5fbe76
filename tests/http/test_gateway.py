"""The gateway's reports: finished requests reach every observer, later and all together, even
when one observer fails."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from proxy.core.exchange import Exchange
from proxy.http.app import Observer
from tests.support.harness import TEAM_KEY, Servers


class Failing(Observer):
    def finished(self, exchange: Exchange) -> None:
        raise RuntimeError("an observer's bug")


class Recording(Observer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def finished(self, exchange: Exchange) -> None:
        self.seen.append((exchange.request_id, exchange.status))


async def test_a_failing_observer_costs_the_others_no_report(
    servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    recording = Recording()
    url, _, _ = servers.start_app(
        {"gpt-4o": {"provider": "emu", "model": "openai"}}, observers=[Failing(), recording]
    )
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}
    caplog.set_level(logging.ERROR, logger="proxy")
    async with aiohttp.ClientSession() as session:
        for i in range(3):
            headers = {"Authorization": f"Bearer {TEAM_KEY}", "X-Request-Id": f"req-{i}"}
            async with session.post(url + "/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while len(recording.seen) < 3:
        assert loop.time() < deadline, recording.seen
        await asyncio.sleep(0.01)
    assert recording.seen == [("req-0", 200), ("req-1", 200), ("req-2", 200)]
    failures = [r for r in caplog.records if "failed on request" in r.getMessage()]
    assert len(failures) == 3
    assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in failures)
