"""The Vertex AI dialects: Gemini's and Anthropic's, reused with Vertex's paths, no key of their
own, Claude's body without ``model`` and with ``anthropic_version``, and Google's ``Schema``
rewritten where a request carries one. Their fixtures' goldens are replayed by
test_normalize_fixtures.py; the embeddings by test_embeddings*.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.request import parse_request
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request
from proxy.normalize.dialects.vertex import ANTHROPIC_VERSION

GEMINI, ANTHROPIC = DIALECTS["gemini"], DIALECTS["anthropic"]
VERTEX_GOOGLE, VERTEX_ANTHROPIC = DIALECTS["vertex_google"], DIALECTS["vertex_anthropic"]
HI = [{"role": "user", "content": "Hi"}]
# A tool whose parameters use $defs, as pydantic writes them.
TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"when": {"$ref": "#/$defs/When"}},
            "required": ["when"],
            "$defs": {"When": {"type": "string", "format": "date"}},
        },
    },
}
SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": TOOL["function"]["parameters"]},  # type: ignore[index]
}
BODIES: list[dict[str, Any]] = [
    {},
    {"stream": True, "max_tokens": 50, "temperature": 0.2, "stop": ["END"]},
    {"tools": [TOOL], "tool_choice": "required"},
    {"response_format": SCHEMA_FORMAT},
    {"messages": [{"role": "system", "content": "Be brief."}, *HI], "reasoning_effort": "low"},
]


def build(dialect: str, body: dict[str, Any], model: str = "up@1") -> dict[str, Any]:
    request = parse_request(orjson.dumps({"model": "client", "messages": HI, **body}), "chat")
    built: dict[str, Any] = orjson.loads(
        upstream_request(DIALECTS[dialect], request, RequestOptions(model))
    )
    return built


# =========================================================================== Gemini on Vertex


@pytest.mark.parametrize("body", BODIES)
def test_gemini_on_vertex_sends_the_gemini_apis_body(body: dict[str, Any]) -> None:
    # JSON Schema goes as it is (parametersJsonSchema, responseJsonSchema): Vertex's v1 takes it.
    assert build("vertex_google", body) == build("gemini", body)


def test_the_json_schema_fields_are_not_rewritten() -> None:
    out = build("vertex_google", {"tools": [TOOL], "response_format": SCHEMA_FORMAT})
    parameters = TOOL["function"]["parameters"]  # type: ignore[index]
    assert out["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == parameters
    assert out["generationConfig"]["responseJsonSchema"] == parameters


def test_a_clients_own_response_schema_is_made_one_vertex_takes() -> None:
    own = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"$ref": "#/definitions/Tag"}}},
        "additionalProperties": False,
        "definitions": {"Tag": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    }
    body = {"generationConfig": {"responseMimeType": "application/json", "responseSchema": own}}
    config = build("vertex_google", body)["generationConfig"]
    assert config == {
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "object",
            "properties": {
                "tags": {
                    "type": "array",
                    "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                }
            },
            "additionalProperties": False,
        },
    }
    # The Gemini API's dialect sends the client's own fields as they came.
    assert build("gemini", body)["generationConfig"]["responseSchema"] == own


def test_a_recursive_response_schema_is_refused() -> None:
    own = {"$ref": "#/$defs/N", "$defs": {"N": {"properties": {"n": {"$ref": "#/$defs/N"}}}}}
    with pytest.raises(InvalidRequest) as caught:
        build("vertex_google", {"generationConfig": {"responseSchema": own}})
    assert caught.value.param == "generationConfig.responseSchema"
    assert "refers to itself" in caught.value.message


def test_gemini_on_vertex_reuses_the_gemini_dialect() -> None:
    assert VERTEX_GOOGLE.adapter is GEMINI.adapter
    assert VERTEX_GOOGLE.adapt_response is GEMINI.adapt_response
    assert VERTEX_GOOGLE.json_array_stream and VERTEX_GOOGLE.native
    assert VERTEX_GOOGLE.paths == {
        "chat": "/publishers/google/models/{model}:generateContent",
        "embeddings": "/publishers/google/models/{model}:predict",
    }
    assert VERTEX_GOOGLE.stream_paths == {
        "chat": "/publishers/google/models/{model}:streamGenerateContent?alt=sse"
    }


# =========================================================================== Claude on Vertex


@pytest.mark.parametrize("body", BODIES)
def test_claude_on_vertex_sends_the_messages_body_without_model(body: dict[str, Any]) -> None:
    vertex = build("vertex_anthropic", body, "claude-sonnet-4@20250514")
    anthropic = build("anthropic", body, "claude-sonnet-4@20250514")
    assert anthropic.pop("model") == "claude-sonnet-4@20250514"
    assert next(iter(vertex)) == "anthropic_version"
    assert vertex == {"anthropic_version": ANTHROPIC_VERSION, **anthropic}


def test_a_claude_stream_is_asked_for_in_the_body() -> None:
    # streamRawPredict takes the Messages body as it is, "stream": true included.
    assert build("vertex_anthropic", {"stream": True})["stream"] is True
    assert "stream" not in build("vertex_anthropic", {})


def test_a_clients_own_anthropic_version_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        build("vertex_anthropic", {"anthropic_version": "vertex-2099-01-01"})
    assert caught.value.param == "anthropic_version"


def test_claude_on_vertex_reuses_the_anthropic_dialect() -> None:
    assert VERTEX_ANTHROPIC.adapter is ANTHROPIC.adapter
    assert VERTEX_ANTHROPIC.adapt_response is ANTHROPIC.adapt_response
    assert VERTEX_ANTHROPIC.native and not VERTEX_ANTHROPIC.json_array_stream
    assert VERTEX_ANTHROPIC.paths == {"chat": "/publishers/anthropic/models/{model}:rawPredict"}
    assert VERTEX_ANTHROPIC.stream_paths == {
        "chat": "/publishers/anthropic/models/{model}:streamRawPredict"
    }
    assert VERTEX_ANTHROPIC.embed_request is None  # no embeddings: a 400 unsupported_endpoint


# =========================================================================== both


@pytest.mark.parametrize("dialect", [VERTEX_GOOGLE, VERTEX_ANTHROPIC])
def test_no_key_and_no_version_header(dialect: Any) -> None:
    # The bearer token is the upstream client's to add; Claude's version is in the body.
    assert dialect.auth("anything") == {}
    assert dict(dialect.headers) == {}
