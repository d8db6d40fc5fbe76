"""A canonical chat stream told as Anthropic's Messages stream events (sans-IO).

The order is Anthropic's (https://docs.anthropic.com/en/docs/build-with-claude/streaming):
one ``message_start``, then for each content block a ``content_block_start``, its deltas and
its ``content_block_stop``, indices dense from 0, then one ``message_delta`` (the stop reason
and the final usage) and ``message_stop``. A block is closed when the next kind begins: the
reasoning is a thinking block, the content (and a refusal's text) a text block, each tool call
a tool_use block whose arguments come as ``input_json_delta`` fragments, as they came.

``message_start`` waits for the first block (or the end): a failure before it leaves nothing
said, and is answered as an HTTP error that another deployment may still answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from proxy.core.errors import ProxyError, UpstreamProtocolError
from proxy.normalize.faces.anthropic.errors import body_event, encode_event, error_event
from proxy.normalize.faces.anthropic.message import message_usage, stop_reason

__all__ = ["MessageEvents", "message_frames"]

_THINKING: Final = "thinking"
_TEXT: Final = "text"
_CUT_SHORT: Final = {"type": "upstream_error", "message": "The answer ended before it was complete"}
# (delta key, block kind) of a canonical delta's text, in the order Anthropic gives blocks.
_TEXTS: Final = (("reasoning_content", _THINKING), ("content", _TEXT), ("refusal", _TEXT))
# An ordinary canonical text chunk (most of a stream): choice 0's next text alone, the frame the
# chat normalizer writes for it ending with its text and this tail (docs/canonical-output.md).
_ORDINARY_TEXT: Final = b'"choices":[{"index":0,"delta":{"content":'
_ORDINARY_TAIL: Final = b'},"logprobs":null,"finish_reason":null}]}\n\n'
_TEXT_DELTA: Final = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'


def _opening(kind: str) -> dict[str, Any]:
    if kind == _THINKING:
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "text", "text": ""}


def _text_delta(kind: str, text: str) -> dict[str, Any]:
    if kind == _THINKING:
        return {"type": "thinking_delta", "thinking": text}
    return {"type": "text_delta", "text": text}


class MessageEvents:
    """One Messages stream: ``chunk`` for every canonical chat chunk (or ``frame`` for every
    canonical frame), then ``end``, or ``fail``.

    ``counted``: the usage counted so far (an upstream that counts the prompt before it
    answers), for ``message_start``; its ``input_tokens`` is 0 where nothing is counted yet,
    and ``message_delta`` carries the final counts in any case."""

    __slots__ = (
        "_calls",
        "_counted",
        "_finish",
        "_index",
        "_open",
        "_text_head",
        "_usage",
        "ended",
        "failure",
        "message_id",
        "model",
        "started",
    )

    def __init__(
        self,
        *,
        message_id: str,
        model: str,
        counted: Callable[[], dict[str, Any] | None] | None = None,
    ) -> None:
        self.message_id = message_id
        self.model = model
        self._counted = counted
        self.started = False  # message_start was written
        self.ended = False  # message_stop or an error event was written
        self.failure: ProxyError | None = None  # the stream's own failure (``chunk``)
        self._open: object = None  # the open block: _THINKING, _TEXT or a call's index
        self._index = -1  # the latest block's index
        self._calls: set[int] = set()  # the canonical indices of the calls begun
        self._finish: object = None
        # The open text block's delta event up to its text (``frame``'s shortcut); None when
        # no text block is open, or the stream has ended.
        self._text_head: bytes | None = None
        self._usage: dict[str, Any] | None = None

    def start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        usage = message_usage(self._counted() if self._counted is not None else None)
        usage["output_tokens"] = 0
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return [encode_event("message_start", {"type": "message_start", "message": message})]

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        """One canonical ``chat.completion.chunk``: choice 0's deltas, its finish, usage."""
        if self.ended:
            return []
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        out: list[bytes] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # a Messages request asks for one choice
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for key, kind in _TEXTS:
                    text = delta.get(key)
                    if isinstance(text, str) and text:
                        out += self._block(kind, None)
                        out.append(self._delta(_text_delta(kind, text)))
                for fragment in delta.get("tool_calls") or ():
                    out += self._call(fragment)
                    if self.ended:
                        return out
            finish = choice.get("finish_reason")
            if finish is not None:
                self._finish = finish
        return out

    def frame(self, data: bytes) -> list[bytes]:
        """Canonical chat SSE frames (``data: {...}``, ``data: [DONE]``, an error event).

        Most of a stream is ordinary text chunks into an open text block: each one's delta is
        made of the frame's own JSON-encoded text, without decoding the chunk, byte for byte
        what ``chunk`` would write in a fraction of the time. What lies between the choice's
        opening and the tail must be one JSON string (decoded alone to check): then the chunk
        holds that choice and nothing after it; one event alone (no blank line before its end)."""
        head = self._text_head
        if head is not None and data.endswith(_ORDINARY_TAIL):
            at = data.rfind(_ORDINARY_TEXT)
            if at > 0 and data.find(b"\n\n", 0, at) < 0:
                text = data[at + len(_ORDINARY_TEXT) : -len(_ORDINARY_TAIL)]
                try:
                    if type(orjson.loads(text)) is str and len(text) > 2:
                        return [head + text + b"}}\n\n"]
                except orjson.JSONDecodeError:
                    pass
        out: list[bytes] = []
        for event in data.split(b"\n\n"):
            line = event.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out += self.end()
                continue
            value = orjson.loads(payload)
            if isinstance(value, dict) and "error" in value:
                out += self.fail(body_event(value))
            elif isinstance(value, dict):
                out += self.chunk(value)
        return out

    def end(self) -> list[bytes]:
        """The open block's stop, ``message_delta`` with the final usage, ``message_stop``."""
        if self.ended:
            return []
        out = self.start() + self._close()
        self.ended = True
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(self._finish), "stop_sequence": None},
            "usage": message_usage(self._usage),
        }
        out.append(encode_event("message_delta", delta))
        out.append(encode_event("message_stop", {"type": "message_stop"}))
        return out

    def fail(self, event: bytes) -> list[bytes]:
        """The error ``event`` (errors.py), after ``message_start``: the stream's end. Open
        blocks stay open, as Anthropic leaves them when its stream fails."""
        if self.ended:
            return []
        self.ended = True
        self._text_head = None
        return [*self.start(), event]

    def _call(self, fragment: object) -> list[bytes]:
        if not isinstance(fragment, dict) or type(fragment.get("index")) is not int:
            return []
        index: int = fragment["index"]
        function = fragment.get("function")
        arguments = function.get("arguments") if isinstance(function, dict) else None
        out: list[bytes] = []
        if index not in self._calls:
            self._calls.add(index)
            name = function.get("name") if isinstance(function, dict) else None
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": fragment.get("id"),
                "name": name,
                "input": {},
            }
            out += self._block(index, block)
        elif self._open != index:
            # A call's arguments after another block began: Anthropic's blocks do not
            # interleave, and a block once stopped cannot take more.
            self.failure = UpstreamProtocolError(
                "The upstream interleaved the arguments of its tool calls"
            )
            return self.fail(error_event(self.failure))
        if isinstance(arguments, str) and arguments:
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return out

    def _block(self, key: object, block: dict[str, Any] | None) -> list[bytes]:
        """The events that make ``key`` the open block (nothing if it is already)."""
        if self._open == key and block is None:
            return []
        out = self.start() + self._close()
        self._open = key
        self._index += 1
        if block is None:
            assert isinstance(key, str)
            block = _opening(key)
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        if key == _TEXT:
            self._text_head = _TEXT_DELTA % self._index + b'"delta":{"type":"text_delta","text":'
        out.append(encode_event("content_block_start", start))
        return out

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        self._text_head = None
        return [
            encode_event("content_block_stop", {"type": "content_block_stop", "index": self._index})
        ]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        event = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return encode_event("content_block_delta", event)


def message_frames(frames: list[bytes], *, message_id: str, model: str) -> list[bytes]:
    """The Messages stream for a whole canonical chat stream's frames (an upstream that
    answered a stream request in one body, a cached answer): its ``message_start`` has the
    final input counts already."""
    final: dict[str, Any] | None = None
    for data in frames:
        if b'"usage"' in data:
            for event in data.split(b"\n\n"):
                line = event.strip()
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    value = orjson.loads(line[5:].strip())
                    if isinstance(value, dict) and isinstance(value.get("usage"), dict):
                        final = value["usage"]
    events = MessageEvents(message_id=message_id, model=model, counted=lambda: final)
    out: list[bytes] = []
    for data in frames:
        out += events.frame(data)
    if not events.ended:
        out += events.fail(body_event(_CUT_SHORT))  # neither [DONE] nor an error: cut short
    return out
