"""The ``endless`` fault's stream: valid events of the endpoint's own dialect, forever.

Each dialect's events are what its recordings hold, cut to the least that a client of that
API takes as text arriving: Anthropic, Cohere and OpenAI's Responses API open a message and a
content block (part) first, and name every event in an SSE ``event:`` field as their streams
do; Responses events also count themselves in ``sequence_number``. Bedrock's ConverseStream
opens its message and sends text deltas (a text block has no start event). The events are
framed as the stream would be: SSE, NDJSON lines, the elements of one JSON array, or AWS
event-stream frames.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Final

import orjson

from proxy.core.eventstream import encode_event
from proxy.emulator.endpoint import Endpoint

Event = tuple[str | None, object]
"""An SSE event's name (None: no ``event:`` field) and its data."""


def endless_event(endpoint: Endpoint, ending: str, model: str, index: int) -> bytes:
    """Write number ``index`` of a never-ending ``endpoint`` stream whose recordings' names
    end in ``ending`` (``.sse``, ``.ndjson``, ``.json-array.json`` or ``.eventstream.jsonl``)."""
    make = _EVENTS.get((endpoint.dialect, endpoint.name), _chat_events)
    events = make(model, index)
    if ending.endswith(".eventstream.jsonl"):
        return b"".join(encode_event(name or "", orjson.dumps(data)) for name, data in events)
    if ending.endswith(".ndjson"):
        return b"".join(orjson.dumps(data) + b"\n" for _, data in events)
    if ending.endswith(".json-array.json"):
        # Gemini's array form: one array, opened by the first write and never closed.
        elements = [orjson.dumps(data) + b"\r\n" for _, data in events]
        return (b"[" if index == 0 else b",") + b",".join(elements)
    return b"".join(_sse(name, data) for name, data in events)


def _sse(name: str | None, data: object) -> bytes:
    field = b"event: " + name.encode() + b"\n" if name is not None else b""
    return field + b"data: " + orjson.dumps(data) + b"\n\n"


def _chat_events(model: str, index: int) -> list[Event]:
    # OpenAI announces the role in the first delta only.
    delta = {"role": "assistant", "content": ""} if index == 0 else {"content": "x "}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    chunk = {
        "id": "chatcmpl-emulator-endless",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [choice],
    }
    return [(None, chunk)]


def _completion_events(model: str, index: int) -> list[Event]:
    choice = {"index": 0, "text": "x ", "logprobs": None, "finish_reason": None}
    chunk = {
        "id": "cmpl-emulator-endless",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": [choice],
    }
    return [(None, chunk)]


def _responses_events(model: str, index: int) -> list[Event]:
    # Four events open the stream, so delta number ``index`` is event number index + 4.
    delta: dict[str, object] = {
        "type": "response.output_text.delta",
        "sequence_number": index + 4,
        "item_id": "msg_emulator_endless",
        "output_index": 0,
        "content_index": 0,
        "delta": "x ",
        "logprobs": [],
    }
    if index:
        return [("response.output_text.delta", delta)]
    response = {
        "id": "resp_emulator_endless",
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": None,
        "top_p": None,
        "metadata": {},
    }
    item = {
        "id": "msg_emulator_endless",
        "type": "message",
        "status": "in_progress",
        "content": [],
        "role": "assistant",
    }
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    opening: list[dict[str, object]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.content_part.added",
            "item_id": "msg_emulator_endless",
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
    ]
    events: list[Event] = [
        (str(event["type"]), {**event, "sequence_number": number})
        for number, event in enumerate(opening)
    ]
    return [*events, ("response.output_text.delta", delta)]


def _inference_events(model: str, index: int) -> list[Event]:
    return [(None, {"text": "x "})]  # Maritaca's legacy stream: bare text events.


def _anthropic_events(model: str, index: int) -> list[Event]:
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "x "},
    }
    if index:
        return [("content_block_delta", delta)]
    message: dict[str, object] = {
        "id": "msg_emulator_endless",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    return [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", block),
        ("content_block_delta", delta),
    ]


def _gemini_events(model: str, index: int) -> list[Event]:
    candidate = {"content": {"parts": [{"text": "x "}], "role": "model"}, "index": 0}
    return [(None, {"candidates": [candidate], "modelVersion": model, "responseId": "endless"})]


def _cohere_events(model: str, index: int) -> list[Event]:
    text = {"text": "x "}
    delta = {"type": "content-delta", "index": 0, "delta": {"message": {"content": text}}}
    if index:
        return [("content-delta", delta)]
    message = {
        "role": "assistant",
        "content": [],
        "tool_plan": "",
        "tool_calls": [],
        "citations": [],
    }
    start = {"id": "emulator-endless", "type": "message-start", "delta": {"message": message}}
    content = {"type": "text", "text": ""}
    block = {"type": "content-start", "index": 0, "delta": {"message": {"content": content}}}
    return [("message-start", start), ("content-start", block), ("content-delta", delta)]


def _bedrock_events(model: str, index: int) -> list[Event]:
    delta: Event = ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x "}})
    if index:
        return [delta]
    return [("messageStart", {"role": "assistant"}), delta]


_EPOCH: Final = "1970-01-01T00:00:00Z"


def _ollama_chat_events(model: str, index: int) -> list[Event]:
    message = {"role": "assistant", "content": "x "}
    return [(None, {"model": model, "created_at": _EPOCH, "message": message, "done": False})]


def _ollama_generate_events(model: str, index: int) -> list[Event]:
    return [(None, {"model": model, "created_at": _EPOCH, "response": "x ", "done": False})]


def _tgi_events(model: str, index: int) -> list[Event]:
    token = {"id": 0, "text": "x ", "logprob": 0.0, "special": False}
    return [(None, {"token": token, "generated_text": None, "details": None})]


_EVENTS: Final[MappingProxyType[tuple[str, str], Callable[[str, int], list[Event]]]] = (
    MappingProxyType(
        {
            ("openai", "chat"): _chat_events,
            ("openai", "completions"): _completion_events,
            ("openai", "responses"): _responses_events,
            ("maritaca", "chat-inference"): _inference_events,
            ("anthropic", "messages"): _anthropic_events,
            ("vertex-anthropic", "messages"): _anthropic_events,
            ("bedrock", "converse-stream"): _bedrock_events,
            ("gemini", "generate-content"): _gemini_events,
            ("cohere", "chat"): _cohere_events,
            ("ollama", "api-chat"): _ollama_chat_events,
            ("ollama", "api-generate"): _ollama_generate_events,
            ("tgi", "generate-stream"): _tgi_events,
            ("tgi", "generate"): _tgi_events,
        }
    )
)
