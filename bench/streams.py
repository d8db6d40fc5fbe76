"""Concurrent streaming client of bench/run.py, run in its own process (not a test).

    python bench/streams.py URL BODY [--key K] [--concurrency 1000] [--duration 10]
                            [--ramp 1] [--timeout 60]

Keeps ``concurrency`` streams open at once for ``duration`` seconds: each of that many slots
opens a stream, reads it to its end and opens the next, until the duration is up (the first
streams start spread over ``ramp`` seconds). For each stream it records the time to the first
``data:`` event (TTFT), the time to the end, and the number of events; a stream completes when
it answered 200 and its last event is ``data: [DONE]``. Prints one JSON line of results.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import sys
import time
from dataclasses import dataclass

import aiohttp


@dataclass(slots=True)
class Stream:
    status: int = 0
    ttft: float | None = None
    duration: float | None = None
    events: int = 0
    done: bool = False
    failure: str | None = None


async def read_stream(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> Stream:
    result = Stream()
    start = time.perf_counter()
    tail = b""
    try:
        async with session.post(url, data=body, headers=headers) as response:
            result.status = response.status
            if response.status != 200:
                result.failure = f"status {response.status}"
                await response.read()
                return result
            async for data in response.content.iter_any():
                if result.ttft is None and b"data:" in data:
                    result.ttft = time.perf_counter() - start
                # Count events across reads: a marker may straddle two of them.
                joined = tail + data
                result.events += joined.count(b"data:") - tail.count(b"data:")
                tail = joined[-16:]
            result.duration = time.perf_counter() - start
            result.done = tail.rstrip().endswith(b"data: [DONE]")
            if not result.done:
                result.failure = "no [DONE]"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        result.failure = type(exc).__name__
    return result


async def slot(
    index: int,
    args: argparse.Namespace,
    session: aiohttp.ClientSession,
    headers: dict[str, str],
    deadline: float,
    results: list[Stream],
) -> None:
    await asyncio.sleep(args.ramp * index / max(1, args.concurrency))
    body = args.body.encode()
    while time.perf_counter() < deadline:
        results.append(await read_stream(session, args.url, body, headers))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 3)


async def run(args: argparse.Namespace) -> dict[str, object]:
    headers = {"Content-Type": "application/json"}
    if args.key:
        headers["Authorization"] = f"Bearer {args.key}"
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    results: list[Stream] = []
    started = time.perf_counter()
    deadline = started + args.duration
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [
            asyncio.ensure_future(slot(i, args, session, headers, deadline, results))
            for i in range(args.concurrency)
        ]
        # Every stream is bounded by the client timeout; this bounds the whole run as well.
        finished, pending = await asyncio.wait(tasks, timeout=args.duration + args.timeout + 5)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in finished:
            if task.exception() is not None:
                print(f"slot failed: {task.exception()!r}", file=sys.stderr)
    wall = time.perf_counter() - started
    complete = [r for r in results if r.done]
    ttfts = [r.ttft for r in results if r.ttft is not None]
    durations = [r.duration for r in complete if r.duration is not None]
    return {
        "streams": len(results),
        "completed": len(complete),
        "cut_off": len(pending),
        "failures": dict(collections.Counter(r.failure for r in results if r.failure)),
        "events": dict(collections.Counter(str(r.events) for r in complete)),
        "wall_s": round(wall, 3),
        "streams_per_s": round(len(complete) / wall, 2),
        "ttft_p50_ms": _ms(percentile(ttfts, 50)),
        "ttft_p99_ms": _ms(percentile(ttfts, 99)),
        "ttft_max_ms": _ms(max(ttfts, default=None)),
        "duration_p50_ms": _ms(percentile(durations, 50)),
        "duration_p99_ms": _ms(percentile(durations, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("body")
    parser.add_argument("--key", default="")
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--ramp", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop

        outcome = uvloop.run(run(args))
    except ImportError:
        outcome = asyncio.run(run(args))
    print("BENCH " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
