"""Usage on the chunks of a stream of several choices (sans-IO): a prompt is counted once.

Counts on a choice's chunks are the response's running totals, the last one standing (Perplexity,
xAI 2024), unless the choices answer prompts of their own: a batch (``prompt`` as a list), or
counts of different prompts (TGI's batch, tests/fixtures/providers/tgi.completions.stream.sse),
whose choices' latest counts add up.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer


def _chunk(index: int, usage: tuple[int, int], finish: str | None = None) -> dict[str, Any]:
    prompt, completion = usage
    return {
        "id": "cmpl-x",
        "object": "text_completion",
        "created": 1764600000,
        "choices": [{"index": index, "text": "a", "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


RUNNING = [_chunk(0, (11, 1)), _chunk(1, (11, 2)), _chunk(0, (11, 8), "stop")]
RUNNING += [_chunk(1, (11, 9), "stop")]
PER_PROMPT = [_chunk(0, (3, 5), "length"), _chunk(1, (3, 4), "length")]
DIFFERENT = [_chunk(0, (6, 10), "length"), _chunk(1, (5, 10), "length")]

# (events, the request's prompt, (prompt, completion) metered)
CASES = [
    pytest.param(RUNNING, "Say", (11, 9), id="running totals, one prompt"),
    pytest.param(RUNNING, [1, 2, 3], (11, 9), id="running totals, one prompt of token ids"),
    pytest.param(PER_PROMPT, ["a b", "c d"], (6, 9), id="a batch counting alike"),
    pytest.param(PER_PROMPT, [[1, 2], [3, 4]], (6, 9), id="a batch of token lists"),
    pytest.param(PER_PROMPT, "Say", (3, 4), id="alike counts, one prompt: the last stands"),
    pytest.param(DIFFERENT, "Say", (11, 20), id="different prompts counted: a batch"),
    pytest.param([_chunk(0, (11, 3)), _chunk(0, (11, 5), "stop")], None, (11, 5), id="one"),
]


@pytest.mark.parametrize(("events", "prompt", "expected"), CASES)
def test_usage_on_choice_chunks(
    events: list[dict[str, Any]], prompt: object, expected: tuple[int, int]
) -> None:
    ctx = RequestContext("completions", "m", 1764600000, include_usage=True, prompt=prompt)
    normalizer = StreamNormalizer(ctx)
    decoder = SSEDecoder()
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    frames: list[bytes] = []
    for event in decoder.feed(body) + decoder.close():
        frames += normalizer.feed(event)
    frames += normalizer.finish()
    shown = orjson.loads(frames[-2][6:])["usage"]
    prompt_tokens, completion_tokens = expected
    assert shown == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    usage = normalizer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.source) == (
        prompt_tokens,
        completion_tokens,
        "upstream",
    )
