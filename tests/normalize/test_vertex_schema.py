"""JSON Schema made acceptable to Vertex's ``Schema`` type (vertex_schema.py): what is rewritten
($schema, $ref, $defs), what is left as it is, and what is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest, to_openai_error
from proxy.normalize.dialects.vertex_schema import MAX_DEPTH, MAX_NODES, vertex_schema

WHERE = "generationConfig.responseSchema"
STRING = {"type": "string"}

REWRITTEN: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "nothing to do",
        {"type": "object", "properties": {"a": STRING}},
        {"type": "object", "properties": {"a": STRING}},
    ),
    (
        "$schema dropped",
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"},
        STRING,
    ),
    (
        "$ref into $defs inlined, $defs gone",
        {
            "type": "object",
            "properties": {"city": {"$ref": "#/$defs/City"}},
            "$defs": {"City": {"type": "string", "enum": ["Paris", "Rome"]}},
        },
        {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}},
    ),
    (
        "draft 7 definitions too",
        {
            "items": {"$ref": "#/definitions/N"},
            "type": "array",
            "definitions": {"N": {"type": "integer"}},
        },
        {"items": {"type": "integer"}, "type": "array"},
    ),
    (
        "a definition referring to another",
        {
            "$ref": "#/$defs/A",
            "$defs": {"A": {"type": "array", "items": {"$ref": "#/$defs/B"}}, "B": STRING},
        },
        {"type": "array", "items": STRING},
    ),
    (
        "one definition used twice is copied twice",
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/S"}, "b": {"$ref": "#/$defs/S"}},
            "$defs": {"S": STRING},
        },
        {"type": "object", "properties": {"a": STRING, "b": STRING}},
    ),
    (
        "keywords beside a $ref apply too",
        {
            "properties": {"a": {"$ref": "#/$defs/S", "description": "A name"}},
            "$defs": {"S": STRING},
        },
        {"properties": {"a": {"type": "string", "description": "A name"}}},
    ),
    (
        "refs in anyOf, additionalProperties and items lists",
        {
            "anyOf": [{"$ref": "#/$defs/S"}, {"type": "null"}],
            "additionalProperties": {"$ref": "#/$defs/S"},
            "prefixItems": [{"$ref": "#/$defs/S"}],
            "$defs": {"S": STRING},
        },
        {
            "anyOf": [STRING, {"type": "null"}],
            "additionalProperties": STRING,
            "prefixItems": [STRING],
        },
    ),
    (
        "a pointer with escapes (RFC 6901)",
        {"items": {"$ref": "#/$defs/a~1b~0c"}, "$defs": {"a/b~c": STRING}},
        {"items": STRING},
    ),
    (
        "anyOf and additionalProperties are kept: Vertex takes them",
        {"anyOf": [STRING, {"type": "integer"}], "additionalProperties": False, "nullable": True},
        {"anyOf": [STRING, {"type": "integer"}], "additionalProperties": False, "nullable": True},
    ),
    (
        "a property named like a keyword is a name, not a keyword",
        {"type": "object", "properties": {"$schema": STRING, "definitions": STRING}},
        {"type": "object", "properties": {"$schema": STRING, "definitions": STRING}},
    ),
    (
        "data is data: a $ref inside default or enum is left alone",
        {"type": "object", "default": {"$ref": "#/x"}, "enum": [{"$schema": 1}]},
        {"type": "object", "default": {"$ref": "#/x"}, "enum": [{"$schema": 1}]},
    ),
]


@pytest.mark.parametrize(
    ("schema", "expected"), [case[1:] for case in REWRITTEN], ids=[case[0] for case in REWRITTEN]
)
def test_rewritten(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(schema)
    assert vertex_schema(schema, WHERE) == expected
    assert schema == before  # the client's body is not changed in place


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = STRING
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def _doubling(levels: int) -> dict[str, Any]:
    """Each definition uses the next one twice: 2**levels nodes once inlined."""
    defs: dict[str, Any] = {
        f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}] * 2} for i in range(levels)
    }
    defs[f"D{levels}"] = STRING
    return {"$ref": "#/$defs/D0", "$defs": defs}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "a definition referring to itself",
        {
            "$ref": "#/$defs/Node",
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        },
        "its $ref '#/$defs/Node' refers to itself",
    ),
    (
        "two definitions referring to each other",
        {
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"items": {"$ref": "#/$defs/B"}}, "B": {"items": {"$ref": "#/$defs/A"}}},
        },
        "refers to itself",
    ),
    (
        "the root referred to",
        {"properties": {"self": {"$ref": "#"}}},
        "its $ref '#' refers to itself",
    ),
    ("a $ref to nothing", {"items": {"$ref": "#/$defs/Missing"}}, "points to nothing"),
    (
        "a $ref outside the schema",
        {"items": {"$ref": "https://example.com/s.json"}},
        "is not within the schema",
    ),
    ("nested too deep", _nested(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    ("inlined too large", _doubling(16), f"over {MAX_NODES} subschemas"),
]


@pytest.mark.parametrize(
    ("schema", "message"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_refused(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        vertex_schema(schema, "tools[2].function.parameters")
    status, body = to_openai_error(caught.value)
    assert status == 400
    assert body["error"]["param"] == "tools[2].function.parameters"
    assert body["error"]["message"].startswith("Invalid value for 'tools[2].function.parameters': ")
    assert message in body["error"]["message"]


def test_the_bounds_leave_room() -> None:
    assert vertex_schema(_nested(MAX_DEPTH), WHERE) == _nested(MAX_DEPTH)
    assert "$defs" not in vertex_schema(_doubling(10), WHERE)  # 2**10 nodes
