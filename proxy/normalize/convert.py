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
# Envelope fields that the normalizers keep from the upstream (CANONICAL.md section 1).
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


def response_from_frames(frames: list[bytes], usage: dict[str, Any]) -> bytes:
    """The canonical whole response that a canonical stream (its frames, [DONE] included) tells.

    ``usage`` is the stream's (the normalizer's upstream counts or its estimate).
    """
    envelope: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    chat = True
    for frame in frames:
        data = frame[6:-2]  # b"data: " ... b"\n\n"
        if data == b"[DONE]":
            break
        chunk = orjson.loads(data)
        if not envelope:
            chat = chunk["object"] == "chat.completion.chunk"
            envelope = {
                "id": chunk["id"],
                "object": "chat.completion" if chat else "text_completion",
                "created": chunk["created"],
                "model": chunk["model"],
            }
        for key in _PASSED_ON:
            if chunk.get(key):
                envelope[key] = chunk[key]
        for choice in chunk["choices"]:
            whole = choices.setdefault(choice["index"], _empty_choice(choice["index"], chat))
            _add(whole, choice, chat)
    for whole in choices.values():
        if chat:
            message: dict[str, Any] = whole["message"]
            if not message["tool_calls"]:
                del message["tool_calls"]
            if not message["reasoning_content"]:
                del message["reasoning_content"]
            if not message["content"] and (message.get("tool_calls") or message["refusal"]):
                message["content"] = None  # as OpenAI answers a tool call or a refusal
    return orjson.dumps(
        {**envelope, "choices": [choices[i] for i in sorted(choices)], "usage": usage}
    )


def _empty_choice(index: int, chat: bool) -> dict[str, Any]:
    if chat:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "",
            "refusal": None,
            "reasoning_content": "",
            "tool_calls": [],
        }
        return {"index": index, "message": message, "logprobs": None, "finish_reason": None}
    return {"index": index, "text": "", "logprobs": None, "finish_reason": None}


def _add(whole: dict[str, Any], choice: dict[str, Any], chat: bool) -> None:
    if choice.get("finish_reason"):
        whole["finish_reason"] = choice["finish_reason"]
    if choice.get("logprobs"):
        merged = whole["logprobs"] or {}
        for key, items in choice["logprobs"].items():
            if isinstance(items, list):
                merged[key] = (merged.get(key) or []) + items
            else:
                merged.setdefault(key, items)  # the schema wants refusal: null kept, say
        whole["logprobs"] = merged
    if not chat:
        whole["text"] += choice["text"]
        return
    message, delta = whole["message"], choice["delta"]
    message["content"] += delta.get("content") or ""
    message["reasoning_content"] += delta.get("reasoning_content") or ""
    if delta.get("refusal"):
        message["refusal"] = (message["refusal"] or "") + delta["refusal"]
    for fragment in delta.get("tool_calls", ()):
        calls = message["tool_calls"]
        if fragment["index"] == len(calls):
            function = fragment["function"]
            calls.append(
                {
                    "id": fragment["id"],
                    "type": "function",
                    "function": {
                        "name": function["name"],
                        "arguments": function.get("arguments", ""),
                    },
                }
            )
        else:
            calls[fragment["index"]]["function"]["arguments"] += fragment["function"]["arguments"]
