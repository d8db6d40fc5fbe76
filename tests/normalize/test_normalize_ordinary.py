"""The stream normalizer's shortcut for ordinary content chunks says exactly what its general path
says: the same bytes, the same fixes, the same usage, for every recorded stream and for chunk
sequences that sit on the shortcut's edges.

The shortcut (``StreamNormalizer._ordinary``) is turned off on a second normalizer to get the
general path's answer for the same input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.framing import Decoder
from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer
from tests.normalize.test_normalize_fixtures import context
from tests.support.replay import Golden, goldens

STREAMS = [g for g in goldens() if g.stream]
_MADE_CALL_ID = re.compile(rb'"call_[A-Za-z0-9]{24}"')


def _run(
    ctx: RequestContext, body: bytes, *, shortcut: bool, decoder: Callable[[], Decoder]
) -> tuple[list[bytes], str | None, Any]:
    normalizer = StreamNormalizer(ctx)
    if not shortcut:
        normalizer._fast = normalizer._shortcut = False
    events = decoder()
    frames: list[bytes] = []
    for event in events.feed(body) + events.close():
        frames += normalizer.feed(event)
    frames += normalizer.finish()
    state = (normalizer.fixes, normalizer.usage, normalizer.error, normalizer._heads)
    return frames, normalizer._id, state


def _same(
    ctx: RequestContext, body: bytes, decoder: Callable[[], Decoder] = SSEDecoder
) -> dict[int, bytes]:
    fast, fast_id, (fast_fixes, fast_usage, fast_error, heads) = _run(
        ctx, body, shortcut=True, decoder=decoder
    )
    slow, slow_id, (slow_fixes, slow_usage, slow_error, _) = _run(
        ctx, body, shortcut=False, decoder=decoder
    )
    if fast_id != slow_id:  # made up by each (the upstream sent none): random, so set aside
        assert fast_id is not None and slow_id is not None
        slow = [frame.replace(slow_id.encode(), fast_id.encode()) for frame in slow]
    # Call ids made up by each (Gemini gives none): random too.
    fast = [_MADE_CALL_ID.sub(b'"call_made"', frame) for frame in fast]
    slow = [_MADE_CALL_ID.sub(b'"call_made"', frame) for frame in slow]
    assert fast == slow
    assert fast_fixes == slow_fixes
    assert fast_usage == slow_usage
    assert repr(fast_error) == repr(slow_error)
    return heads  # type: ignore[no-any-return]


@pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize("golden", STREAMS, ids=lambda g: g.name)
def test_recorded_streams_are_unchanged(golden: Golden, include_usage: bool) -> None:
    _same(context(golden, include_usage), golden.body(), golden.decoder)


@pytest.mark.parametrize("name", ["openai.chat.stream.sse", "anthropic.messages.stream.sse"])
def test_text_streams_take_the_shortcut(name: str) -> None:
    """Not vacuous: OpenAI's own stream (the benchmark's), and what Anthropic's adapter makes of
    its text deltas, are served by the shortcut."""
    golden = next(g for g in STREAMS if g.name == name)
    heads = _same(context(golden, True), golden.body(), golden.decoder)
    assert list(heads) == [0]


def _chunk(**overrides: Any) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "up",
        "system_fingerprint": "fp_1",
        "choices": [
            {"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}
        ],
    }
    chunk.update(overrides)
    return chunk


# Each variant sits on one edge of the shortcut: what it must leave to the general path, or
# what it takes while noting the same fix.
_CHOICE_VARIANTS: list[dict[str, Any]] = [
    {"index": 0, "delta": {"content": 'é "q" \\ \u2028 \U0001f600'}},
    {"index": 0, "delta": {"content": ""}},
    {"index": 0, "delta": {"content": "x", "role": "assistant"}},
    {"index": 0, "delta": {"content": "x", "reasoning_content": None}},
    {"index": 0, "delta": {"reasoning_content": "think"}},
    {"index": 0, "delta": {"content": ["a"]}},
    {"index": 0, "delta": {"content": None}},
    {"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"},
    {"index": 0, "delta": {"content": "x"}, "finish_reason": "eos"},
    {"index": 0, "delta": {"content": "x"}, "logprobs": {"content": []}},
    {"index": 1, "delta": {"content": "x"}},
    {"index": 1, "delta": {"role": "assistant", "content": "y"}},
    {"index": True, "delta": {"content": "x"}},
    {"index": 0.0, "delta": {"content": "x"}},
    {"index": -1, "delta": {"content": "x"}},
    {"index": "0", "delta": {"content": "x"}},
    {"delta": {"content": "x"}},
    {"index": 0, "delta": {"content": "x"}, "token": 7},
    {"index": 0, "delta": "x"},
    "not a choice",
]
_CHUNK_VARIANTS: list[dict[str, Any]] = [
    {},
    {"system_fingerprint": "fp_2"},
    {"system_fingerprint": ""},
    {"system_fingerprint": None},
    {"system_fingerprint": 5},
    {"usage": None},
    {"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
    {"x_groq": {"id": "req_1"}},
    {"error": None},
    {"error": {"message": "boom"}},
    {"object": "chat_completion"},
    {"id": "other"},
    {"created": 5},
    {"service_tier": "default", "obfuscation": "abc"},
]


def _opening(n: int) -> list[dict[str, Any]]:
    """A usual opening (role, then text) per choice: the shortcut is in play after it."""
    chunks = []
    for index in range(n):
        role = {"index": index, "delta": {"role": "assistant", "content": ""}}
        chunks += [
            _chunk(choices=[role]),
            _chunk(choices=[{"index": index, "delta": {"content": "a"}}]),
        ]
    return chunks


def _body(chunks: list[dict[str, Any]], done: bool = True) -> bytes:
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n" if done else body


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("choice", _CHOICE_VARIANTS, ids=repr)
@pytest.mark.parametrize("extra", _CHUNK_VARIANTS, ids=repr)
def test_each_edge(extra: dict[str, Any], choice: Any, n: int) -> None:
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000, n=n)
    # The edge, then ordinary chunks of every choice: they must still read what it changed.
    after = [_chunk(choices=[{"index": i, "delta": {"content": "z"}}]) for i in range(n)]
    _same(ctx, _body([*_opening(n), _chunk(**extra, choices=[choice]), *after]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(_CHUNK_VARIANTS),
            st.lists(st.sampled_from(_CHOICE_VARIANTS), min_size=1, max_size=2),
        ),
        max_size=8,
    ),
    n=st.integers(1, 2),
    include_usage=st.booleans(),
    done=st.booleans(),
)
def test_chunks_on_the_edges(
    steps: list[tuple[dict[str, Any], list[Any]]], n: int, include_usage: bool, done: bool
) -> None:
    ctx = RequestContext(
        endpoint="chat", model="m", created=1_700_000_000, include_usage=include_usage, n=n
    )
    chunks = _opening(n) + [_chunk(**extra, choices=choices) for extra, choices in steps]
    _same(ctx, _body([*chunks, _chunk()], done))


@pytest.mark.parametrize(
    "data", [b"[DONE]", b" [DONE] ", b"[DONE]" + b" " * 40, b"", b"  ", b" " * 40, b"[DONE"]
)
def test_done_and_blank_events_are_told_from_json(data: bytes) -> None:
    """[DONE] and blank events are recognised where JSON fails to parse: all spellings still."""
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000)
    normalizer = StreamNormalizer(ctx)
    decoder = SSEDecoder()
    opening = b"data: " + orjson.dumps(_chunk()) + b"\n\n"
    frames = [f for e in decoder.feed(opening) for f in normalizer.feed(e)]
    assert len(frames) == 1
    frames = [f for e in decoder.feed(b"data:" + data + b"\n\n") for f in normalizer.feed(e)]
    if data.strip() == b"[DONE]":
        assert frames[-1] == b"data: [DONE]\n\n"
    elif not data.strip():
        assert frames == []
    else:
        assert b'"error"' in frames[0]
