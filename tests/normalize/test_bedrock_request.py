"""``api: bedrock``: the OpenAI request as a Converse request, field by field, and the refusals
(the recorded answers are replayed against their goldens by test_normalize_fixtures.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.request import parse_request
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request

MODEL = "us.anthropic.claude-sonnet-4-20250514-v1:0"
USER = {"role": "user", "content": "Hi"}
BASE: dict[str, Any] = {"model": "client-model", "messages": [USER]}
TURN = [{"role": "user", "content": [{"text": "Hi"}]}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {"type": "function", "function": {"name": "time"}}
SPEC_WEATHER = {
    "toolSpec": {
        "name": "weather",
        "description": "The weather in a city",
        "inputSchema": {"json": WEATHER["function"]["parameters"]},  # type: ignore[index]
    }
}
SPEC_TIME = {
    "toolSpec": {"name": "time", "inputSchema": {"json": {"type": "object", "properties": {}}}}
}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
PNG = "iVBORw0KGgo="
CALL = {"id": "tooluse_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
CACHE = {"cachePoint": {"type": "default"}}


def build(fields: dict[str, Any], endpoint: str = "chat", **options: Any) -> dict[str, Any]:
    request = parse_request(orjson.dumps({**BASE, **fields}), endpoint)
    build = upstream_request(DIALECTS["bedrock"], request, RequestOptions(MODEL, **options))
    result: dict[str, Any] = orjson.loads(build)
    return result


TRANSLATED = [
    ({}, {}),
    ({"stream": True}, {}),  # the stream is its own path
    ({"max_tokens": 100}, {"inferenceConfig": {"maxTokens": 100}}),
    ({"max_completion_tokens": 50, "max_tokens": 100}, {"inferenceConfig": {"maxTokens": 50}}),
    ({"temperature": 0.2, "top_p": 0.9}, {"inferenceConfig": {"temperature": 0.2, "topP": 0.9}}),
    ({"stop": "END"}, {"inferenceConfig": {"stopSequences": ["END"]}}),
    ({"top_k": 5}, {"additionalModelRequestFields": {"top_k": 5}}),
    ({"n": 1, "presence_penalty": 0, "user": "u1", "store": False}, {}),  # no-ops, neutral
    ({"tools": [WEATHER, TIME]}, {"toolConfig": {"tools": [SPEC_WEATHER, SPEC_TIME]}}),
    (
        {"tools": [WEATHER], "tool_choice": "required"},
        {"toolConfig": {"tools": [SPEC_WEATHER], "toolChoice": {"any": {}}}},
    ),
    ({"tools": [WEATHER], "tool_choice": "none"}, {}),  # none offered, as APIs without "none"
    (
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "time"}},
        },
        {
            "toolConfig": {
                "tools": [SPEC_WEATHER, SPEC_TIME],
                "toolChoice": {"tool": {"name": "time"}},
            }
        },
    ),
    (
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "auto", "tools": [TIME]},
            },
        },
        {"toolConfig": {"tools": [SPEC_TIME]}},
    ),
    (
        {"tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}, TIME]},
        {"toolConfig": {"tools": [SPEC_WEATHER, CACHE, SPEC_TIME]}},
    ),
    (
        {"tools": [{"type": "function", "function": {"name": "time", "strict": True}}]},
        {"toolConfig": {"tools": [{"toolSpec": {**SPEC_TIME["toolSpec"], "strict": True}}]}},
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": SCHEMA},
            }
        },
        {
            "outputConfig": {
                "textFormat": {
                    "type": "json_schema",
                    "structure": {
                        "jsonSchema": {"schema": orjson.dumps(SCHEMA).decode(), "name": "p"}
                    },
                }
            }
        },
    ),
    ({"response_format": {"type": "text"}}, {}),
    # Converse's own fields pass on; its objects take the client's own keys beside ours.
    (
        {"guardrailConfig": {"guardrailIdentifier": "g", "guardrailVersion": "1"}},
        {"guardrailConfig": {"guardrailIdentifier": "g", "guardrailVersion": "1"}},
    ),
    (
        {"max_tokens": 9, "inferenceConfig": {"x": 1}, "additionalModelRequestFields": {"k": 2}},
        {"inferenceConfig": {"maxTokens": 9, "x": 1}, "additionalModelRequestFields": {"k": 2}},
    ),
]


@pytest.mark.parametrize(("fields", "expected"), TRANSLATED)
def test_request(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build(fields) == {"messages": TURN, **expected}


MESSAGES = [
    # system and developer messages, wherever they stand, are the system blocks, in order.
    (
        [{"role": "system", "content": "Be brief."}, USER, {"role": "developer", "content": "No."}],
        [{"text": "Be brief."}, {"text": "No."}],
        TURN,
    ),
    # Consecutive messages of one role merge; blank text is left out.
    (
        [
            USER,
            {"role": "user", "content": [{"type": "text", "text": "there"}]},
            {"role": "user", "content": "  "},
        ],
        None,
        [{"role": "user", "content": [{"text": "Hi"}, {"text": "there"}]}],
    ),
    # cache_control marks: after a part, and after a message given as a string.
    (
        [
            {"role": "system", "content": "Long.", "cache_control": {"type": "ephemeral"}},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Doc", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "Q"},
                ],
            },
        ],
        [{"text": "Long."}, CACHE],
        [{"role": "user", "content": [{"text": "Doc"}, CACHE, {"text": "Q"}]}],
    ),
    # An image as bytes with its format; a file as a document named after it.
    (
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {
                        "type": "file",
                        "file": {
                            "filename": "Q3 report (final).pdf",
                            "file_data": "data:application/pdf;base64,JVBERi0=",
                        },
                    },
                    {"type": "file", "file": {"filename": "notes.md", "file_data": "IyBIaQ=="}},
                ],
            }
        ],
        None,
        [
            {
                "role": "user",
                "content": [
                    {"image": {"format": "png", "source": {"bytes": PNG}}},
                    {
                        "document": {
                            "format": "pdf",
                            "name": "Q3 report (final)",
                            "source": {"bytes": "JVBERi0="},
                        }
                    },
                    {
                        "document": {
                            "format": "md",
                            "name": "notes",
                            "source": {"bytes": "IyBIaQ=="},
                        }
                    },
                ],
            }
        ],
    ),
    # A tool loop: the call as toolUse, its result as toolResult in the user's turn.
    (
        [
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {**CALL, "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "tooluse_1", "content": "Sunny"},
            {"role": "user", "content": "Thanks"},
        ],
        None,
        [
            {"role": "user", "content": [{"text": "Hi"}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": "tooluse_1",
                            "name": "weather",
                            "input": {"city": "Paris"},
                        }
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "Sunny"}]}},
                    {"text": "Thanks"},
                ],
            },
        ],
    ),
]


@pytest.mark.parametrize(("messages", "system", "turns"), MESSAGES)
def test_messages(
    messages: list[dict[str, Any]], system: list[Any] | None, turns: list[Any]
) -> None:
    tools = {"tools": [WEATHER]} if any(m.get("tool_calls") for m in messages) else {}
    body = build({"messages": messages, **tools})
    assert body.get("system") == system
    assert body["messages"] == turns


def test_reasoning_effort_is_a_thinking_budget_under_the_limit() -> None:
    budgets = {"low": 2048, "high": 8192}
    body = build({"reasoning_effort": "low"}, max_tokens=1000, thinking_budgets=budgets)
    # No limit given: the default answer's share, and the budget on top (as for Anthropic).
    assert body["inferenceConfig"] == {"maxTokens": 3048}
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 2048}
    }
    body = build(
        {"reasoning_effort": "high", "max_completion_tokens": 4000}, thinking_budgets=budgets
    )
    assert body["inferenceConfig"] == {"maxTokens": 4000}
    assert body["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 3999
    assert "additionalModelRequestFields" not in build({"reasoning_effort": "none"})


REFUSED = [
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"seed": 1}, "seed"),
    ({"parallel_tool_calls": False, "tools": [WEATHER]}, "parallel_tool_calls"),
    ({"response_format": {"type": "json_object"}}, "response_format.type"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
                    ],
                }
            ]
        },
        "messages[0].content[0].image_url.url",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}
                    ],
                }
            ]
        },
        "messages[0].content[0].image_url.url",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "file", "file": {"file_data": "data:application/zip;base64,AAAA"}}
                    ],
                }
            ]
        },
        "messages[0].content[0].file.file_data",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        "messages[0].content[0].type",
    ),
    ({"messages": [{"role": "system", "content": "Only system."}]}, "messages"),
    # Converse reads a history's tool calls against the tools offered.
    (
        {
            "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}],
            "tools": [WEATHER],
            "tool_choice": "none",
        },
        "tool_choice",
    ),
    ({"messages": [USER, {"role": "assistant", "tool_calls": [CALL]}]}, "tools"),
    (
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "weather", "arguments": "[1]"}}],
                },
            ],
            "tools": [WEATHER],
        },
        "messages[1].tool_calls[0].function.arguments",
    ),
    (
        {"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [WEATHER]},
        "tool_choice.function.name",
    ),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED, ids=[r[1] for r in REFUSED])
def test_refusal(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        build(fields)
    assert info.value.param == param, info.value.message


def test_completions_are_not_served() -> None:
    with pytest.raises(InvalidRequest, match="Only chat completions"):
        build({"prompt": "Hi", "messages": None}, endpoint="completions")


EMBEDDINGS = [
    ("amazon.titan-embed-text-v2:0", {"input": "Hi"}, {"inputText": "Hi", "normalize": True}),
    (
        "amazon.titan-embed-text-v2:0",
        {"input": ["Hi"], "dimensions": 256},
        {"inputText": "Hi", "dimensions": 256, "normalize": True},
    ),
    ("amazon.titan-embed-text-v1", {"input": "Hi"}, {"inputText": "Hi"}),
    (
        "cohere.embed-english-v3",
        {"input": ["a", "b"]},
        {"texts": ["a", "b"], "input_type": "search_document"},
    ),
    (
        "cohere.embed-multilingual-v3",
        {"input": "a", "input_type": "search_query"},
        {"texts": ["a"], "input_type": "search_query"},
    ),
]


@pytest.mark.parametrize(("model", "fields", "expected"), EMBEDDINGS)
def test_embeddings_request(model: str, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = parse_request(orjson.dumps({"model": "m", **fields}), "embeddings")
    body = upstream_request(DIALECTS["bedrock"], request, RequestOptions(model))
    assert orjson.loads(body) == expected


@pytest.mark.parametrize(
    ("model", "fields", "param"),
    [
        ("amazon.titan-embed-text-v2:0", {"input": ["a", "b"]}, "input"),
        ("amazon.nova-lite-v1:0", {"input": "a"}, "model"),
        ("cohere.embed-english-v3", {"input": [[1, 2]]}, "input"),
    ],
)
def test_embeddings_refusal(model: str, fields: dict[str, Any], param: str) -> None:
    request = parse_request(orjson.dumps({"model": "m", **fields}), "embeddings")
    with pytest.raises(InvalidRequest) as info:
        upstream_request(DIALECTS["bedrock"], request, RequestOptions(model))
    assert info.value.param == param
