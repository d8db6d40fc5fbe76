"""Micro-benchmark: CPU per streamed event of a native API's stream against an OpenAI one of the
same length (not a test).

    python bench/native.py [--events 50] [--runs 7] [--repeats 400]

Builds, for each dialect, a stream of ``--events`` text deltas in that API's own events (an
OpenAI stream: role chunk, deltas, finish, usage, [DONE]; Anthropic's: message_start,
content_block_start, text_delta events, content_block_stop, message_delta, message_stop; Gemini's:
one candidate per event with cumulative usage), then times the decoder and the stream normalizer
(its dialect's adapter included) over it, as socket reads of 512 bytes. Prints the median over
runs of microseconds per text delta, and each dialect's ratio to OpenAI's in the same run. The
HTTP shell around the normalizer is the same code for every dialect, so this is where they
differ.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import orjson

from proxy.core.framing import Decoder
from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer

WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]


def sse(payload: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def openai_stream(events: int) -> bytes:
    def chunk(delta: object, finish: object = None) -> dict[str, object]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [choice],
        }

    parts = [sse(chunk({"role": "assistant", "content": ""}))]
    parts += [sse(chunk({"content": WORDS[i % len(WORDS)]})) for i in range(events)]
    parts.append(sse(chunk({}, "stop")))
    usage = {"prompt_tokens": 12, "completion_tokens": events, "total_tokens": 12 + events}
    parts.append(sse({**chunk({}), "choices": [], "usage": usage}))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def anthropic_stream(events: int) -> bytes:
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    parts = [sse({"type": "message_start", "message": message}, "message_start")]
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    parts.append(sse(block, "content_block_start"))
    for i in range(events):
        delta = {"type": "text_delta", "text": WORDS[i % len(WORDS)]}
        parts.append(
            sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
        )
    parts.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": events},
    }
    parts.append(sse(end, "message_delta"))
    parts.append(sse({"type": "message_stop"}, "message_stop"))
    return b"".join(parts)


def gemini_stream(events: int) -> bytes:
    parts = []
    for i in range(events):
        candidate: dict[str, object] = {
            "content": {"parts": [{"text": WORDS[i % len(WORDS)]}], "role": "model"},
            "index": 0,
        }
        if i == events - 1:
            candidate["finishReason"] = "STOP"
        usage = {"promptTokenCount": 12, "candidatesTokenCount": i + 1, "totalTokenCount": 13 + i}
        parts.append(
            sse(
                {
                    "candidates": [candidate],
                    "usageMetadata": usage,
                    "modelVersion": "gemini-2.5-flash",
                    "responseId": "bench",
                }
            )
        )
    return b"".join(parts)


STREAMS: dict[str, tuple[Callable[[int], bytes], Callable[[], Decoder]]] = {
    "openai": (openai_stream, SSEDecoder),
    "anthropic": (anthropic_stream, SSEDecoder),
    "gemini": (gemini_stream, SSEDecoder),
}


def run_once(dialect: str, reads: list[bytes], make: Callable[[], Decoder], repeats: int) -> float:
    ctx = RequestContext(
        endpoint="chat", model="bench", created=1, include_usage=True, dialect=dialect
    )
    start = time.perf_counter()
    for _ in range(repeats):
        decoder = make()
        normalizer = StreamNormalizer(ctx)
        for read in reads:
            for event in decoder.feed(read):
                normalizer.feed(event)
        for event in decoder.close():
            normalizer.feed(event)
        normalizer.finish()
        assert normalizer.error is None, normalizer.error
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    inputs = {}
    for dialect, (build, make) in STREAMS.items():
        body = build(args.events)
        inputs[dialect] = ([body[i : i + 512] for i in range(0, len(body), 512)], make)
        run_once(dialect, *inputs[dialect], 50)  # warm up
    figures: dict[str, list[float]] = {dialect: [] for dialect in STREAMS}
    for _ in range(args.runs):
        # Interleaved, so that a slow moment of the machine weighs on every dialect alike.
        for dialect, (reads, make) in inputs.items():
            seconds = run_once(dialect, reads, make, args.repeats)
            figures[dialect].append(seconds / (args.repeats * args.events) * 1e6)
    base = statistics.median(figures["openai"])
    print(f"{args.events} text deltas a stream, {args.runs} runs x {args.repeats} streams")
    for dialect, values in figures.items():
        median = statistics.median(values)
        print(f"  {dialect:10} {median:6.2f} us/event   {median / base:5.2f}x openai")


if __name__ == "__main__":
    main()
