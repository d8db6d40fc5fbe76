"""The provider endpoints the emulator answers, and which recording a request asks for.

Providers mount the same API under different prefixes (``/v1``, ``/openai/v1``,
``/serverless/v1``, ``/api``), so an endpoint is recognised by how its path ends. The table is
searched in order because ``/completions`` is also how ``/chat/completions`` ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import orjson


@dataclass(frozen=True)
class Endpoint:
    method: str
    suffix: str
    name: str
    """The ``<endpoint>`` part of the recordings' names."""


ENDPOINTS: Final = (
    Endpoint("POST", "/chat/completions", "chat"),
    Endpoint("POST", "/completions", "completions"),
    # Maritaca's legacy API is mounted at /api, so its path is /api/chat/inference.
    Endpoint("POST", "/chat/inference", "chat-inference"),
    Endpoint("GET", "/models", "models"),
)


def match_endpoint(path: str) -> Endpoint | None:
    """The endpoint that ``path`` ends with, whatever its prefix."""
    path = path.rstrip("/")
    for endpoint in ENDPOINTS:
        if path.endswith(endpoint.suffix):
            return endpoint
    return None


def recording_names(model: str, endpoint: Endpoint, *, stream: bool) -> tuple[str, ...]:
    """The recordings that would answer ``model``, best first.

    A model that names a file gets that file whatever it asked for, so a test can pick a
    variant (``groq.chat.stream.tool-call.sse``); otherwise ``<model>.<endpoint>.stream.sse``
    answers a streaming request and ``<model>.<endpoint>.json`` any other. A model with no
    stream recording answers a stream request with its JSON body, as servers that ignore
    ``stream`` do (Maritaca's OpenAI-compatible stream was never recorded).
    """
    whole = f"{model}.{endpoint.name}.json"
    if stream:
        return (model, f"{model}.{endpoint.name}.stream.sse", whole)
    return (model, whole)


def model_list(recordings: list[str]) -> bytes:
    """An OpenAI ``GET /models`` body naming every model a request can ask for."""
    ids = sorted({name.split(".", 1)[0] for name in recordings} | set(recordings))
    data = [{"id": id_, "object": "model", "created": 0, "owned_by": "emulator"} for id_ in ids]
    return orjson.dumps({"object": "list", "data": data})


def endless_event(endpoint: Endpoint, model: str, index: int) -> bytes:
    """Event number ``index`` of a never-ending stream that is valid for ``endpoint``."""
    chunk = _ENDLESS_CHUNKS.get(endpoint.name, _chat_chunk)(model, index)
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _chat_chunk(model: str, index: int) -> object:
    # OpenAI announces the role in the first delta only.
    delta = {"role": "assistant", "content": ""} if index == 0 else {"content": "x "}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    return {
        "id": "chatcmpl-emulator-endless",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [choice],
    }


def _completion_chunk(model: str, index: int) -> object:
    choice = {"index": 0, "text": "x ", "logprobs": None, "finish_reason": None}
    return {
        "id": "cmpl-emulator-endless",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": [choice],
    }


def _inference_chunk(model: str, index: int) -> object:
    return {"text": "x "}  # Maritaca's legacy stream: bare text events.


_ENDLESS_CHUNKS: Final[MappingProxyType[str, Callable[[str, int], object]]] = MappingProxyType(
    {"completions": _completion_chunk, "chat-inference": _inference_chunk}
)
