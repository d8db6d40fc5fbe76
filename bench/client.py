"""Micro-benchmark: the upstream client's CPU per request (not a test).

    python bench/client.py [--runs 7] [--requests 3000]

Sends the benchmark's chat request to nginx (bench/canned.py) one at a time, and reads each
answer whole, in two ways that alternate run by run: aiohttp's public client
(``ClientSession.post`` on a ``TCPConnector``, tuned as far as its public settings go), and
``proxy.http.upstream.UpstreamClient.send`` (``proxy.http``: asyncio's protocol and httptools).
Prints the median over runs of this process's CPU time per request (``time.process_time``: the
system calls are in it, nginx's work is not). Needs nginx (bash bench/setup.sh).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import canned
from multidict import CIMultiDict
from procs import Service, free_port, wait_http

from proxy.core.config import Provider
from proxy.http.pool import Pool
from proxy.http.upstream import Target, UpstreamClient, read_whole, target_for
from proxy.ops.server import run

BODY = (
    b'{"model":"bench","messages":[{"role":"user",'
    b'"content":"Invent a holiday and describe its traditions."}]}'
)
LIMIT = 1 << 26


async def per_request(one: Callable[[], Awaitable[None]], requests: int) -> float:
    for _ in range(200):  # warm: the connection open, the code and data in the caches
        await one()
    started = time.process_time()
    for _ in range(requests):
        await one()
    return (time.process_time() - started) / requests * 1e6


async def with_session(target: Target, requests: int) -> float:
    headers = CIMultiDict({"Content-Type": "application/json", "Authorization": "Bearer sk-up"})
    url = target.destinations["chat"].url
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
        auto_decompress=True,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:

        async def one() -> None:
            response = await session.post(
                url,
                data=BODY,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, connect=target.connect),
                allow_redirects=False,
                auto_decompress=True,
            )
            chunks = []
            while chunk := await response.content.readany():
                chunks.append(chunk)
            response.close()

        return await per_request(one, requests)


async def with_upstream_client(target: Target, requests: int) -> float:
    pool = Pool()
    client = UpstreamClient(pool)
    destination = target.destinations["chat"]

    async def one() -> None:
        response = await client.send(destination, target, BODY, stream=False)
        await read_whole(response, LIMIT)
        response.close()

    try:
        return await per_request(one, requests)
    finally:
        await pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        directory = Path(tmp)
        directory.chmod(0o711)  # nginx's worker reads the bodies
        port = free_port()
        conf = canned.write_upstream(directory / "nginx", port, 0.05)
        nginx = Service(
            "nginx", ["nginx", "-c", str(conf), "-p", str(conf.parent)], directory / "nginx.log"
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", nginx, 10)
            base = f"http://127.0.0.1:{port}/plain/v1"
            provider = Provider("p", "openai", base, api_key="sk-upstream-bench")
            target = target_for(provider)
            session: list[float] = []
            ours: list[float] = []
            for _ in range(args.runs):
                session.append(run(lambda: with_session(target, args.requests)))
                ours.append(run(lambda: with_upstream_client(target, args.requests)))
        finally:
            nginx.stop()
    print(f"CPU per request, medians of {args.runs} runs of {args.requests} requests:")
    print(f"  ClientSession.post        {statistics.median(session):6.1f} µs")
    print(f"  UpstreamClient.send       {statistics.median(ours):6.1f} µs")
    print(
        f"  ratio                     {statistics.median(ours) / statistics.median(session):6.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
