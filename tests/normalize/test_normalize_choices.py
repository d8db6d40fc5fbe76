"""Which choice each upstream index is, for a chat stream whose client asked for one (sans-IO).

A choice index the client did not ask for is a choice of its own (docs/canonical-output.md section
2: text is never merged), except TGI <= 2.0's token positions, which count up by one per chunk and
never come back. A chunk that might be either waits for the next one, which tells; nothing it held
is lost, whatever comes next.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer

DONE = b"[DONE]"


def _chunk(index: int, text: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"}
    if text is not None:
        delta["content"] = text
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1764600000,
        "choices": [choice],
    }


def _run(events: list[Any], n: int = 1) -> tuple[dict[int, str], dict[int, str | None], Any]:
    """(text per client choice, finish per choice, the error object or None)."""
    body = b"".join(
        b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n" for e in events
    )
    normalizer = StreamNormalizer(RequestContext("chat", "m", 1764600000, n=n))
    decoder = SSEDecoder()
    frames: list[bytes] = []
    for event in decoder.feed(body) + decoder.close():
        frames += normalizer.feed(event)
    frames += normalizer.finish()
    texts: dict[int, str] = {}
    finishes: dict[int, str | None] = {}
    error = None
    for frame in frames:
        data = frame[6:-2]
        if data == b"[DONE]":
            continue
        payload = orjson.loads(data)
        if "error" in payload:
            error = payload["error"]
            continue
        for choice in payload["choices"]:
            index = choice["index"]
            texts[index] = texts.get(index, "") + (choice["delta"].get("content") or "")
            finishes[index] = choice["finish_reason"] or finishes.get(index)
    return texts, finishes, error


@pytest.mark.parametrize(
    ("events", "texts"),
    [
        # Token positions: one choice.
        ([_chunk(0, "a"), _chunk(1, "b"), _chunk(2, "c", "stop")], {0: "abc"}),
        # Positions that start late, [DONE] with no finish: still one choice.
        ([_chunk(7, "a"), _chunk(8, "b"), DONE], {0: "ab"}),
        # The second index comes back: two choices, nothing merged.
        (
            [_chunk(0, "a"), _chunk(1, "b"), _chunk(0, "c"), _chunk(1, "d"), DONE],
            {0: "ac", 1: "bd"},
        ),
        # The second index repeats itself: a choice streamed in turn, though 0 never finished.
        ([_chunk(0, "a"), _chunk(1, "b"), _chunk(1, "c"), DONE], {0: "a", 1: "bc"}),
        # A jump is no token position: a choice, numbered densely.
        ([_chunk(0, "a"), _chunk(2, "b"), _chunk(0, "c"), DONE], {0: "ac", 1: "b"}),
        # A role with no text opens a choice at once.
        (
            [_chunk(0, "a"), _chunk(1, ""), _chunk(1, "b"), _chunk(0, "c"), DONE],
            {0: "ac", 1: "b"},
        ),
        # After a finish, a new index is a new choice.
        ([_chunk(0, "a", "stop"), _chunk(1, "b", "stop")], {0: "a", 1: "b"}),
    ],
)
def test_indices_of_one_asked_for_choice(events: list[Any], texts: dict[int, str]) -> None:
    got, finishes, error = _run(events)
    assert error is None
    assert got == texts
    assert set(finishes) == set(texts) and all(finishes.values())


def test_a_held_chunk_reaches_the_client_before_an_error() -> None:
    error = {"error": {"message": "boom", "type": "server_error"}}
    texts, _, got = _run([_chunk(0, "a"), _chunk(1, "b"), error])
    assert texts == {0: "ab"} and got["message"] == "boom"


def test_a_held_chunk_reaches_the_client_before_a_stream_cut_short() -> None:
    texts, _, got = _run([_chunk(0, "a"), _chunk(1, "b")])
    assert texts == {0: "ab"} and got["type"] == "upstream_error"


def test_indices_are_kept_when_the_client_asked_for_several() -> None:
    texts, _, _ = _run([_chunk(0, "a"), _chunk(1, "b"), _chunk(2, "c")], n=3)
    assert texts == {0: "a", 1: "b", 2: "c"}
