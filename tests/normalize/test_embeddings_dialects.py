"""The native embeddings requests (Gemini's batchEmbedContents, Cohere's v2 embed, Ollama's
/api/embed) built from OpenAI's, field by field, with their refusals; where each goes; and what
the dialects without an embeddings API say."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, to_openai_error
from proxy.core.request import parse_request
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request

INPUTS = ["hello", "goodbye"]


def build(dialect: str, fields: dict[str, Any], model: str = "up") -> dict[str, Any]:
    request = parse_request(orjson.dumps({"model": "client", **fields}), "embeddings")
    body: dict[str, Any] = orjson.loads(
        upstream_request(DIALECTS[dialect], request, RequestOptions(model))
    )
    return body


def gemini_entry(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "models/up", "content": {"parts": [{"text": text}]}, **extra}


GEMINI = [
    ({"input": "Hi"}, {"requests": [gemini_entry("Hi")]}),
    ({"input": INPUTS}, {"requests": [gemini_entry("hello"), gemini_entry("goodbye")]}),
    (
        {"input": INPUTS, "dimensions": 256},
        {
            "requests": [
                gemini_entry("hello", outputDimensionality=256),
                gemini_entry("goodbye", outputDimensionality=256),
            ]
        },
    ),
    # The encoding is the proxy's to honour; user says nothing about the vectors.
    ({"input": "Hi", "encoding_format": "base64", "user": "u"}, {"requests": [gemini_entry("Hi")]}),
    # Gemini's own fields go into every request.
    (
        {"input": INPUTS, "taskType": "RETRIEVAL_DOCUMENT", "title": "Doc"},
        {
            "requests": [
                gemini_entry("hello", taskType="RETRIEVAL_DOCUMENT", title="Doc"),
                gemini_entry("goodbye", taskType="RETRIEVAL_DOCUMENT", title="Doc"),
            ]
        },
    ),
]
VERTEX = [
    ({"input": "Hi"}, {"instances": [{"content": "Hi"}]}),
    ({"input": INPUTS}, {"instances": [{"content": "hello"}, {"content": "goodbye"}]}),
    (
        {"input": INPUTS, "dimensions": 256},
        {
            "instances": [{"content": "hello"}, {"content": "goodbye"}],
            "parameters": {"outputDimensionality": 256},
        },
    ),
    ({"input": "Hi", "encoding_format": "base64", "user": "u"}, {"instances": [{"content": "Hi"}]}),
    # Vertex's own fields: task_type and title in every instance, the others in parameters.
    (
        {"input": INPUTS, "task_type": "RETRIEVAL_DOCUMENT", "title": "Doc", "autoTruncate": False},
        {
            "instances": [
                {"content": "hello", "task_type": "RETRIEVAL_DOCUMENT", "title": "Doc"},
                {"content": "goodbye", "task_type": "RETRIEVAL_DOCUMENT", "title": "Doc"},
            ],
            "parameters": {"autoTruncate": False},
        },
    ),
]
COHERE_BASE = {"model": "up", "input_type": "search_document", "embedding_types": ["float"]}
COHERE = [
    ({"input": "Hi"}, {**COHERE_BASE, "texts": ["Hi"]}),
    ({"input": INPUTS}, {**COHERE_BASE, "texts": INPUTS}),
    (
        {"input": INPUTS, "dimensions": 512},
        {**COHERE_BASE, "texts": INPUTS, "output_dimension": 512},
    ),
    ({"input": "Hi", "encoding_format": "base64", "user": "u"}, {**COHERE_BASE, "texts": ["Hi"]}),
    # The client picks Cohere's input_type, and sends its other fields as they are.
    (
        {"input": "Hi", "input_type": "search_query"},
        {**COHERE_BASE, "texts": ["Hi"], "input_type": "search_query"},
    ),
    (
        {"input": "Hi", "truncate": "NONE", "max_tokens": 64},
        {**COHERE_BASE, "texts": ["Hi"], "truncate": "NONE", "max_tokens": 64},
    ),
]
OLLAMA = [
    ({"input": "Hi"}, {"model": "up", "input": ["Hi"]}),
    ({"input": INPUTS}, {"model": "up", "input": INPUTS}),
    ({"input": INPUTS, "dimensions": 768}, {"model": "up", "input": INPUTS, "dimensions": 768}),
    ({"input": "Hi", "encoding_format": "base64", "user": "u"}, {"model": "up", "input": ["Hi"]}),
    (
        {"input": "Hi", "truncate": False, "keep_alive": "5m", "options": {"num_ctx": 512}},
        {
            "model": "up",
            "input": ["Hi"],
            "truncate": False,
            "keep_alive": "5m",
            "options": {"num_ctx": 512},
        },
    ),
]
TABLE = (
    [("gemini", *row) for row in GEMINI]
    + [("vertex_google", *row) for row in VERTEX]
    + [("cohere", *row) for row in COHERE]
    + [("ollama", *row) for row in OLLAMA]
)


@pytest.mark.parametrize(("dialect", "fields", "native"), TABLE)
def test_translated(dialect: str, fields: dict[str, Any], native: dict[str, Any]) -> None:
    assert build(dialect, fields) == native


API = {
    "gemini": "Gemini's batchEmbedContents",
    "vertex_google": "Vertex AI's predict",
    "cohere": "Cohere's Embed API",
    "ollama": "Ollama's /api/embed",
}


@pytest.mark.parametrize("dialect", sorted(API))
@pytest.mark.parametrize("value", [[1, 2, 3], [[1, 2], [3]]])
def test_token_ids_are_refused(dialect: str, value: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build(dialect, {"input": value})
    status, body = to_openai_error(caught.value)
    assert status == 400
    assert body["error"] == {
        "message": f"'input' is not supported by {API[dialect]}: it embeds text, not token ids",
        "type": "invalid_request_error",
        "param": "input",
        "code": "unsupported_parameter",
    }


@pytest.mark.parametrize(
    ("dialect", "fields", "param"),
    [
        ("gemini", {"content": {"parts": []}}, "content"),
        ("gemini", {"outputDimensionality": 8, "dimensions": 8}, "outputDimensionality"),
        ("vertex_google", {"outputDimensionality": 8, "dimensions": 8}, "outputDimensionality"),
        ("cohere", {"texts": ["x"]}, "texts"),
        ("cohere", {"embedding_types": ["int8"]}, "embedding_types"),
        ("cohere", {"output_dimension": 256, "dimensions": 256}, "output_dimension"),
    ],
)
def test_a_native_field_may_not_set_what_the_translation_sets(
    dialect: str, fields: dict[str, Any], param: str
) -> None:
    # Ollama's fields that the translation sets (model, input, dimensions) are OpenAI's too.
    with pytest.raises(InvalidRequest) as caught:
        build(dialect, {"input": "Hi", **fields})
    assert caught.value.param == param
    assert "the proxy sets it from the request's OpenAI fields" in str(caught.value)


@pytest.mark.parametrize(
    ("dialect", "path"),
    [
        ("openai", "/embeddings"),
        ("gemini", "/v1beta/models/{model}:batchEmbedContents"),
        ("vertex_google", "/publishers/google/models/{model}:predict"),
        ("cohere", "/v2/embed"),
        ("ollama", "/api/embed"),
    ],
)
def test_where_embeddings_go(dialect: str, path: str) -> None:
    assert DIALECTS[dialect].paths["embeddings"] == path


@pytest.mark.parametrize("dialect", ["anthropic", "tgi", "vertex_anthropic"])
def test_no_embeddings_api(dialect: str) -> None:
    # The proxy answers 400 unsupported_endpoint for a model whose dialect has no path.
    assert "embeddings" not in DIALECTS[dialect].paths
    assert DIALECTS[dialect].embed_request is None


def test_an_openai_dialect_sends_the_clients_body() -> None:
    fields = {"input": ["a"], "encoding_format": "base64", "dimensions": 8, "user": "u", "x": 1}
    assert build("openai", fields) == {"model": "up", **fields}
