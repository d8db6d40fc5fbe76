"""Converting between a whole response and a stream, for upstreams that ignore ``stream``.

Some servers answer ``"stream": true`` with one JSON body, others ``"stream": false`` with an
event stream; the client still gets what it asked for. Both directions work on canonical
objects, after the normalizers.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.sse import DONE_FRAME, encode_data
from proxy.normalize.fields import RequestContext

_DELTA_KEYS = ("role", "content", "reasoning_content", "refusal", "function_call")
# Envelope fields that the normalizers keep from the upstream (docs/canonical-output.md section 1).
_PASSED_ON = ("service_tier", "system_fingerprint")


def frames_from_response(body: bytes, ctx: RequestContext) -> list[bytes]:
    """A canonical whole response (as ``normalize_response`` makes it) told as a stream:
    one chunk of everything per choice, then its finish, usage if asked, and [DONE]."""
    whole = orjson.loads(body)
    chat = ctx.endpoint == "chat"
    envelope = {
        "id": whole["id"],
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": whole["created"],
        "model": whole["model"],
    }
    for key in _PASSED_ON:
        if key in whole:
            envelope[key] = whole[key]
    frames = []
    for choice in whole["choices"]:
        if chat:
            message = choice["message"]
            delta = {key: message[key] for key in _DELTA_KEYS if message.get(key) is not None}
            if message.get("tool_calls"):
                delta["tool_calls"] = [
                    {"index": i, **call} for i, call in enumerate(message["tool_calls"])
                ]
            first = {
                "index": choice["index"],
                "delta": delta,
                "logprobs": choice["logprobs"],
                "finish_reason": None,
            }
            last = {
                "index": choice["index"],
                "delta": {},
                "logprobs": None,
                "finish_reason": choice["finish_reason"],
            }
        else:
            first = {**choice, "finish_reason": None}
            last = {
                "index": choice["index"],
                "text": "",
                "logprobs": None,
                "finish_reason": choice["finish_reason"],
            }
        frames.append(encode_data(orjson.dumps({**envelope, "choices": [first]})))
        frames.append(encode_data(orjson.dumps({**envelope, "choices": [last]})))
    if ctx.include_usage:
        frames.append(
            encode_data(orjson.dumps({**envelope, "choices": [], "usage": whole["usage"]}))
        )
    frames.append(DONE_FRAME)
    return frames


class Collector:
    """The canonical whole response that a canonical stream tells, put together as its frames
    come (``add``), so that only what the answer says is kept, not every frame.

    Text is kept as its pieces and joined once (``response``): a stream may bring megabytes in
    thousands of pieces, and joining them one by one would copy the text so far each time."""

    __slots__ = ("_chat", "_choices", "_envelope", "usage")

    def __init__(self) -> None:
        self._envelope: dict[str, Any] = {}
        self._choices: dict[int, _Choice] = {}
        self._chat = True
        self.usage: dict[str, Any] | None = None  # the stream's usage chunk's, once it came

    def add(self, frame: bytes) -> None:
        """One canonical frame (``data: {...}``); [DONE] and anything after it are ignored."""
        data = frame[6:-2]  # b"data: " ... b"\n\n"
        if data == b"[DONE]":
            return
        chunk = orjson.loads(data)
        if not self._envelope:
            self._chat = chunk["object"] == "chat.completion.chunk"
            self._envelope = {
                "id": chunk["id"],
                "object": "chat.completion" if self._chat else "text_completion",
                "created": chunk["created"],
                "model": chunk["model"],
            }
        for key in _PASSED_ON:
            if chunk.get(key):
                self._envelope[key] = chunk[key]
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for choice in chunk["choices"]:
            index = choice["index"]
            whole = self._choices.get(index)
            if whole is None:
                whole = self._choices[index] = _Choice(index)
            whole.add(choice, self._chat)

    def response(self, usage: dict[str, Any]) -> bytes:
        """The whole response, with ``usage`` (the normalizer's counts or its estimate)."""
        choices = [self._choices[i].whole(self._chat) for i in sorted(self._choices)]
        return orjson.dumps({**self._envelope, "choices": choices, "usage": usage})


def response_from_frames(frames: list[bytes], usage: dict[str, Any]) -> bytes:
    """The canonical whole response that a canonical stream (its frames, [DONE] included) tells.

    ``usage`` is the stream's (the normalizer's upstream counts or its estimate).
    """
    collector = Collector()
    for frame in frames:
        collector.add(frame)
    return collector.response(usage)


class _Choice:
    """One choice of a collected stream: its pieces of text, joined once when it is whole."""

    __slots__ = ("calls", "content", "finish_reason", "index", "logprobs", "reasoning", "refusal")

    def __init__(self, index: int) -> None:
        self.index = index
        self.finish_reason: str | None = None
        self.logprobs: dict[str, Any] | None = None
        self.content: list[str] = []  # a chat message's content, or a completion's text
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: list[tuple[dict[str, Any], list[str]]] = []  # each call and its arguments

    def add(self, choice: dict[str, Any], chat: bool) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        if choice.get("logprobs"):
            merged = self.logprobs if self.logprobs is not None else {}
            for key, items in choice["logprobs"].items():
                kept = merged.get(key)
                if isinstance(items, list) and isinstance(kept, list):
                    kept.extend(items)
                elif isinstance(items, list):
                    merged[key] = list(items)
                else:
                    merged.setdefault(key, items)  # the schema wants refusal: null kept, say
            self.logprobs = merged
        if not chat:
            self.content.append(choice["text"])
            return
        delta = choice["delta"]
        for pieces, key in (
            (self.content, "content"),
            (self.reasoning, "reasoning_content"),
            (self.refusal, "refusal"),
        ):
            if delta.get(key):
                pieces.append(delta[key])
        for fragment in delta.get("tool_calls", ()):
            function = fragment["function"]
            if fragment["index"] == len(self.calls):
                call = {"id": fragment["id"], "type": "function", "name": function["name"]}
                self.calls.append((call, [function.get("arguments", "")]))
            else:
                self.calls[fragment["index"]][1].append(function["arguments"])

    def whole(self, chat: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if not chat:
            out["text"] = "".join(self.content)
            out["logprobs"] = self.logprobs
            out["finish_reason"] = self.finish_reason
            return out
        calls = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": "".join(arguments)},
            }
            for call, arguments in self.calls
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content),
            "refusal": "".join(self.refusal) if self.refusal else None,
        }
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if calls:
            message["tool_calls"] = calls
        if not message["content"] and (calls or message["refusal"]):
            message["content"] = None  # as OpenAI answers a tool call or a refusal
        out["message"] = message
        out["logprobs"] = self.logprobs
        out["finish_reason"] = self.finish_reason
        return out
