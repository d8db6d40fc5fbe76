"""The proxy's CPU per request on each endpoint, against the same chat call (not a test).

    python bench/endpoints.py [--rounds 5] [--requests 1500] [--concurrency 8]

Starts the emulator and the proxy (``llm-proxy serve``, one worker) as real processes on
loopback. Each round sends, for every case in turn, ``--requests`` non-streamed requests,
``--concurrency`` at a time, and reads the proxy's CPU time (its processes, user and system)
before and after: the CPU per request of the case. Cases:

    chat        POST /v1/chat/completions, OpenAI's recorded answer (the baseline)
    responses   POST /v1/responses for the same answer: translated to chat, shown as a Response
    embeddings  POST /v1/embeddings, one input, base64 (openai-python's default)

Prints each case's median over rounds in microseconds and its ratio to chat's (interleaved
rounds, so a slow moment of the machine weighs on every case alike).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
from procs import cpu_seconds, descendants, free_port, wait_http

KEY = "sk-bench"
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "chat": (
        "/v1/chat/completions",
        {"model": "gpt", "messages": [{"role": "user", "content": "Hello"}]},
    ),
    "responses": ("/v1/responses", {"model": "gpt", "input": "Hello"}),
    "embeddings": (
        "/v1/embeddings",
        {"model": "embed", "input": "Hello", "encoding_format": "base64"},
    ),
}


def start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def send(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], n: int, concurrency: int
) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    left = [n]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            async with session.post(url, json=body, headers=headers) as response:
                await response.read()
                assert response.status == 200, response.status

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def measure(proxy: str, pids: list[int], rounds: int, n: int, concurrency: int) -> None:
    figures: dict[str, list[float]] = {case: [] for case in CASES}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        for path, body in CASES.values():
            await send(session, proxy + path, body, 200, concurrency)  # warm up
        for _ in range(rounds):
            for case, (path, body) in CASES.items():
                before = cpu_seconds(pids)
                await send(session, proxy + path, body, n, concurrency)
                figures[case].append((cpu_seconds(pids) - before) / n * 1e6)
    base = statistics.median(figures["chat"])
    print(f"{rounds} rounds x {n} requests, {concurrency} at a time; proxy CPU per request:")
    for case, values in figures.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"  {case:11} {median:7.1f} us  {median / base:5.2f}x chat   (rounds: {runs})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    emulator_port, proxy_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(
            f"providers: {{emu: {{base_url: 'http://127.0.0.1:{emulator_port}/v1',"
            " api_key: sk-emulated-bench}}\n"
            "models: {gpt: {provider: emu, model: openai},"
            " embed: {provider: emu, model: openai}}\n"
            f"teams: {{bench: {{keys: [{KEY}], models: ['*']}}}}\n"
            "access_log: false\n"
        )
        emulator = start(["emulate", "--port", str(emulator_port)])
        proxy = start(
            ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(proxy_port)]
        )
        try:
            proxy_url = f"http://127.0.0.1:{proxy_port}"
            wait_http(f"http://127.0.0.1:{emulator_port}/v1/models")
            wait_http(proxy_url + "/readyz")
            pids = [proxy.pid, *descendants(proxy.pid)]
            asyncio.run(measure(proxy_url, pids, args.rounds, args.requests, args.concurrency))
        finally:
            for process in (proxy, emulator):
                process.send_signal(signal.SIGTERM)
                process.wait(10)


if __name__ == "__main__":
    main()
