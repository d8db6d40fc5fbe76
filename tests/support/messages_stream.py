"""Anthropic's Messages stream grammar, checked event by event, and the message it tells.

``check_messages_stream`` holds a stream of events to the order Anthropic's API writes
(https://docs.anthropic.com/en/docs/build-with-claude/streaming): one ``message_start`` first,
then per content block one ``content_block_start``, deltas of its own kind and one
``content_block_stop``, indices dense from 0, one block open at a time; then exactly one
``message_delta`` and one ``message_stop``, last (or, for a stream that failed, an ``error``
event last). Usage is four integers, never null. It returns the message the events add up to,
as the SDKs accumulate it, to compare with the whole answer.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.sse import SSEDecoder

COUNTS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
_DELTAS = {
    "text": {"text_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
}
_OPENINGS = {
    "text": {"type": "text", "text": ""},
    "thinking": {"type": "thinking", "thinking": "", "signature": ""},
}


def parse_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The (name, payload) of every event in ``body``, each written as ``event: NAME`` and one
    ``data:`` line with the payload's ``type`` the same as the name."""
    assert body.endswith(b"\n\n"), body[-200:]
    events = []
    for frame in body[:-2].split(b"\n\n"):
        lines = frame.split(b"\n")
        assert len(lines) == 2, frame[:200]
        assert lines[0].startswith(b"event: ") and lines[1].startswith(b"data: "), frame[:200]
        name = lines[0][7:].decode()
        payload = orjson.loads(lines[1][6:])
        assert isinstance(payload, dict) and payload.get("type") == name, frame[:200]
        events.append((name, payload))
    decoded = SSEDecoder().feed(body)  # what a client's SSE parser makes of it: the same
    assert [(e.event, orjson.loads(e.data)) for e in decoded] == events
    return events


def _usage(usage: object, *, complete: bool) -> dict[str, int]:
    assert isinstance(usage, dict), usage
    if complete:
        assert set(COUNTS) <= usage.keys(), usage
    for key in COUNTS:
        if key in usage:
            value = usage[key]
            assert type(value) is int and value >= 0, (key, value)
    return {key: usage[key] for key in COUNTS if key in usage}


def check_messages_stream(body: bytes, *, failed: bool = False) -> dict[str, Any]:
    """Check ``body`` against the grammar; the message it tells (with ``error``: the failed
    stream's error event's error, when ``failed``)."""
    events = parse_events(body)
    assert events, "an empty stream"
    name, first = events[0]
    assert name == "message_start", name
    message = first["message"]
    assert set(message) == {
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "usage",
    }, message
    assert message["type"] == "message" and message["role"] == "assistant"
    assert isinstance(message["id"], str) and isinstance(message["model"], str)
    assert message["content"] == [] and message["stop_reason"] is None
    assert message["stop_sequence"] is None
    usage = _usage(message["usage"], complete=True)
    result: dict[str, Any] = {**message, "content": [], "usage": usage}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, list[str]] = {}
    open_index: int | None = None
    stopped: set[int] = set()
    delta_seen = stop_seen = False
    for position, (name, payload) in enumerate(events[1:], start=1):
        last = position == len(events) - 1
        assert not stop_seen, "an event after message_stop"
        if name == "ping":
            assert set(payload) == {"type"}
            continue
        if name == "error":
            assert failed and last, "an error event that does not end a failed stream"
            assert set(payload) == {"type", "error"} and set(payload["error"]) == {
                "type",
                "message",
            }
            result["error"] = payload["error"]
            continue
        assert not delta_seen or name == "message_stop", f"{name} after message_delta"
        if name == "content_block_start":
            assert open_index is None, "a block started before the last one stopped"
            assert set(payload) == {"type", "index", "content_block"}
            assert payload["index"] == len(blocks), "block indices are dense from 0"
            block = payload["content_block"]
            kind = block["type"]
            if kind == "tool_use":
                assert set(block) == {"type", "id", "name", "input"}, block
                assert isinstance(block["id"], str) and block["id"]
                assert isinstance(block["name"], str) and block["name"]
                assert block["input"] == {}
                partial[len(blocks)] = []
            else:
                assert block == _OPENINGS[kind], block
            blocks.append(dict(block))
            open_index = payload["index"]
        elif name == "content_block_delta":
            assert set(payload) == {"type", "index", "delta"}
            assert open_index is not None and payload["index"] == open_index, "a stray delta"
            block, delta = blocks[open_index], payload["delta"]
            assert delta["type"] in _DELTAS[block["type"]], (block["type"], delta)
            field = {
                "text_delta": "text",
                "thinking_delta": "thinking",
                "signature_delta": "signature",
                "input_json_delta": "partial_json",
            }[delta["type"]]
            assert set(delta) == {"type", field} and isinstance(delta[field], str), delta
            if field == "partial_json":
                partial[open_index].append(delta[field])
            else:
                block[field] += delta[field]
        elif name == "content_block_stop":
            assert set(payload) == {"type", "index"}
            assert open_index is not None and payload["index"] == open_index
            assert open_index not in stopped
            stopped.add(open_index)
            open_index = None
        elif name == "message_delta":
            assert not failed, "a failed stream's message_delta"
            assert open_index is None, "message_delta with a block open"
            assert set(payload) == {"type", "delta", "usage"}
            assert set(payload["delta"]) == {"stop_reason", "stop_sequence"}
            assert payload["delta"]["stop_reason"] in STOP_REASONS
            result.update(payload["delta"])
            # Cumulative: the SDKs overwrite the counts that message_start gave.
            result["usage"] = {**usage, **_usage(payload["usage"], complete=True)}
            delta_seen = True
        elif name == "message_stop":
            assert delta_seen and last and set(payload) == {"type"}, "message_stop out of place"
            stop_seen = True
        else:
            raise AssertionError(f"an unknown event {name}")
    assert stop_seen or failed, "no message_stop"
    if failed:
        assert "error" in result, "a failed stream without its error event"
    for index, fragments in partial.items():
        text = "".join(fragments)
        if failed:  # cut off anywhere: what came of the input, unparsed
            blocks[index]["input"] = text
        else:
            blocks[index]["input"] = orjson.loads(text) if text else {}
    result["content"] = blocks
    return result


def check_usage_consistent(usage: dict[str, int], canonical: dict[str, Any]) -> None:
    """Anthropic's counts against the canonical usage they were made from: the prompt is the
    fresh input plus the cached prefix, read or written."""
    details = canonical.get("prompt_tokens_details") or {}
    assert usage["cache_read_input_tokens"] == details.get("cached_tokens", 0)
    assert usage["cache_creation_input_tokens"] == details.get("cache_write_tokens", 0)
    prompt = (
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
    )
    assert prompt == canonical["prompt_tokens"]
    assert usage["output_tokens"] == canonical["completion_tokens"]
