"""Micro-benchmark: CPU per streamed event of an OpenAI-compatible upstream's stream presented on
the Anthropic face (``/v1/messages``) against the same stream on the chat endpoint (not a test).

    python bench/face.py [--events 50] [--runs 7] [--repeats 400]

Two streams: the recorded OpenAI chat stream (tests/fixtures/providers/openai.chat.stream.sse,
about 300 text deltas of a real answer) and a built one of ``--events`` text deltas (role chunk,
deltas, finish, usage, [DONE]: bench/native.py's). Each is fed as socket reads of 512 bytes to
the decoder and the stream normalizer (the chat endpoint), and to the same with the Messages
presenter around the normalizer (the face: ``MessagesPresenter.stream``, as the handler builds
it). Prints the median over runs of microseconds per text delta and the face's ratio to chat's in
the same run. The HTTP shell around both is the same code, so this is where they differ.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from native import openai_stream

from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer
from proxy.normalize.faces.anthropic.present import MessagesPresenter
from proxy.normalize.present import EventStream

RECORDED = Path(__file__).resolve().parents[1] / "tests/fixtures/providers/openai.chat.stream.sse"
# What a translated Messages request asks of the chat pipeline: one choice, its usage.
CONTEXT = RequestContext(endpoint="chat", model="bench", created=1, include_usage=True)


def run_once(reads: list[bytes], face: bool, repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        decoder = SSEDecoder()
        stream: EventStream = StreamNormalizer(CONTEXT)
        if face:
            stream = MessagesPresenter(message_id="msg_bench", model="bench").stream(stream)
        for read in reads:
            for event in decoder.feed(read):
                stream.feed(event)
        for event in decoder.close():
            stream.feed(event)
        stream.finish()
        assert stream.error is None, stream.error
    return time.process_time() - start


def deltas(body: bytes) -> int:
    """The text deltas of an OpenAI stream: the events a client waits for."""
    return body.count(b'"delta":{"content":"') - body.count(b'"delta":{"content":""')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    recorded = RECORDED.read_bytes()
    streams = {"recorded": recorded, f"built-{args.events}": openai_stream(args.events)}
    print(f"{args.runs} runs x {args.repeats} streams, read 512 bytes at a time")
    for name, body in streams.items():
        reads = [body[i : i + 512] for i in range(0, len(body), 512)]
        events = deltas(body)
        # The recorded stream is six times longer: as many events in a run as the built one.
        repeats = max(1, args.repeats * args.events // events)
        for face in (False, True):
            run_once(reads, face, 50)  # warm up
        figures: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.runs):
            # Interleaved, so that a slow moment of the machine weighs on both alike.
            for face in (False, True):
                seconds = run_once(reads, face, repeats)
                figures[face].append(seconds / (repeats * events) * 1e6)
        chat, messages = (statistics.median(figures[face]) for face in (False, True))
        print(f"{name} ({events} text deltas):")
        print(f"  chat       {chat:6.2f} us/event")
        print(f"  messages   {messages:6.2f} us/event   {messages / chat:5.2f}x chat")


if __name__ == "__main__":
    main()
