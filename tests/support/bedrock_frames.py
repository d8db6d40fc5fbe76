"""The readable source of the Bedrock ConverseStream fixtures (tests/fixtures/providers/
bedrock.converse-stream*.eventstream): each is the events below, framed by
``proxy.core.eventstream`` as AWS frames them. The events follow the Bedrock Runtime API
reference (ConverseStreamOutput and its event types; SOURCES.md says which page each shows),
with the ``p`` padding field Bedrock adds to every event payload.

    .venv/bin/python -m tests.support.bedrock_frames   # writes the files again

tests/normalize/test_bedrock.py checks that the files are these events, byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from proxy.core.eventstream import encode_event, encode_exception
from tests.support.replay import FIXTURES

# (kind, type, payload): kind "event" or "exception".
Frame = tuple[str, str, dict[str, Any]]

_USAGE = {
    "inputTokens": 21,
    "outputTokens": 9,
    "totalTokens": 2078,
    "cacheReadInputTokens": 1536,
    "cacheWriteInputTokens": 512,
}
STREAMS: dict[str, list[Frame]] = {
    "bedrock.converse-stream.eventstream": [
        ("event", "messageStart", {"role": "assistant", "p": "abcdefghijklmnopqrstuvwxyzABCDEFGH"}),
        (
            "event",
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"text": "Hello"}, "p": "abcdefghijklmnopqrstu"},
        ),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 0,
                "delta": {"text": "! How can I"},
                "p": "abcdefghijklmnopqrstuvwxyzABCDE",
            },
        ),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 0,
                "delta": {"text": " help you today? \u00e9\u4e16"},
                "p": "abcdefghijk",
            },
        ),
        ("event", "contentBlockStop", {"contentBlockIndex": 0, "p": "abcdefghijklmnopqrstuvwx"}),
        ("event", "messageStop", {"stopReason": "end_turn", "p": "abcdefghijklmnopqrstuvwxyzA"}),
        (
            "event",
            "metadata",
            {
                "usage": _USAGE,
                "metrics": {"latencyMs": 412},
                "p": "abcdefghijklmnopqrstuvwxyzABCDEF",
            },
        ),
    ],
    "bedrock.converse-stream.tool-use.eventstream": [
        ("event", "messageStart", {"role": "assistant", "p": "abcdefghij"}),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"text": "The user wants "}},
                "p": "abcdef",
            },
        ),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"text": "the weather."}},
                "p": "abcdefghijklmnop",
            },
        ),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"signature": "EqoBCkgIARABGAIiQG"}},
                "p": "abc",
            },
        ),
        ("event", "contentBlockStop", {"contentBlockIndex": 0, "p": "abcdefgh"}),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 1,
                "delta": {"text": "Let me check the weather."},
                "p": "abcdefghijklmnopqrs",
            },
        ),
        ("event", "contentBlockStop", {"contentBlockIndex": 1, "p": "abcdefghijklmnopqrstuvw"}),
        (
            "event",
            "contentBlockStart",
            {
                "contentBlockIndex": 2,
                "start": {
                    "toolUse": {
                        "toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                        "name": "get_weather",
                    }
                },
                "p": "abcdefghijklmnopqr",
            },
        ),
        (
            "event",
            "contentBlockDelta",
            {"contentBlockIndex": 2, "delta": {"toolUse": {"input": ""}}, "p": "abcdefghijkl"},
        ),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 2,
                "delta": {"toolUse": {"input": '{"location": "Se'}},
                "p": "abcdefghijklmnopqrstuvwxyzABC",
            },
        ),
        (
            "event",
            "contentBlockDelta",
            {
                "contentBlockIndex": 2,
                "delta": {"toolUse": {"input": 'attle, WA"}'}},
                "p": "abcdefghijklm",
            },
        ),
        ("event", "contentBlockStop", {"contentBlockIndex": 2, "p": "abcdefghijklmnopqrstuvwxyzA"}),
        ("event", "messageStop", {"stopReason": "tool_use", "p": "abcdefghijklmnopqrstuvwxyzABC"}),
        (
            "event",
            "metadata",
            {
                "usage": {"inputTokens": 402, "outputTokens": 87, "totalTokens": 489},
                "metrics": {"latencyMs": 1611},
                "p": "abcdefghijklmnopq",
            },
        ),
    ],
    # Throttled after some text (before any, the client gets an HTTP 429: test_bedrock.py).
    "bedrock.converse-stream.error.throttling.eventstream": [
        ("event", "messageStart", {"role": "assistant", "p": "abcdefghijklmno"}),
        (
            "event",
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"text": "Sure"}, "p": "abcdefgh"},
        ),
        (
            "exception",
            "throttlingException",
            {"message": "Too many requests, please wait before trying again."},
        ),
    ],
    # The model failed half way: what came reaches the client, then the error event.
    "bedrock.converse-stream.error.model-stream.eventstream": [
        ("event", "messageStart", {"role": "assistant", "p": "abcdefghijklmno"}),
        (
            "event",
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"text": "The answer is"}, "p": "abcdefghijklmnop"},
        ),
        (
            "exception",
            "modelStreamErrorException",
            {
                "message": "Model stream error: the model failed to generate a response.",
                "originalStatusCode": 500,
            },
        ),
    ],
}


def frames(events: list[Frame]) -> bytes:
    """The events as the AWS event stream frames Bedrock sends."""
    encode = {"event": encode_event, "exception": encode_exception}
    return b"".join(encode[kind](name, orjson.dumps(payload)) for kind, name, payload in events)


def write(into: Path = FIXTURES) -> None:
    for name, events in STREAMS.items():
        (into / name).write_bytes(frames(events))


if __name__ == "__main__":
    write()
