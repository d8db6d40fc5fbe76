"""``parse_request`` for ``POST /v1/embeddings``: every field of CreateEmbeddingRequest, every
refusal, and the inputs a request is answered for."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, to_openai_error
from proxy.core.request import (
    EMBEDDING_INPUTS_MAX,
    ClientRequest,
    embedding_inputs,
    parse_request,
    upstream_body,
)


def parse(fields: dict[str, Any]) -> ClientRequest:
    return parse_request(orjson.dumps({"model": "m", **fields}), "embeddings")


@pytest.mark.parametrize(
    "value",
    [
        "Hi",
        ["Hi", "there"],
        [1, 2, 3],
        [0],
        [[1, 2], [3]],
        ["x"] * EMBEDDING_INPUTS_MAX,
        [[7]] * EMBEDDING_INPUTS_MAX,
    ],
)
def test_input_is_the_prompt(value: object) -> None:
    request = parse({"input": value})
    assert (request.endpoint, request.prompt, request.model) == ("embeddings", value, "m")
    assert (request.stream, request.include_usage, request.n, request.choices) == (
        False,
        False,
        1,
        0,
    )
    assert request.max_tokens is None


@pytest.mark.parametrize(
    ("fields", "encoding"),
    [
        ({}, "float"),
        ({"encoding_format": None}, "float"),
        ({"encoding_format": "float"}, "float"),
        ({"encoding_format": "base64"}, "base64"),
    ],
)
def test_encoding_is_what_the_client_asked(fields: dict[str, Any], encoding: str) -> None:
    assert parse({"input": "Hi", **fields}).encoding == encoding


@pytest.mark.parametrize(
    "fields",
    [
        {"dimensions": 1},
        {"dimensions": 3072},
        {"dimensions": None},
        {"user": "u-1"},
        {"user": None},
        # Not OpenAI's: a native API's own, passed on; and a stream flag, which means nothing.
        {"input_type": "search_query"},
        {"stream": True, "stream_options": {"include_usage": True}},
    ],
)
def test_accepted(fields: dict[str, Any]) -> None:
    request = parse({"input": "Hi", **fields})
    assert request.body == {"model": "m", "input": "Hi", **fields}
    assert (request.stream, request.include_usage) == (False, False)


TOO_MANY = f"Invalid value for 'input': at most {EMBEDDING_INPUTS_MAX} inputs in one request"
REFUSED = [
    ({}, "input", "missing_required_parameter", "Missing required parameter: 'input'"),
    ({"input": None}, "input", "missing_required_parameter", "Missing required parameter: 'input'"),
    ({"input": ""}, "input", "invalid_value", "Invalid value for 'input': it may not be empty"),
    ({"input": []}, "input", "invalid_value", "Invalid value for 'input': it may not be empty"),
    (
        {"input": ["a", ""]},
        "input[1]",
        "invalid_value",
        "Invalid value for 'input[1]': it may not be empty",
    ),
    ({"input": ["a"] * (EMBEDDING_INPUTS_MAX + 1)}, "input", "invalid_value", TOO_MANY),
    ({"input": [[1]] * (EMBEDDING_INPUTS_MAX + 1)}, "input", "invalid_value", TOO_MANY),
    ({"input": [1] * (EMBEDDING_INPUTS_MAX + 1)}, "input", "invalid_value", TOO_MANY),
]
EXPECTED = "a string, an array of strings, of token ids or of arrays of token ids"
WRONG_TYPE = [
    ({"input": 5}, "input", EXPECTED),
    ({"input": {"text": "Hi"}}, "input", EXPECTED),
    ({"input": [True]}, "input", EXPECTED),
    ({"input": [1, -1]}, "input", EXPECTED),
    ({"input": [1, 2.0]}, "input", EXPECTED),
    ({"input": [1, "a"]}, "input", EXPECTED),
    ({"input": [{"text": "Hi"}]}, "input", EXPECTED),
    ({"input": ["a", 1]}, "input[1]", "a string, as the first one is"),
    ({"input": ["a", ["b"]]}, "input[1]", "a string, as the first one is"),
    ({"input": [[1], []]}, "input[1]", "a non-empty array of token ids"),
    ({"input": [[1], [True]]}, "input[1]", "a non-empty array of token ids"),
    ({"input": [[1], "a"]}, "input[1]", "a non-empty array of token ids"),
    ({"input": [[1], [-2]]}, "input[1]", "a non-empty array of token ids"),
    ({"input": [["a"]]}, "input[0]", "a non-empty array of token ids"),
    ({"input": "Hi", "encoding_format": 1}, "encoding_format", "a string"),
    ({"input": "Hi", "dimensions": "256"}, "dimensions", "an integer"),
    ({"input": "Hi", "dimensions": 1.5}, "dimensions", "an integer"),
    ({"input": "Hi", "dimensions": True}, "dimensions", "an integer"),
    ({"input": "Hi", "user": 7}, "user", "a string"),
    ({"model": 3, "input": "Hi"}, "model", "a non-empty string"),
]
for _fields, _param, _expected in WRONG_TYPE:
    REFUSED.append(
        (_fields, _param, "invalid_type", f"Invalid type for '{_param}': expected {_expected}")
    )
REFUSED += [
    (
        {"input": "Hi", "encoding_format": "int8"},
        "encoding_format",
        "invalid_value",
        "Invalid value for 'encoding_format': must be 'float' or 'base64'",
    ),
    (
        {"input": "Hi", "dimensions": 0},
        "dimensions",
        "invalid_value",
        "Invalid value for 'dimensions': must be at least 1",
    ),
]


@pytest.mark.parametrize(("fields", "param", "code", "message"), REFUSED)
def test_refused(fields: dict[str, Any], param: str, code: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(fields)
    status, body = to_openai_error(caught.value)
    assert status == 400
    assert body == {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


def test_model_is_required() -> None:
    with pytest.raises(InvalidRequest, match="'model'"):
        parse_request(b'{"input": "Hi"}', "embeddings")


@pytest.mark.parametrize(
    ("value", "inputs"),
    [
        ("Hi", ["Hi"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
        (None, []),
        ([], []),
        (5, []),
    ],
)
def test_embedding_inputs(value: object, inputs: list[object]) -> None:
    assert embedding_inputs(value) == inputs


def test_an_openai_upstream_gets_the_clients_body_with_its_model() -> None:
    request = parse({"input": ["a"], "encoding_format": "base64", "dimensions": 8, "x": 1})
    assert orjson.loads(upstream_body(request, "up", ask_usage=True)) == {
        "model": "up",
        "input": ["a"],
        "encoding_format": "base64",
        "dimensions": 8,
        "x": 1,
    }
