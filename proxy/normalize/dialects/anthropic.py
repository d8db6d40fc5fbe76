"""Anthropic's Messages API (``POST {base_url}/v1/messages``), translated both ways.

docs/providers/anthropic.md says what is translated, what is refused and what to set. The
request is built in ``anthropic_request``; here Anthropic's answers, streamed (SOURCES.md
section G) or whole, become OpenAI-shaped ones for the normalizer to finish.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.normalize.dialects.anthropic_request import JSON_TOOL, build_request
from proxy.normalize.dialects.dialect import Dialect, EventAdapter
from proxy.normalize.fields import RequestContext

# stop_reason -> finish_reason (SOURCES.md section E); "tool_use" depends on what was called.
_FINISH: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool's loop paused: for the client, the turn ended
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
# Anthropic's counts: input_tokens leaves out the cached prefix, read or written.
_COUNTS: Final = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)
_SPLICED: Final = "The upstream began a second message within the same stream"


def finish_reason(stop_reason: object, called: bool) -> str | None:
    """The canonical finish_reason; ``called``: a tool call of the client's was given."""
    if not isinstance(stop_reason, str):
        return None
    if stop_reason == "tool_use":
        # Only the proxy's own response_format tool called: that was the answer.
        return "tool_calls" if called else "stop"
    return _FINISH.get(stop_reason, "stop")  # a reason added since: the turn did end


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def openai_usage(counts: Mapping[str, object]) -> dict[str, Any] | None:
    """OpenAI's usage for Anthropic's counts, or None if there are none: prompt_tokens counts
    the cached prefix too (OpenAI's convention), of which cached_tokens were read."""
    fresh, read, written, output = (_count(counts.get(key)) for key in _COUNTS)
    if fresh is None and output is None:
        return None
    completion = output or 0  # thinking included, as OpenAI's reasoning tokens are
    usage: dict[str, Any] = {"completion_tokens": completion}
    if fresh is not None:  # else no count of the prompt: the normalizer estimates it
        prompt = fresh + (read or 0) + (written or 0)
        usage = {"prompt_tokens": prompt, **usage, "total_tokens": prompt + completion}
    details = {}
    if read is not None:
        details["cached_tokens"] = read
    if written is not None:
        details["cache_write_tokens"] = written
    if details:
        usage["prompt_tokens_details"] = details
    return usage


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "choices": [choice]}


def _block_index(payload: dict[str, Any]) -> int | None:
    index = payload.get("index")
    return index if type(index) is int else None


class _Stream:
    """One stream's events. A content block's kind is told by its start only, and its deltas
    name only its index: the adapter remembers which blocks are tool calls, and their calls'
    indices count the calls (the block index counts text and thinking blocks too)."""

    __slots__ = ("_calls", "_counts", "_id", "_json_blocks", "_said", "_started")

    def __init__(self) -> None:
        self._started = False
        self._said = False  # a block's text, reasoning or call has gone to the normalizer
        self._id: object = None
        self._calls: dict[int, int] = {}  # block index -> its tool call's index
        self._json_blocks: set[int] = set()  # blocks of the proxy's response_format tool
        self._counts: dict[str, object] = {}

    def __call__(self, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        kind = payload.get("type")
        if kind == "content_block_delta":
            chunk = self._delta(payload)
        elif kind == "content_block_start":
            chunk = self._block_start(payload)
        elif kind == "message_delta":
            return self._message_delta(payload), False
        elif kind == "message_start":
            return self._message_start(payload), False
        elif kind == "message_stop":
            return None, True
        else:
            # ping, content_block_stop, and event types added since: nothing for the client.
            return None, False
        self._said = self._said or chunk is not None
        return chunk, False

    def _message_start(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        message = payload.get("message")
        if not isinstance(message, dict):
            message = {}
        if self._started:
            if message.get("id") == self._id:
                return None  # sent twice (SOURCES.md, duplicate-message-start)
            if self._said:
                # An upstream retry spliced into the body (SOURCES.md, spliced): what the first
                # attempt said has gone to the client, and the second's would follow it, mixed.
                return {"error": {"message": _SPLICED, "type": "upstream_error"}}
            # The first attempt said nothing yet: the second is the answer.
            self._calls.clear()
            self._json_blocks.clear()
            self._counts.clear()
        self._started = True
        self._id = message.get("id")
        self._take_counts(message.get("usage"))
        # No role chunk yet: the client's first byte waits for the first text or call, so that
        # an error coming before it (an overload) is still an HTTP error, tried again. The
        # empty choice carries the counts: a stream that fails later still tells its prompt's.
        chunk: dict[str, Any] = {"object": "chat.completion.chunk"}
        if isinstance(self._id, str):
            chunk["id"] = self._id
        if "model" in message:
            chunk["model"] = message["model"]  # the upstream's, for the span (never shown)
        chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": None}]
        usage = openai_usage(self._counts)
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def _block_start(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        block = payload.get("content_block")
        index = _block_index(payload)
        if not isinstance(block, dict) or index is None:
            return None
        kind = block.get("type")
        if kind == "text":
            return _text(block.get("text"), "content")
        if kind == "thinking":
            return _text(block.get("thinking"), "reasoning_content")
        if kind != "tool_use":
            return None  # redacted_thinking, server tools' blocks, kinds added since
        # Its input starts as {} and comes in input_json_delta fragments.
        if block.get("name") == JSON_TOOL:
            self._json_blocks.add(index)
            return None
        position = self._calls[index] = len(self._calls)
        call = {
            "index": position,
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": ""},
        }
        return _chunk({"tool_calls": [call]})

    def _delta(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return None
        kind = delta.get("type")
        if kind == "text_delta":
            return _text(delta.get("text"), "content")
        if kind == "thinking_delta":
            return _text(delta.get("thinking"), "reasoning_content")
        if kind != "input_json_delta":
            return None  # signature_delta, citations_delta, kinds added since
        fragment = delta.get("partial_json")
        index = _block_index(payload)
        if not isinstance(fragment, str) or not fragment or index is None:
            return None
        if index in self._json_blocks:
            return _chunk({"content": fragment})  # response_format's JSON is the content
        position = self._calls.get(index)
        if position is None:
            return None  # of a block that never started as a call
        return _chunk({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]})

    def _message_delta(self, payload: dict[str, Any]) -> dict[str, Any]:
        # Its counts are cumulative and may correct message_start's (input-tokens-in-delta).
        self._take_counts(payload.get("usage"))
        delta = payload.get("delta")
        stop_reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        chunk = _chunk({}, finish_reason(stop_reason, bool(self._calls)))
        usage = openai_usage(self._counts)
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def _take_counts(self, usage: object) -> None:
        if isinstance(usage, dict):
            for key in _COUNTS:
                if _count(usage.get(key)) is not None:
                    self._counts[key] = usage[key]


def _text(text: object, key: str) -> dict[str, Any] | None:
    return _chunk({key: text}) if isinstance(text, str) and text else None


def _adapter(ctx: RequestContext) -> EventAdapter:
    return _Stream()


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    """The chat.completion for a whole Message: text blocks are the content, thinking blocks
    the reasoning, tool_use blocks the calls (the proxy's response_format tool the content)."""
    if body.get("type") == "error" and body.get("error"):
        return {"error": body["error"]}
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    blocks = body.get("content")
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            content.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            arguments = _json_text(block.get("input", {}))
            if block.get("name") == JSON_TOOL:
                content.append(arguments)
            else:
                function = {"name": block.get("name"), "arguments": arguments}
                calls.append({"id": block.get("id"), "type": "function", "function": function})
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(content) if content else None,
    }
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    finish = finish_reason(body.get("stop_reason"), bool(calls))
    out: dict[str, Any] = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
    }
    if "id" in body:
        out["id"] = body["id"]
    if "model" in body:
        out["model"] = body["model"]
    usage = body.get("usage")
    if isinstance(usage, dict):
        out["usage"] = openai_usage(usage)
    return out


def _json_text(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        # orjson writes less deep a document than it reads.
        raise UpstreamProtocolError("The upstream sent tool input nested too deeply") from None


def _auth(api_key: str) -> dict[str, str]:
    return {"x-api-key": api_key}


DIALECT: Final = Dialect(
    "anthropic",
    paths={"chat": "/v1/messages"},
    adapter=_adapter,
    adapt_response=adapt_response,
    request=build_request,
    auth=_auth,
    # The API version the translation is written against; a configured header replaces it.
    headers={"anthropic-version": "2023-06-01"},
    native=True,
)
