"""Concurrent streaming client of bench/run.py, run in its own process (not a test).

    python bench/streams.py URL BODY [--key K] [--concurrency 1000] [--duration 10]
                            [--ramp 1] [--timeout 60]

Keeps ``concurrency`` streams open at once for ``duration`` seconds: each of that many slots
opens a stream, reads it to its end and opens the next, until the duration is up (the first
streams start spread over ``ramp`` seconds). For each stream it records the time to the first
``data:`` event (TTFT), the time to the end, and the number of events; a stream completes when
it answered 200 and its last event is ``data: [DONE]``. Prints one JSON line of results.

It shares the machine with the gateway it measures, so it is made to cost little: each slot
keeps one keep-alive HTTP/1.1 connection, an ``asyncio.Protocol`` that takes the answer apart
(a length, chunks, or the connection's end) as the bytes arrive, with no task woken per read.
It took about a third of a core for the 20,000 events a second of 1,000 slow streams when it
read them through aiohttp's client, and raised direct's TTFT p99 with that load.
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
from typing import cast
from urllib.parse import urlsplit


@dataclass(slots=True)
class Stream:
    start: float = 0.0  # perf_counter when it was opened
    status: int = 0
    ttft: float | None = None
    duration: float | None = None
    events: int = 0
    done: bool = False
    failure: str | None = None


class ProtocolFailure(Exception):
    """The server's answer could not be read as HTTP/1.1."""


class Answer:
    """One HTTP/1.1 answer read from the bytes as they arrive: the status, then the body,
    whose ``data:`` events are counted across reads (a marker may straddle two of them)."""

    def __init__(self, result: Stream, start: float, done: asyncio.Future[bool]) -> None:
        self.result = result
        self.start = start
        self.done = done  # set to whether the connection may carry another request
        self.head = b""
        self.framing = ""  # "length", "chunked" or "close", once the head is read
        self.left = 0  # of a length, or of the current chunk
        self.chunks = b""  # chunked framing not yet taken apart
        self.in_chunk = False
        self.keep_alive = True
        self.tail = b""

    def feed(self, data: bytes) -> None:
        if not self.framing:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > 65536:
                    raise ProtocolFailure("head too large")
                return
            data = self.head[end + 4 :]
            self._read_head(self.head[:end])
            if self.done.done():  # a body of length 0
                return
        if self.framing == "length":
            piece = data[: self.left]
            self.left -= len(piece)
            self._body(piece)
            if self.left == 0:
                self._end()
        elif self.framing == "chunked":
            self._dechunk(data)
        else:
            self._body(data)

    def eof(self) -> None:
        if self.framing == "close":
            self._end()
        elif not self.done.done():
            self.done.set_exception(ConnectionResetError("connection closed mid-answer"))

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolFailure("not an HTTP/1.x status line")
        self.result.status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        self.keep_alive = headers.get(b"connection") != b"close" and parts[0] == b"HTTP/1.1"
        if b"chunked" in headers.get(b"transfer-encoding", b""):
            self.framing = "chunked"
        elif b"content-length" in headers:
            self.framing, self.left = "length", int(headers[b"content-length"])
            if self.left == 0:
                self._end()
        else:
            self.framing, self.keep_alive = "close", False

    def _dechunk(self, data: bytes) -> None:
        buffer = self.chunks + data if self.chunks else data
        while buffer:
            if self.in_chunk:
                piece = buffer[: self.left]
                self._body(piece)
                self.left -= len(piece)
                buffer = buffer[len(piece) :]
                if self.left == 0:
                    self.in_chunk = False
                    self.left = -2  # the CRLF after the chunk's data
                continue
            if self.left == -2:
                if len(buffer) < 2:
                    break
                buffer = buffer[2:]
                self.left = 0
                continue
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(buffer[:line_end].split(b";", 1)[0], 16)
            buffer = buffer[line_end + 2 :]
            if size == 0:
                # The last chunk; trailers, if any, are not read (nginx and the gateways send
                # none), and the CRLF that ends them is taken as the end.
                self._end()
                return
            self.in_chunk, self.left = True, size
        self.chunks = buffer

    def _body(self, data: bytes) -> None:
        result = self.result
        if result.status != 200 or not data:
            return
        joined = self.tail + data
        if result.ttft is None and b"data:" in joined:
            result.ttft = time.perf_counter() - self.start
        result.events += joined.count(b"data:") - self.tail.count(b"data:")
        self.tail = joined[-16:]

    def _end(self) -> None:
        result = self.result
        result.duration = time.perf_counter() - self.start
        if result.status == 200:
            result.done = self.tail.rstrip().endswith(b"data: [DONE]")
            if not result.done:
                result.failure = "no [DONE]"
        else:
            result.failure = f"status {result.status}"
        if not self.done.done():
            self.done.set_result(self.keep_alive)


class Connection(asyncio.Protocol):
    """One slot's keep-alive connection; ``answer`` is the answer being read, if any."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.answer: Answer | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None:
            return
        try:
            answer.feed(data)
        except (ProtocolFailure, ValueError) as exc:
            if not answer.done.done():
                answer.done.set_exception(ProtocolFailure(str(exc)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.answer is not None:
            self.answer.eof()


async def read_stream(
    held: list[Connection | None], host: str, port: int, request: bytes, seconds: float
) -> Stream:
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    result = Stream(start)
    connection = held[0]
    try:
        async with asyncio.timeout(seconds):
            if connection is None or connection.closed:
                _, connection = await loop.create_connection(Connection, host, port)
                held[0] = connection
            done: asyncio.Future[bool] = loop.create_future()
            connection.answer = Answer(result, start, done)
            assert connection.transport is not None
            connection.transport.write(request)
            keep_alive = await done
            connection.answer = None
            if not keep_alive:
                connection.transport.close()
                held[0] = None
    except (OSError, TimeoutError, ProtocolFailure) as exc:
        result.failure = type(exc).__name__
        if connection is not None:
            # Detached first: the close must not fail a future that nobody awaits any more
            # (asyncio would log "exception was never retrieved").
            connection.answer = None
            if connection.transport is not None:
                connection.transport.close()
        held[0] = None
    return result


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 3)


# Streams opened within this long of the first of them, and at least this many, are a burst.
BURST_WINDOW = 0.001
BURST_SIZE = 10


def bursts(results: list[Stream]) -> dict[str, float | None]:
    """How many streams opened in bursts, and their TTFT against the others'.

    Each slot opens its next stream as soon as the last one ends, and streams that end together
    open their successors together: nginx's echo_sleep times every event from the same cached
    clock, so streams fall into step, dozens at a time. A burst is as many requests, and first
    events, handled one after another: direct's slowest streams are the last of a burst. A
    gateway's may be streams opened alone, that arrived while it was busy with a burst.
    """
    timed = sorted((r.start, r.ttft) for r in results if r.ttft is not None)
    ttfts: list[tuple[float, bool]] = []  # each stream's TTFT, and whether it was in a burst
    i = 0
    while i < len(timed):
        j = i
        while j < len(timed) and timed[j][0] - timed[i][0] < BURST_WINDOW:
            j += 1
        ttfts += ((ttft, j - i >= BURST_SIZE) for _, ttft in timed[i:j])
        i = j
    alone = [ttft for ttft, burst in ttfts if not burst]
    together = [ttft for ttft, burst in ttfts if burst]
    slowest = sorted(ttfts)[-max(1, len(ttfts) // 100) :] if ttfts else []
    in_bursts = sum(burst for _, burst in slowest)
    return {
        "burst_share": round(len(together) / len(timed), 3) if timed else None,
        "ttft_p99_alone_ms": _ms(percentile(alone, 99)),
        "ttft_p99_burst_ms": _ms(percentile(together, 99)),
        "slowest_in_bursts": round(in_bursts / len(slowest), 3) if slowest else None,
    }


async def slot(
    index: int, args: argparse.Namespace, request: bytes, deadline: float, results: list[Stream]
) -> None:
    await asyncio.sleep(args.ramp * index / max(1, args.concurrency))
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    connection: list[Connection | None] = [None]
    try:
        while time.perf_counter() < deadline:
            results.append(await read_stream(connection, host, port, request, args.timeout))
    finally:
        if connection[0] is not None and connection[0].transport is not None:
            connection[0].transport.close()


def http_request(args: argparse.Namespace) -> bytes:
    url = urlsplit(args.url)
    body: bytes = args.body.encode()
    lines = [
        f"POST {url.path or '/'}{'?' + url.query if url.query else ''} HTTP/1.1",
        f"Host: {url.netloc}",
        "Content-Type: application/json",
        "Accept: text/event-stream",
        f"Content-Length: {len(body)}",
    ]
    if args.key:
        lines.append(f"Authorization: Bearer {args.key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def run(args: argparse.Namespace) -> dict[str, object]:
    request = http_request(args)
    results: list[Stream] = []
    started = time.perf_counter()
    deadline = started + args.duration
    tasks = [
        asyncio.ensure_future(slot(i, args, request, deadline, results))
        for i in range(args.concurrency)
    ]
    # Every stream is bounded by its timeout; this bounds the whole run as well.
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
        **bursts(results),
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
