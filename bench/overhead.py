"""The proxy's added latency against calling the emulator directly (not a test).

    python bench/overhead.py [--runs 5] [--requests 300]

Starts the emulator and the proxy (``llm-proxy serve``, one worker) as real processes on
loopback, then, one request at a time, times the same non-streamed and streamed chat request
sent straight to the emulator and through the proxy. Prints, per run, the median latency of
each and their difference, then the median of the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from procs import free_port, wait_http

KEY = "sk-bench"


def start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def timed(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, object],
    headers: dict[str, str],
    n: int,
) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        async with session.post(url, json=body, headers=headers) as response:
            await response.read()
            assert response.status == 200, response.status
        times.append(time.perf_counter() - start)
    return times


async def measure(emulator: str, proxy: str, runs: int, n: int, stream: bool) -> None:
    body = {"model": "openai", "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
    proxied = {**body, "model": "gpt-4o"}
    auth = {"Authorization": f"Bearer {KEY}"}
    connector = aiohttp.TCPConnector(limit=1)
    diffs = []
    async with aiohttp.ClientSession(connector=connector) as session:
        await timed(session, emulator + "/v1/chat/completions", body, {}, 50)  # warm up both
        await timed(session, proxy + "/v1/chat/completions", proxied, auth, 50)
        for run in range(runs):
            direct = statistics.median(
                await timed(session, emulator + "/v1/chat/completions", body, {}, n)
            )
            through = statistics.median(
                await timed(session, proxy + "/v1/chat/completions", proxied, auth, n)
            )
            diffs.append(through - direct)
            added = (through - direct) * 1e3
            print(f"  run {run + 1}: direct p50 {direct * 1e3:.3f} ms, ", end="")
            print(f"via proxy p50 {through * 1e3:.3f} ms, added {added:.3f} ms")
    kind = "streamed (304 chunks)" if stream else "non-streamed"
    added = statistics.median(diffs) * 1e3
    print(f"{kind}: median added latency {added:.3f} ms over {runs} runs of {n} requests")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    emulator_port, proxy_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(
            f"providers: {{emu: {{base_url: 'http://127.0.0.1:{emulator_port}/v1',"
            " api_key: sk-emulated-bench}}\n"
            "models: {gpt-4o: {provider: emu, model: openai}}\n"
            f"teams: {{bench: {{keys: [{KEY}], models: ['*']}}}}\n"
            f"access_log: {os.environ.get('BENCH_ACCESS_LOG', 'true')}\n"
        )
        emulator = start(["emulate", "--port", str(emulator_port)])
        proxy = start(
            ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(proxy_port)]
        )
        try:
            emulator_url, proxy_url = (
                f"http://127.0.0.1:{emulator_port}",
                f"http://127.0.0.1:{proxy_port}",
            )
            wait_http(emulator_url + "/v1/models")
            wait_http(proxy_url + "/readyz")
            for stream in (False, True):
                asyncio.run(measure(emulator_url, proxy_url, args.runs, args.requests, stream))
        finally:
            for process in (proxy, emulator):
                process.send_signal(signal.SIGTERM)
                process.wait(10)


if __name__ == "__main__":
    main()
