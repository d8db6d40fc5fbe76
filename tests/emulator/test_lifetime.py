"""Lifetime: nothing the emulator does outlives its server, and its command line."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from proxy.emulator import build_emulator_app, run_emulator
from proxy.emulator.__main__ import parse_args
from proxy.emulator.server import EMULATOR
from tests.emulator.exchange import packaged


async def wait_for_requests(app: web.Application, count: int) -> None:
    for _ in range(500):
        if len(app[EMULATOR].requests) >= count:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"the emulator did not receive {count} requests")


async def test_shutdown_cuts_off_responses_in_progress(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    app = build_emulator_app(chunk_delay=30)
    server = await aiohttp_server(app)
    url = server.make_url("/v1/chat/completions")
    models = ["x@hang", "openai@stall-after=10", "x@endless", "openai", "openai@slow-first-byte=60"]

    async def read(model: str) -> bytes:
        async with session.post(url, json={"model": model, "stream": True}) as resp:
            return await resp.read()

    closed = asyncio.Event()

    async def stop_reading() -> bytes:
        # The emulator writes until the socket buffers fill, and then its write waits.
        async with session.post(url, json={"model": "x@no-newline"}) as resp:
            await resp.content.readexactly(10)
            await closed.wait()
            return await resp.read()

    requests = [asyncio.ensure_future(read(model)) for model in models]
    requests.append(asyncio.ensure_future(stop_reading()))
    await wait_for_requests(app, len(requests))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    await server.close()
    assert time.monotonic() - started < 5
    closed.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*requests, return_exceptions=True), 5)
    assert [
        type(outcome) for outcome in outcomes if not isinstance(outcome, aiohttp.ClientError)
    ] == []


async def test_run_emulator_serves_until_cancelled(
    session: aiohttp.ClientSession, unused_tcp_port: int
) -> None:
    serving = asyncio.ensure_future(run_emulator("127.0.0.1", unused_tcp_port))
    url = f"http://127.0.0.1:{unused_tcp_port}/v1/chat/completions"
    for _ in range(200):
        try:
            async with session.post(url, json={"model": "openai"}) as resp:
                assert await resp.read() == packaged("openai.chat.json")
                break
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.01)
    else:
        pytest.fail("the emulator did not start")
    hanging = asyncio.ensure_future(session.post(url, json={"model": "x@hang"}))
    await asyncio.sleep(0.05)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(serving, 5)
    with pytest.raises(aiohttp.ClientError):
        await hanging


def test_command_line() -> None:
    args = parse_args(["--port", "9", "--chunk-delay", "0.5", "--fault", "chat=status=503"])
    assert (args.host, args.port, args.chunk_delay) == ("127.0.0.1", 9, 0.5)
    assert (args.recordings, args.fault) == (None, {"chat": "status=503"})
    with pytest.raises(SystemExit):
        parse_args(["--port", "9", "--fault", "chat"])
