"""Micro-benchmark: CPU per streamed event of a Bedrock ConverseStream (AWS event stream frames:
the decoder, the dialect's adapter and the normalizer) against an OpenAI SSE stream of the same
length through the same normalizer (not a test).

    python bench/bedrock.py [--events 50] [--rounds 7] [--repeats 400]

The ConverseStream is what Bedrock sends for ``--events`` text deltas: messageStart, the
contentBlockDelta events (each with Bedrock's ``p`` padding), contentBlockStop, messageStop and
metadata, as socket reads of 512 bytes; timed as bench/native.py times every dialect (its
``run_once``). Prints the median over rounds of microseconds per text delta and the ratio.

Then what signing costs a request (the aws extra): ``AwsSigner.sign`` with configured keys
(botocore's SigV4 over a 1 kB body and an inference profile's model id), beside what an
already-fetched bearer header costs (a Bedrock API key; a Vertex token is the same lookup).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import orjson
from native import WORDS, openai_stream, run_once

from proxy.core.cloud_config import AwsAuth, AwsKeys
from proxy.core.config import Provider
from proxy.core.eventstream import EventStreamDecoder, encode_event
from proxy.core.sse import SSEDecoder
from proxy.http.cloud import Signer, signer_for

# Bedrock pads each event's payload with a "p" of varying length (against traffic analysis).
_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"


def converse_stream(events: int) -> bytes:
    def event(kind: str, payload: dict[str, object], i: int = 0) -> bytes:
        return encode_event(kind, orjson.dumps({**payload, "p": _PAD[: 8 + i % 24]}))

    parts = [event("messageStart", {"role": "assistant"})]
    for i in range(events):
        delta = {"contentBlockIndex": 0, "delta": {"text": WORDS[i % len(WORDS)]}}
        parts.append(event("contentBlockDelta", delta, i))
    parts.append(event("contentBlockStop", {"contentBlockIndex": 0}))
    parts.append(event("messageStop", {"stopReason": "end_turn"}))
    usage = {"inputTokens": 12, "outputTokens": events, "totalTokens": 12 + events}
    parts.append(event("metadata", {"usage": usage, "metrics": {"latencyMs": 400}}))
    return b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    streams = {
        "openai": (openai_stream(args.events), SSEDecoder),
        "bedrock": (converse_stream(args.events), EventStreamDecoder),
    }
    inputs = {
        dialect: ([body[i : i + 512] for i in range(0, len(body), 512)], make)
        for dialect, (body, make) in streams.items()
    }
    for dialect, (reads, make) in inputs.items():
        run_once(dialect, reads, make, 50)  # warm up
    figures: dict[str, list[float]] = {dialect: [] for dialect in inputs}
    for _ in range(args.rounds):
        # Interleaved, so that a slow moment of the machine weighs on both alike.
        for dialect, (reads, make) in inputs.items():
            seconds = run_once(dialect, reads, make, args.repeats)
            figures[dialect].append(seconds / (args.repeats * args.events) * 1e6)
    base = statistics.median(figures["openai"])
    print(f"{args.events} text deltas a stream, {args.rounds} rounds x {args.repeats} streams")
    for dialect, values in figures.items():
        median = statistics.median(values)
        print(f"  {dialect:8} {median:6.2f} us/event   {median / base:5.2f}x openai")
    asyncio.run(signing(args.rounds))


async def signing(rounds: int, requests: int = 2000) -> None:
    from yarl import URL

    url = URL(
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
        "us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream",
        encoded=True,
    )
    body = orjson.dumps({"messages": [{"role": "user", "content": [{"text": "x" * 1000}]}]})
    keys = AwsAuth("us-east-1", AwsKeys("AKIDEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"))
    signers: dict[str, Signer | None] = {
        "sigv4": signer_for(Provider("b", "bedrock", "", cloud=keys), env={}),
        "bearer": signer_for(
            Provider("b", "bedrock", "", cloud=AwsAuth("us-east-1")),
            env={"AWS_BEARER_TOKEN_BEDROCK": "ABSKexample"},
        ),
    }
    figures: dict[str, list[float]] = {name: [] for name in signers}
    for _ in range(rounds):
        for name, signer in signers.items():
            assert signer is not None
            await signer.sign(url, body)  # the identity read once, as at a worker's start
            started = time.process_time()
            for _ in range(requests):
                await signer.sign(url, body)
            figures[name].append((time.process_time() - started) / requests * 1e6)
    print(f"signing a request, {rounds} rounds x {requests}")
    for name, values in figures.items():
        print(f"  {name:8} {statistics.median(values):7.1f} us/request")


if __name__ == "__main__":
    main()
