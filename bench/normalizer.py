"""Micro-benchmark: the normalizer's cost per chunk on a 50-chunk stream (not a test).

    python bench/normalizer.py [--runs 7]

Feeds the first 50 chunks of a recorded OpenAI stream (plus its finish and usage chunks and
[DONE]) through the SSE decoder and the stream normalizer, many times per run, and prints the
median over runs of microseconds per chunk: decoding alone, normalizing alone, and both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer

FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "fixtures"
    / "providers"
    / "openai.chat.stream.sse"
)


def fifty_chunk_stream() -> bytes:
    events = FIXTURE.read_bytes().split(b"\n\n")
    body = [e for e in events if e.startswith(b"data: ")]
    return b"\n\n".join(body[:50] + body[-3:]) + b"\n\n"  # 50 content chunks, finish, usage, [DONE]


def run_once(body: bytes, reads: list[bytes], repeats: int) -> tuple[float, float, int]:
    ctx = RequestContext(endpoint="chat", model="bench", created=1, include_usage=True)
    decode_s = normalize_s = 0.0
    chunks = 0
    for _ in range(repeats):
        start = time.perf_counter()
        decoder = SSEDecoder()
        events = [event for read in reads for event in decoder.feed(read)] + decoder.close()
        middle = time.perf_counter()
        normalizer = StreamNormalizer(ctx)
        for event in events:
            normalizer.feed(event)
        normalizer.finish()
        end = time.perf_counter()
        decode_s += middle - start
        normalize_s += end - middle
        chunks += len(events)
    return decode_s, normalize_s, chunks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    body = fifty_chunk_stream()
    reads = [body[i : i + 512] for i in range(0, len(body), 512)]  # as a socket delivers it
    run_once(body, reads, 50)  # warm up
    decode, normalize = [], []
    for _ in range(args.runs):
        d, n, chunks = run_once(body, reads, args.repeats)
        decode.append(d / chunks * 1e6)
        normalize.append(n / chunks * 1e6)
    per_stream = chunks // args.repeats
    print(f"{per_stream} events ({len(body)} bytes), {args.runs} runs x {args.repeats} streams")
    both = [d + n for d, n in zip(decode, normalize, strict=True)]
    for name, figures in (("decode", decode), ("normalize", normalize), ("both", both)):
        runs = ", ".join(f"{x:.2f}" for x in figures)
        print(f"  {name:10} median {statistics.median(figures):6.2f} us/chunk  (runs: {runs})")


if __name__ == "__main__":
    main()
