"""Real servers for the tests: the emulator and the proxy on loopback, in a thread of their own.

The servers run on their own event loop in a background thread, so that the synchronous
``openai`` client, the asynchronous one and raw HTTP clients in the tests all talk to them over
real sockets, as an application would.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import types
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

import proxy
from proxy.core.config import Config, parse_config
from proxy.core.exchange import Exchange
from proxy.emulator import build_emulator_app
from proxy.emulator.cloud import CloudAuth
from proxy.http.app import Gateway, Observer
from proxy.ops.metrics import Exposition, metrics_routes
from proxy.ops.server import ProxyRunner, make_observers

TEAM_KEY = "sk-test-research"
SUPPORT_KEY = "sk-test-support"
UPSTREAM_SECRET = "sk-upstream-secret-value"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LoopThread:
    """An event loop running in a daemon thread; ``call`` runs a coroutine on it and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, factory: Callable[[], Awaitable[Any]], timeout: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(_await(factory), self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _await(factory: Callable[[], Awaitable[Any]]) -> Any:
    return await factory()


async def start_site(app: web.Application | Gateway, port: int) -> web.BaseRunner:
    """Serve ``app`` on loopback: a proxy as ``llm-proxy serve`` does, else an aiohttp app."""
    runner: web.BaseRunner
    if isinstance(app, Gateway):
        runner = ProxyRunner(app)
    else:
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def proxy_config(emulator_url: str, models: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A configuration with one provider per dialect, all pointing at the emulator."""
    providers = {
        "emu": {"base_url": f"{emulator_url}/v1", "api_key": UPSTREAM_SECRET},
        "emu-friendli-2024": {
            "base_url": f"{emulator_url}/v1",
            "api_key": UPSTREAM_SECRET,
            "dialect": "friendli-2024",
        },
        "emu-maritaca": {
            "base_url": f"{emulator_url}/api",
            "api_key": UPSTREAM_SECRET,
            "dialect": "maritaca-inference",
        },
        # Native APIs: their paths start at the emulator's root, as at the providers' own hosts.
        "emu-anthropic": {"base_url": emulator_url, "api_key": UPSTREAM_SECRET, "api": "anthropic"},
        "emu-gemini": {"base_url": emulator_url, "api_key": UPSTREAM_SECRET, "api": "gemini"},
        "emu-cohere": {"base_url": emulator_url, "api_key": UPSTREAM_SECRET, "api": "cohere"},
        # A Bedrock API key (a bearer token): the emulator checks no signature unless told to.
        "emu-bedrock": {
            "base_url": emulator_url,
            "api_key": UPSTREAM_SECRET,
            "api": "bedrock",
            "region": "us-east-1",
        },
        "emu-ollama": {"base_url": emulator_url, "api": "ollama"},
        # TGI's body names no model: the emulator takes it from the path (docs/emulator.md).
        "emu-tgi": {
            "base_url": f"{emulator_url}/tgi/tgi.generate-stream.sse",
            "api_key": UPSTREAM_SECRET,
            "api": "tgi",
        },
        # Serves the Responses API itself: /v1/responses is passed through to it.
        "emu-responses": {
            "base_url": f"{emulator_url}/v1",
            "api_key": UPSTREAM_SECRET,
            "responses": True,
        },
        "emu-azure": {
            "base_url": f"{emulator_url}/openai/v1",
            "headers": {"api-key": UPSTREAM_SECRET},
            "query": {"api-version": "preview"},
        },
        "emu-fast": {
            "base_url": f"{emulator_url}/v1",
            "api_key": UPSTREAM_SECRET,
            "timeouts": {"connect": 2, "first_byte": 1, "idle": 1, "total": 3},
        },
        "down": {"base_url": f"http://127.0.0.1:{free_port()}/v1", "timeouts": {"connect": 2}},
    }
    raw: dict[str, Any] = {
        "providers": providers,
        "models": models,
        "teams": {
            "research": {"keys": [TEAM_KEY], "models": ["*"]},
            "support": {"keys": [SUPPORT_KEY], "models": ["llama-*"]},
        },
        "access_log": False,
        # One attempt per request unless a test says otherwise: the error cases here are about
        # what one failure looks like; retries and fallbacks have tests of their own.
        "routing": {"attempts": 1},
    }
    raw.update(extra)
    return raw


class Servers:
    """The emulator (serving the test fixtures) and a proxy configured in front of it.

    ``cloud``: the Bedrock and Vertex credentials the emulator accepts (tests/support/cloud.py);
    ``emulator_port``: its port, when a file written before it starts must name its URL.
    """

    def __init__(
        self,
        loop: LoopThread,
        recordings: Path,
        chunk_delay: float = 0.0,
        *,
        cloud: CloudAuth | None = None,
        emulator_port: int | None = None,
    ) -> None:
        self.loop = loop
        self.emulator_port = emulator_port or free_port()
        self.emulator_url = f"http://127.0.0.1:{self.emulator_port}"
        self._runners: list[web.BaseRunner] = []
        emulator = build_emulator_app(recordings, chunk_delay=chunk_delay, cloud=cloud)
        self._runners.append(loop.call(lambda: start_site(emulator, self.emulator_port)))

    def start_proxy(self, models: dict[str, Any], **extra: Any) -> tuple[str, Config]:
        """Start a proxy for ``models``; returns its base URL (…/v1) and its configuration."""
        url, config, _ = self.start_app(models, **extra)
        return url, config

    def start_app(
        self,
        models: dict[str, Any],
        *,
        metrics: bool = False,
        observers: Sequence[Observer] = (),
        **extra: Any,
    ) -> tuple[str, Config, Gateway]:
        """Start a proxy; with ``metrics``, its metrics on a registry of its own at /metrics;
        ``observers`` see its requests too."""
        config = parse_config(
            yaml.safe_load(yaml.safe_dump(proxy_config(self.emulator_url, models, **extra))), {}
        )
        registry = CollectorRegistry()
        observers = [*(make_observers(config, registry) if metrics else []), *observers]
        routes = metrics_routes(Exposition(registry)) if metrics else None
        gateway = Gateway(config, observers=observers, extra_routes=routes)
        port = free_port()
        self._runners.append(self.loop.call(lambda: start_site(gateway, port)))
        return f"http://127.0.0.1:{port}/v1", config, gateway

    def close(self) -> None:
        for runner in reversed(self._runners):
            self.loop.call(runner.cleanup)


@contextmanager
def running_servers(
    recordings: Path,
    chunk_delay: float = 0.0,
    *,
    cloud: CloudAuth | None = None,
    emulator_port: int | None = None,
) -> Iterator[Servers]:
    loop = LoopThread()
    servers = Servers(loop, recordings, chunk_delay, cloud=cloud, emulator_port=emulator_port)
    try:
        yield servers
    finally:
        servers.close()
        loop.stop()


_PROXY_CODE = str(Path(proxy.__file__).parent)


def cyclic_garbage_of_ours() -> list[str]:
    """What of the proxy's the cycle collector alone would free now: its exchanges, and the
    frames of its code (each holding a request's objects). Collects everything else."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [
            type(thing).__name__
            if isinstance(thing, Exchange)
            else f"frame of {thing.f_code.co_qualname}"
            for thing in gc.garbage
            if isinstance(thing, Exchange)
            or (isinstance(thing, types.FrameType) and _PROXY_CODE in thing.f_code.co_filename)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()  # saved, not freed: free them now, or the next look finds them again
    return found


@contextmanager
def collector_off() -> Iterator[None]:
    """The cycle collector off for the block (what earlier tests left collected first), so that
    whatever the block leaves to it is still there for ``cyclic_garbage_of_ours`` to find."""
    was_enabled = gc.isenabled()
    cyclic_garbage_of_ours()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


async def upstream_requests(servers: Servers) -> list[dict[str, Any]]:
    """Every request the emulator received (its request log), oldest first."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(servers.emulator_url + "/_emulator/requests") as response,
    ):
        return list(await response.json())


async def forget_upstream_requests(servers: Servers) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.delete(servers.emulator_url + "/_emulator/requests"),
    ):
        pass
