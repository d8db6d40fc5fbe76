"""The framework's floor for bench/run.py: the cheapest pass-through aiohttp allows (not a gateway).

    python bench/floor.py --upstream http://127.0.0.1:PORT [--host 127.0.0.1] [--port 8080]
                          [--workers 2] [--lean]

Our proxy is an aiohttp server that calls its providers with an aiohttp client, on uvloop, in N
worker processes sharing one port. This script is the same stack with nothing of ours in it, so
that the benchmark can tell how much of our overhead is the framework's and how much is ours:
``POST /{kind}/v1/chat/completions`` (kind: plain, stream or slow) reads the body and posts it
unchanged to ``{upstream}/{kind}/v1/chat/completions``; a JSON answer is read whole and sent back,
an event stream is passed on chunk by chunk as it arrives. No auth, no parsing, no routing by
model, no normalization, no metrics, no access log, no timeouts, no error handling beyond
aiohttp's own (a client that leaves mid-stream ends its stream quietly). ``GET /healthz``
answers 200 once every worker listens.

By default it uses aiohttp the usual way: ``web.Application`` and ``ClientSession``. ``--lean``
uses aiohttp's low-level ``web.Server`` calling one handler, and requests written on a
connection of aiohttp's connector and read back with its response protocol, without
``ClientSession`` (aiohttp's internals, which a benchmark may use and the package may not). With
it, the floor is the cheapest pass-through this stack allows.

Imports nothing from the ``proxy`` package. Each worker is a daemonic child that also gets
SIGTERM when its parent dies (Linux), so stopping or killing the parent leaves none behind;
SIGTERM or SIGINT to the parent stops the workers and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
from typing import Any

import aiohttp
import uvloop
from aiohttp import web
from yarl import URL

KINDS = ("plain", "stream", "slow", "error")  # bench/gateways.py's
SESSION = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM = web.AppKey("upstream", str)
PR_SET_PDEATHSIG = 1


async def relay(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    session = request.app[SESSION]
    url = f"{request.app[UPSTREAM]}/{request.match_info['kind']}/v1/chat/completions"
    async with session.post(
        url, data=body, headers={"Content-Type": "application/json"}
    ) as upstream:
        stream = upstream.content_type == "text/event-stream"
        return await answer(request, upstream.status, stream, upstream.content)


async def answer(
    request: web.BaseRequest, status: int, stream: bool, content: aiohttp.StreamReader
) -> web.StreamResponse:
    """The upstream's answer passed back: a JSON body read whole, an event stream chunk by chunk
    as it arrives."""
    if not stream:
        return web.Response(
            body=await content.read(), status=status, content_type="application/json"
        )
    response = web.StreamResponse(status=status, headers={"Content-Type": "text/event-stream"})
    try:
        await response.prepare(request)
        async for chunk in content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away mid-stream (wrk does at its end): not an error to log
    return response


class LeanUpstream:
    """POSTs to nginx on aiohttp's connector without ClientSession (--lean)."""

    def __init__(self, upstream: str) -> None:
        self.connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
        self.timeout = aiohttp.ClientTimeout(total=None)
        loop = asyncio.get_running_loop()
        self.keys: dict[str, aiohttp.ClientRequest] = {}
        self.heads: dict[str, bytes] = {}
        for kind in KINDS:
            url = URL(f"{upstream}/{kind}/v1/chat/completions")
            self.keys[kind] = aiohttp.ClientRequest("POST", url, loop=loop)
            self.heads[kind] = (
                f"POST {url.raw_path_qs} HTTP/1.1\r\nHost: {url.host_port_subcomponent}\r\n"
                "Content-Type: application/json\r\n"
            ).encode()

    async def post(self, kind: str, body: bytes) -> tuple[Any, aiohttp.StreamReader, Any]:
        connection = await self.connector.connect(self.keys[kind], [], self.timeout)
        try:
            protocol = connection.protocol
            assert protocol is not None and connection.transport is not None
            protocol.set_response_params(read_until_eof=True)
            connection.transport.write(
                self.heads[kind] + b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            message, content = await protocol.read()
        except BaseException:
            connection.close()
            raise
        content.on_eof(connection.release)
        return message, content, connection


async def serve_lean(args: argparse.Namespace, listening: Any, stop: asyncio.Event) -> None:
    upstream = LeanUpstream(args.upstream.rstrip("/"))

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/healthz":
            ready = listening.value >= args.workers
            return web.Response(status=200 if ready else 503, text="ok\n" if ready else "-\n")
        kind = request.path.split("/", 2)[1]
        body = await request.read()
        message, content, connection = await upstream.post(kind, body)
        try:
            stream = message.headers.get("Content-Type") == "text/event-stream"
            return await answer(request, message.code, stream, content)
        finally:
            connection.close()  # after the body's end it was released already: a no-op

    server = web.Server(handle, handler_cancellation=True, access_log=None)
    try:
        await until_stopped(web.ServerRunner(server, shutdown_timeout=5), args, listening, stop)
    finally:
        await upstream.connector.close()


async def until_stopped(
    runner: web.BaseRunner, args: argparse.Namespace, listening: Any, stop: asyncio.Event
) -> None:
    """Serve on the shared port until ``stop`` is set, then stop listening and drain."""
    await runner.setup()
    try:
        # The backlog is our proxy's, for 1,000 streams.
        await web.TCPSite(runner, args.host, args.port, reuse_port=True, backlog=2048).start()
        with listening.get_lock():
            listening.value += 1
        await stop.wait()
    finally:
        await runner.cleanup()


async def serve(args: argparse.Namespace, listening: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if args.lean:
        await serve_lean(args, listening, stop)
        return

    async def healthz(request: web.Request) -> web.Response:
        ready = listening.value >= args.workers
        return web.Response(status=200 if ready else 503, text="ok\n" if ready else "starting\n")

    connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
    session = aiohttp.ClientSession(
        connector=connector, trust_env=False, timeout=aiohttp.ClientTimeout(total=None)
    )
    app = web.Application()
    app[SESSION] = session
    app[UPSTREAM] = args.upstream.rstrip("/")
    app.router.add_post("/{kind:" + "|".join(KINDS) + "}/v1/chat/completions", relay)
    app.router.add_get("/healthz", healthz)
    try:
        # access_log=None: no access logger at all.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5)
        await until_stopped(runner, args, listening, stop)
    finally:
        await session.close()


def worker(args: argparse.Namespace, listening: Any, parent: int) -> None:
    # Inherited from the parent by fork: this worker's own handlers are the event loop's.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Best effort (Linux): a parent that dies without stopping us (SIGKILL) still takes us along.
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl
        return
    uvloop.run(serve(args, listening))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8081")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--lean", action="store_true", help="aiohttp's low-level server, no ClientSession"
    )
    args = parser.parse_args()
    args.workers = max(1, args.workers)

    # fork: no event loop exists yet in this process, and no resource tracker is started.
    context = multiprocessing.get_context("fork")
    listening = context.Value("i", 0)
    workers = [
        context.Process(target=worker, args=(args, listening, os.getpid()), daemon=True)
        for _ in range(args.workers)
    ]
    stopping = False

    def on_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for process in workers:
            if process.pid is not None and process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    for process in workers:
        process.start()
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    print(f"floor: {len(workers)} workers on http://{args.host}:{args.port}", flush=True)
    # Wait until a worker exits: the ones we stopped, or one that died (then stop the others).
    multiprocessing.connection.wait([process.sentinel for process in workers])
    if not stopping:
        print("floor: a worker exited; stopping", file=sys.stderr, flush=True)
        on_stop(signal.SIGTERM, None)
    status = 0
    for process in workers:
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()
        if process.exitcode not in (0, -signal.SIGTERM):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
