"""The cost of metering on the hot path: throughput with metrics on vs off (not a test).

    python bench/metering.py [--runs 7] [--seconds 3] [--concurrency 16]

Starts the emulator and four proxies (``llm-proxy serve``, one worker each) as child
processes on loopback: metrics and access log off; metrics on; access log on; both on (the log
goes to /dev/null). Then, alternating between the proxies run by run so that drift hits all of
them alike, it drives each with ``--concurrency`` keep-alive clients for ``--seconds`` and
counts completed requests, non-streamed and streamed (FriendliAI's short recordings, so the
fixed per-request cost weighs as much as it can). Throughput suffers from whatever else runs on
the machine; the proxy's own CPU time per request (from /proc/<pid>/task/*/schedstat, Linux)
much less, so both are printed: each run, the medians and their ratio to "off". Last, it times
the observers alone: ``started`` + ``finished`` per request, on a realistic finished exchange.
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
from prometheus_client import CollectorRegistry

from proxy.core.exchange import Exchange
from proxy.core.usage import Usage
from proxy.ops.access_log import AccessLog
from proxy.ops.metrics import ProxyMetrics

KEY = "sk-bench"
MODES = {
    "off": "metrics: {enabled: false}\naccess_log: false\n",
    "metrics": "metrics: {enabled: true}\naccess_log: false\n",
    "log": "metrics: {enabled: false}\naccess_log: true\n",
    "metrics+log": "metrics: {enabled: true}\naccess_log: true\n",
}


def start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cpu_seconds(pid: int) -> float:
    """CPU time used so far by every thread of process ``pid`` (nanoseconds in schedstat)."""
    tasks = Path(f"/proc/{pid}/task").glob("*/schedstat")
    return sum(int(path.read_text().split()[0]) for path in tasks) / 1e9


async def throughput(
    url: str, stream: bool, seconds: float, concurrency: int, pid: int
) -> tuple[float, float]:
    """Requests per second completed by ``concurrency`` clients in a closed loop, and the
    proxy's CPU microseconds per request."""
    body = {"model": "llama", "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
    headers = {"Authorization": f"Bearer {KEY}"}
    done = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client(until: float) -> None:
            nonlocal done
            while time.perf_counter() < until:
                async with session.post(url, json=body, headers=headers) as response:
                    await response.read()
                    assert response.status == 200, response.status
                done += 1

        await asyncio.gather(*(client(time.perf_counter() + 0.3) for _ in range(concurrency)))
        done = 0
        cpu = cpu_seconds(pid)
        started = time.perf_counter()
        await asyncio.gather(*(client(started + seconds) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        return done / elapsed, (cpu_seconds(pid) - cpu) / done * 1e6


def observer_cost(n: int = 200_000) -> dict[str, float]:
    """Microseconds per request for started() + finished() of each observer, called directly
    on a running loop (the access log writes, to /dev/null, once a loop turn)."""
    return asyncio.run(_observer_cost(n))


async def _observer_cost(n: int) -> dict[str, float]:
    metrics = ProxyMetrics(CollectorRegistry(), ["emu"])
    devnull = os.open(os.devnull, os.O_WRONLY)
    access = AccessLog(devnull)
    exchange = Exchange("0123456789abcdef0123456789abcdef", "chat", 1.0, "bench", "llama", "emu")
    exchange.stream, exchange.status = True, 200
    exchange.usage = Usage(8, 4, 12)
    exchange.fixes = frozenset({"usage", "extra_fields", "empty_chunk"})
    exchange.first_token_at, exchange.ended = 1.004, 1.005
    exchange.upstream_wait = 0.0045
    out = {}
    for name, observer in (("metrics", metrics), ("access log", access)):
        metrics.stream_started(exchange)  # keep the in-flight gauge balanced
        started = time.perf_counter()
        for i in range(n):
            observer.started(exchange)
            observer.finished(exchange)
            if i % 8 == 7:
                await asyncio.sleep(0)  # a loop turn every 8 requests, as under load
        out[name] = (time.perf_counter() - started) / n * 1e6
    os.close(devnull)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    emulator_port = free_port()
    ports = {mode: free_port() for mode in MODES}
    processes = []
    pids: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            processes.append(start(["emulate", "--port", str(emulator_port)]))
            for mode, extra in MODES.items():
                config = Path(tmp) / f"{mode}.yaml"
                config.write_text(
                    f"providers: {{emu: {{base_url: 'http://127.0.0.1:{emulator_port}/v1'}}}}\n"
                    "models: {llama: {provider: emu, model: friendli}}\n"
                    f"teams: {{bench: {{keys: [{KEY}], models: ['*']}}}}\n" + extra
                )
                processes.append(
                    start(["serve", "--config", str(config), "--port", str(ports[mode])])
                )
                pids[mode] = processes[-1].pid
            wait_http(f"http://127.0.0.1:{emulator_port}/v1/models")
            for port in ports.values():
                wait_http(f"http://127.0.0.1:{port}/readyz")
            for stream in (False, True):
                kind = "streamed" if stream else "non-streamed"
                rates: dict[str, list[float]] = {mode: [] for mode in MODES}
                costs: dict[str, list[float]] = {mode: [] for mode in MODES}
                for run in range(args.runs):
                    line = []
                    # Each run starts with another mode: no mode always runs right after another.
                    order = list(MODES)[run % len(MODES) :] + list(MODES)[: run % len(MODES)]
                    for mode in order:
                        url = f"http://127.0.0.1:{ports[mode]}/v1/chat/completions"
                        rate, cost = asyncio.run(
                            throughput(url, stream, args.seconds, args.concurrency, pids[mode])
                        )
                        rates[mode].append(rate)
                        costs[mode].append(cost)
                        line.append(f"{mode} {rate:5.0f}/s {cost:4.0f} us")
                    print(f"  {kind} run {run + 1}: " + ", ".join(line), flush=True)
                rate_off = statistics.median(rates["off"])
                cost_off = statistics.median(costs["off"])
                for mode in MODES:
                    rate, cost = statistics.median(rates[mode]), statistics.median(costs[mode])
                    print(
                        f"{kind:>12} {mode:>11}: {rate:5.0f} req/s ({rate / rate_off:.3f}x), "
                        f"proxy CPU {cost:5.1f} us/request ({cost / cost_off:.3f}x)"
                    )
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    for name, micros in observer_cost().items():
        print(f"observer {name}: {micros:.2f} us per request (started + finished)")


if __name__ == "__main__":
    main()
