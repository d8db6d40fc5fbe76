"""The provider endpoints the emulator answers, and which recording a request asks for.

Providers mount the same API under different prefixes (``/v1``, ``/openai/v1``,
``/serverless/v1``, ``/api``), so an endpoint is recognised by how its path ends. The table is
searched in order because ``/completions`` is also how ``/chat/completions`` ends, and
``/generate`` how ``/api/generate`` ends.

Most requests name their model in the body. Gemini names it in the path
(``/v1beta/models/{model}:generateContent``) and TGI's body names none, so for those the model
is the path segment the suffix follows: ``/tgi/tgi.generate-stream.sse/generate_stream``.
Bedrock (``/model/{modelId}/converse``) and Vertex AI
(``/v1/projects/{p}/locations/{r}/publishers/{publisher}/models/{model}:rawPredict``) name it
in the path too; Bedrock's model id arrives percent-escaped (``v1%3A0``, an ARN's ``%2F``), so
the segment is taken from the path as sent and then decoded. A recording's name cannot hold
``:`` or ``/``: in it, each becomes ``_`` (``us.anthropic.claude-sonnet-4-20250514-v1_0``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import unquote

import orjson

StreamRule = Literal["body", "unless-false", "always", "never"]
"""When a request streams: when its body's ``stream`` is true; unless it is false (Ollama
streams by default); always (the path says so); never."""


@dataclass(frozen=True)
class Endpoint:
    method: str
    suffix: str
    name: str
    """The ``<endpoint>`` part of the recordings' names."""
    dialect: str = "openai"
    """Whose error bodies and endless streams it answers with."""
    model_in_path: bool = False
    streams: StreamRule = "body"
    stream_ending: str = ".stream.sse"
    """How a stream recording's name goes on after ``<model>.<endpoint>``."""
    alt_sse_ending: str | None = None
    """The ending instead when the query has ``alt=sse``: Google's system parameter ``alt``
    picks the stream's form, SSE or (``alt=json``, the default) one JSON array."""


ENDPOINTS: Final = (
    Endpoint("POST", "/chat/completions", "chat"),
    Endpoint("POST", "/completions", "completions"),
    # Embeddings never stream: a recording is <model>.<endpoint>.json.
    Endpoint("POST", "/embeddings", "embeddings", streams="never"),
    # OpenAI's Responses API, as OpenAI and Azure (/openai/v1) serve it. Only POST: the stored
    # responses that GET and DELETE .../responses/{id} reach are state the emulator keeps none of.
    Endpoint("POST", "/responses", "responses"),
    # Maritaca's legacy API is mounted at /api, so its path is /api/chat/inference.
    Endpoint("POST", "/chat/inference", "chat-inference", dialect="maritaca"),
    Endpoint("POST", "/v1/messages", "messages", dialect="anthropic"),
    Endpoint(
        "POST", "/v1/messages/count_tokens", "count-tokens", dialect="anthropic", streams="never"
    ),
    Endpoint(
        "POST",
        ":generateContent",
        "generate-content",
        dialect="gemini",
        model_in_path=True,
        streams="never",
    ),
    Endpoint(
        "POST",
        ":streamGenerateContent",
        "generate-content",
        dialect="gemini",
        model_in_path=True,
        streams="always",
        stream_ending=".stream.json-array.json",
        alt_sse_ending=".stream.sse",
    ),
    Endpoint(
        "POST",
        ":batchEmbedContents",
        "batch-embed-contents",
        dialect="gemini",
        model_in_path=True,
        streams="never",
    ),
    # Bedrock's runtime: /model/{modelId}/converse, /converse-stream (AWS event-stream frames,
    # recorded as JSON lines) and /invoke (InvokeModel: embedding models, and Claude's Messages
    # body for the Anthropic face).
    Endpoint(
        "POST", "/converse", "converse", dialect="bedrock", model_in_path=True, streams="never"
    ),
    Endpoint(
        "POST",
        "/converse-stream",
        "converse-stream",
        dialect="bedrock",
        model_in_path=True,
        streams="always",
        stream_ending=".eventstream.jsonl",
    ),
    Endpoint("POST", "/invoke", "invoke", dialect="bedrock", model_in_path=True, streams="never"),
    # InvokeModelWithResponseStream: each frame a "chunk" whose "bytes" are one of the model's
    # own events, base64-encoded (Claude's Messages events, for the Anthropic face).
    Endpoint(
        "POST",
        "/invoke-with-response-stream",
        "invoke-with-response-stream",
        dialect="bedrock",
        model_in_path=True,
        streams="always",
        stream_ending=".eventstream.jsonl",
    ),
    # Vertex AI: Gemini's :generateContent paths above serve its Google models; its embeddings
    # are :predict, and Claude's Messages API is :rawPredict and :streamRawPredict, answered
    # with the Anthropic recordings (<model>.messages.json, .messages.stream.sse).
    Endpoint("POST", ":predict", "predict", dialect="gemini", model_in_path=True, streams="never"),
    Endpoint(
        "POST",
        ":rawPredict",
        "messages",
        dialect="vertex-anthropic",
        model_in_path=True,
        streams="never",
    ),
    Endpoint(
        "POST",
        ":streamRawPredict",
        "messages",
        dialect="vertex-anthropic",
        model_in_path=True,
        streams="always",
    ),
    # Cohere's v2 chat shares OpenAI's endpoint name: the model name keeps their recordings
    # apart (cohere.chat.json).
    Endpoint("POST", "/v2/chat", "chat", dialect="cohere"),
    Endpoint("POST", "/v2/embed", "embed", dialect="cohere", streams="never"),
    Endpoint("POST", "/api/embed", "api-embed", dialect="ollama", streams="never"),
    Endpoint(
        "POST",
        "/api/chat",
        "api-chat",
        dialect="ollama",
        streams="unless-false",
        stream_ending=".stream.ndjson",
    ),
    Endpoint(
        "POST",
        "/api/generate",
        "api-generate",
        dialect="ollama",
        streams="unless-false",
        stream_ending=".stream.ndjson",
    ),
    # The name says it streams, so its recording is <model>.generate-stream.sse.
    Endpoint(
        "POST",
        "/generate_stream",
        "generate-stream",
        dialect="tgi",
        model_in_path=True,
        streams="always",
        stream_ending=".sse",
    ),
    Endpoint("POST", "/generate", "generate", dialect="tgi", model_in_path=True, streams="never"),
    Endpoint("GET", "/models", "models"),
)


def match_endpoint(path: str) -> Endpoint | None:
    """The endpoint that ``path`` ends with, whatever its prefix."""
    path = path.rstrip("/")
    for endpoint in ENDPOINTS:
        if path.endswith(endpoint.suffix):
            return endpoint
    return None


def path_model(endpoint: Endpoint, path: str, raw_path: str | None = None) -> str:
    """The path segment before ``endpoint``'s suffix, decoded: the model, when the path names
    it. ``raw_path`` is the path as sent, whose ``%2F`` is still inside its segment."""
    for candidate in (raw_path, path):
        if candidate is not None and candidate.rstrip("/").endswith(endpoint.suffix):
            trimmed = candidate.rstrip("/")
            segment = trimmed[: len(trimmed) - len(endpoint.suffix)].rpartition("/")[2]
            return unquote(segment) if candidate is raw_path else segment
    return ""


def wants_stream(endpoint: Endpoint, payload: Mapping[str, object]) -> bool:
    """Whether a request to ``endpoint`` with body ``payload`` asks for a stream.

    Only true streams: a truthy non-boolean ``stream`` is not a stream request.
    """
    if endpoint.streams == "body":
        return payload.get("stream") is True
    if endpoint.streams == "unless-false":
        return payload.get("stream") is not False
    return endpoint.streams == "always"


def stream_ending(endpoint: Endpoint, query: Mapping[str, str]) -> str:
    """How the name of the recording that streams ``endpoint`` ends, for this query."""
    if endpoint.alt_sse_ending is not None and query.get("alt") == "sse":
        return endpoint.alt_sse_ending
    return endpoint.stream_ending


def recording_names(
    model: str, endpoint: Endpoint, *, stream: bool, ending: str = ".stream.sse"
) -> tuple[str, ...]:
    """The recordings that would answer ``model``, best first.

    A model that names a file gets that file whatever it asked for, so a test can pick a
    variant (``groq.chat.stream.tool-call.sse``); otherwise ``<model>.<endpoint><ending>``
    (``stream_ending``) answers a streaming request and ``<model>.<endpoint>.json`` any other.
    A model with no stream recording answers a stream request with its JSON body, as servers
    that ignore ``stream`` do (Maritaca's OpenAI-compatible stream was never recorded). ``:``
    and ``/`` in ``model`` are ``_`` in the names.
    """
    model = model.replace(":", "_").replace("/", "_")
    whole = f"{model}.{endpoint.name}.json"
    if stream:
        return (model, f"{model}.{endpoint.name}{ending}", whole)
    return (model, whole)


def model_list(recordings: list[str]) -> bytes:
    """An OpenAI ``GET /models`` body naming every model a request can ask for."""
    ids = sorted({name.split(".", 1)[0] for name in recordings} | set(recordings))
    data = [{"id": id_, "object": "model", "created": 0, "owned_by": "emulator"} for id_ in ids]
    return orjson.dumps({"object": "list", "data": data})
