"""An Anthropic Messages request made the canonical chat request, field by field; what is
dropped, what is refused (naming the field), and what no upstream takes.

Every chat body made is also held to OpenAI's ``CreateChatCompletionRequest`` schema (strict
keys, ``top_k`` aside: the one field passed on for OpenAI-compatible servers) and to the
proxy's own chat request parser, through ``messages_request``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest
from proxy.normalize.faces.anthropic.request import (
    MessagesCall,
    clamp_max_tokens,
    messages_request,
    passthrough_body,
)
from tests.normalize.anthropic_face_bodies import USER_ID, claude_code_body
from tests.support.schema import validate

BASE: dict[str, Any] = {"model": "m", "max_tokens": 100}
HI: dict[str, Any] = {"role": "user", "content": "Hi"}
PNG: dict[str, Any] = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
WEATHER: dict[str, Any] = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
USE: dict[str, Any] = {
    "type": "tool_use",
    "id": "toolu_1",
    "name": "weather",
    "input": {"city": "Paris"},
}
CALL: dict[str, Any] = {
    "id": "toolu_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
}
ASKED: dict[str, Any] = {"role": "assistant", "content": [USE]}


def result(content: object = "Sunny", **more: object) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content, **more}],
    }


def translate(body: dict[str, Any]) -> tuple[dict[str, Any], MessagesCall]:
    """The chat body made of ``body`` (with BASE's model and max_tokens), checked."""
    request, call = messages_request(orjson.dumps({**BASE, **body}))
    assert call.refusal is None, call.refusal
    checked = {key: value for key, value in request.body.items() if key != "top_k"}
    validate(orjson.loads(orjson.dumps(checked)), "CreateChatCompletionRequest")
    return request.body, call


def chat(*messages: dict[str, Any], **fields: object) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), "max_completion_tokens": 100, **fields}


def refusal(body: dict[str, Any]) -> InvalidRequest:
    """Why ``body`` cannot be made a chat request: raised, or kept for an Anthropic upstream."""
    try:
        request, call = messages_request(orjson.dumps(body))
    except InvalidRequest as exc:
        return exc
    assert call.refusal is not None, request.body
    return call.refusal


# -- the translation, row by row -------------------------------------------------------

TRANSLATED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("a string", {"messages": [HI]}, chat({"role": "user", "content": "Hi"})),
    (
        "system as a string",
        {"system": "Be brief.", "messages": [HI]},
        chat({"role": "system", "content": "Be brief."}, HI),
    ),
    (
        "system blocks and system turns join in order",
        {
            "system": [
                {"type": "text", "text": "One.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Two."},
            ],
            "messages": [
                {"role": "system", "content": "Three."},
                HI,
                {"role": "assistant", "content": "Hello"},
                {"role": "system", "content": [{"type": "text", "text": "Four."}]},
                {"role": "user", "content": "Bye"},
            ],
        },
        chat(
            {"role": "system", "content": "One.\n\nTwo.\n\nThree.\n\nFour."},
            HI,
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "Bye"},
        ),
    ),
    (
        "one text block is a string, cache_control dropped",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
                    ],
                }
            ]
        },
        chat(HI),
    ),
    (
        "text blocks are parts",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
                }
            ]
        },
        chat(
            {
                "role": "user",
                "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            }
        ),
    ),
    (
        "consecutive turns of one role are one",
        {"messages": [HI, {"role": "user", "content": "There"}]},
        chat(
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "There"}],
            }
        ),
    ),
    (
        "images: base64 as a data URL, url as it is",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": PNG},
                        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                        {"type": "text", "text": "Same?"},
                    ],
                }
            ]
        },
        chat(
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                    {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                    {"type": "text", "text": "Same?"},
                ],
            }
        ),
    ),
    (
        "documents: a PDF as a file part, plain text as its text",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "title": "a.pdf",
                            "source": {
                                "type": "base64",
                                "media_type": "application/pdf",
                                "data": "JVBERi0=",
                            },
                        },
                        {
                            "type": "document",
                            "title": "Notes",
                            "source": {"type": "text", "media_type": "text/plain", "data": "Milk."},
                        },
                    ],
                }
            ]
        },
        chat(
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {
                            "file_data": "data:application/pdf;base64,JVBERi0=",
                            "filename": "a.pdf",
                        },
                    },
                    {"type": "text", "text": "Notes"},
                    {"type": "text", "text": "Milk."},
                ],
            }
        ),
    ),
    (
        "a two-turn tool exchange",
        {
            "tools": [WEATHER],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, USE]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                        {"type": "text", "text": "And tomorrow?"},
                    ],
                },
            ],
        },
        chat(
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
            {"role": "user", "content": "And tomorrow?"},
            tools=[FUNCTION],
        ),
    ),
    (
        "parallel calls, their results in order; a call with no text has null content",
        {
            "messages": [
                HI,
                {"role": "assistant", "content": [USE, {**USE, "id": "toolu_2", "input": {}}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_2"},
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                    ],
                },
            ],
        },
        chat(
            HI,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    CALL,
                    {
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "weather", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        ),
    ),
    (
        "a tool result's text blocks joined; is_error said in its text",
        {
            "messages": [
                HI,
                ASKED,
                result(
                    [{"type": "text", "text": "No"}, {"type": "text", "text": "city"}],
                    is_error=True,
                ),
            ]
        },
        chat(
            HI,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: No\n\ncity"},
        ),
    ),
    (
        "a tool result's image leads the user message after the tool messages",
        {
            "messages": [
                HI,
                ASKED,
                result([{"type": "text", "text": "Shot:"}, {"type": "image", "source": PNG}]),
            ]
        },
        chat(
            HI,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "Shot:"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    }
                ],
            },
        ),
    ),
    (
        "thinking sent back is dropped; a turn of thinking alone is no message",
        {
            "messages": [
                HI,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Hm.", "signature": "sig"},
                        {"type": "text", "text": "Hello"},
                    ],
                },
                {"role": "user", "content": "More"},
                {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xyz"}]},
            ]
        },
        chat(HI, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}),
    ),
    (
        "tools: cache_control, defer_loading, eager_input_streaming dropped; strict kept",
        {
            "messages": [HI],
            "tools": [
                {
                    **WEATHER,
                    "type": "custom",
                    "cache_control": {"type": "ephemeral"},
                    "defer_loading": True,
                    "eager_input_streaming": True,
                    "strict": True,
                    "allowed_callers": ["direct"],
                },
            ],
        },
        chat(
            HI, tools=[{"type": "function", "function": {**FUNCTION["function"], "strict": True}}]
        ),
    ),
    (
        "tool_choice auto",
        {"messages": [HI], "tools": [WEATHER], "tool_choice": {"type": "auto"}},
        chat(HI, tools=[FUNCTION], tool_choice="auto"),
    ),
    (
        "tool_choice any",
        {"messages": [HI], "tools": [WEATHER], "tool_choice": {"type": "any"}},
        chat(HI, tools=[FUNCTION], tool_choice="required"),
    ),
    (
        "tool_choice none",
        {"messages": [HI], "tools": [WEATHER], "tool_choice": {"type": "none"}},
        chat(HI, tools=[FUNCTION], tool_choice="none"),
    ),
    (
        "tool_choice tool, one call at a time",
        {
            "messages": [HI],
            "tools": [WEATHER],
            "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
        },
        chat(
            HI,
            tools=[FUNCTION],
            tool_choice={"type": "function", "function": {"name": "weather"}},
            parallel_tool_calls=False,
        ),
    ),
    (
        "tool_choice without tools says nothing",
        {"messages": [HI], "tool_choice": {"type": "auto"}},
        chat(HI),
    ),
    (
        "sampling, stop sequences and the user",
        {
            "messages": [HI],
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "stop_sequences": ["END"],
            "metadata": {"user_id": USER_ID},
        },
        chat(HI, stop=["END"], temperature=0.2, top_p=0.9, top_k=40, user=USER_ID),
    ),
    (
        "a stream asks for its usage",
        {"messages": [HI], "stream": True},
        chat(HI, stream=True, stream_options={"include_usage": True}),
    ),
    (
        "what steers cost, not the answer, is dropped",
        {
            "messages": [HI],
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
            "service_tier": "auto",
            "cache_control": {"type": "ephemeral"},
            "inference_geo": "us",
            "speed": "fast",
            "stream": False,
            "metadata": {"user_id": None},
        },
        chat(HI),
    ),
    (
        "structured output as a strict json_schema",
        {
            "messages": [HI],
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        },
        chat(
            HI,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": {"type": "object"}, "strict": True},
            },
        ),
    ),
    (
        "the deprecated output_format too",
        {"messages": [HI], "output_format": {"type": "json_schema", "schema": {"type": "object"}}},
        chat(
            HI,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": {"type": "object"}, "strict": True},
            },
        ),
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [row[1:] for row in TRANSLATED], ids=[row[0] for row in TRANSLATED]
)
def test_translation(body: dict[str, Any], expected: dict[str, Any]) -> None:
    made, _ = translate(body)
    assert made == expected
    # Keys in a fixed order, so that equal requests are equal bytes (caches, logs).
    assert list(made) == list(expected)


THINKING: list[tuple[dict[str, Any], dict[str, Any], str | None]] = [
    ({"type": "enabled", "budget_tokens": 1024}, {}, "low"),
    ({"type": "enabled", "budget_tokens": 2048}, {}, "low"),
    ({"type": "enabled", "budget_tokens": 8191}, {}, "low"),
    ({"type": "enabled", "budget_tokens": 8192}, {}, "medium"),
    ({"type": "enabled", "budget_tokens": 31999}, {}, "high"),
    ({"type": "enabled", "budget_tokens": 1024}, {"effort": "high"}, "high"),
    ({"type": "adaptive"}, {}, "medium"),
    ({"type": "adaptive", "display": "omitted"}, {"effort": "low"}, "low"),
    ({"type": "adaptive", "display": "summarized"}, {"effort": "medium"}, "medium"),
    ({"type": "adaptive"}, {"effort": "xhigh"}, "high"),
    ({"type": "adaptive"}, {"effort": "max"}, "high"),
    ({"type": "disabled"}, {"effort": "high"}, None),
    (
        {"type": "adaptive"},
        {"effort": "high", "task_budget": {"type": "tokens", "total": 9}},
        "high",
    ),
]


@pytest.mark.parametrize(("thinking", "output_config", "effort"), THINKING)
def test_thinking_is_the_reasoning_effort(
    thinking: dict[str, Any], output_config: dict[str, Any], effort: str | None
) -> None:
    made, _ = translate({"messages": [HI], "thinking": thinking, "output_config": output_config})
    assert made.get("reasoning_effort") == effort


def test_an_effort_without_thinking_sets_nothing() -> None:
    made, _ = translate({"messages": [HI], "output_config": {"effort": "high"}})
    assert "reasoning_effort" not in made


# -- refusals --------------------------------------------------------------------------

OK: dict[str, Any] = {**BASE, "messages": [HI]}
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "a server tool",
        {**OK, "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}]},
        "tools[1]",
    ),
    ("a bash tool", {**OK, "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0]"),
    ("a container", {**OK, "container": "container_1"}, "container"),
    (
        "MCP servers",
        {**OK, "mcp_servers": [{"type": "url", "url": "https://m", "name": "m"}]},
        "mcp_servers",
    ),
    ("an unknown field", {**OK, "frobnicate": True}, "frobnicate"),
    ("a chat field", {**OK, "reasoning_effort": "high"}, "reasoning_effort"),
    (
        "a tool's input_examples",
        {**OK, "tools": [{**WEATHER, "input_examples": [{"city": "Oslo"}]}]},
        "tools[0].input_examples",
    ),
    (
        "a tool called by code execution",
        {**OK, "tools": [{**WEATHER, "allowed_callers": ["code_execution_20250825"]}]},
        "tools[0].allowed_callers",
    ),
    ("a tool without a schema", {**OK, "tools": [{"name": "x"}]}, "tools[0].input_schema"),
    (
        "a tool_use without its result",
        {**BASE, "messages": [HI, ASKED, HI]},
        "messages[1].content[0]",
    ),
    ("a tool_use last", {**BASE, "messages": [HI, ASKED]}, "messages[1].content[0]"),
    (
        "a tool_use answered by an assistant",
        {**BASE, "messages": [HI, ASKED, {"role": "assistant", "content": "Hm"}]},
        "messages[1].content[0]",
    ),
    ("a result of no call", {**BASE, "messages": [result()]}, "messages[0].content[0].tool_use_id"),
    (
        "a result of another call",
        {
            **BASE,
            "messages": [
                HI,
                ASKED,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]},
            ],
        },
        "messages[2].content[0].tool_use_id",
    ),
    (
        "two results of one call",
        {
            **BASE,
            "messages": [
                HI,
                ASKED,
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}] * 2,
                },
            ],
        },
        "messages[2].content[1].tool_use_id",
    ),
    (
        "a result of an earlier turn's call",
        {
            **BASE,
            "messages": [HI, ASKED, result(), {"role": "assistant", "content": "ok"}, result()],
        },
        "messages[4].content[0].tool_use_id",
    ),
    (
        "an image by file id",
        {
            **BASE,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                }
            ],
        },
        "messages[0].content[0].source",
    ),
    (
        "an image of no source type",
        {
            **BASE,
            "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "x"}}]}],
        },
        "messages[0].content[0].source.type",
    ),
    (
        "an image without data",
        {
            **BASE,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png"}}
                    ],
                }
            ],
        },
        "messages[0].content[0].source.data",
    ),
    (
        "a document by URL",
        {
            **BASE,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "document", "source": {"type": "url", "url": "https://a.pdf"}}
                    ],
                }
            ],
        },
        "messages[0].content[0].source",
    ),
    (
        "citations",
        {
            **BASE,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "citations": {"enabled": True},
                            "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                        }
                    ],
                }
            ],
        },
        "messages[0].content[0].citations",
    ),
    (
        "a server tool's call sent back",
        {
            **BASE,
            "messages": [
                HI,
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "server_tool_use",
                            "id": "srvtoolu_1",
                            "name": "web_search",
                            "input": {},
                        }
                    ],
                },
            ],
        },
        "messages[1].content[0].type",
    ),
    (
        "a server tool's result sent back",
        {
            **BASE,
            "messages": [
                HI,
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "web_search_tool_result",
                            "tool_use_id": "srvtoolu_1",
                            "content": [],
                        }
                    ],
                },
            ],
        },
        "messages[1].content[0].type",
    ),
    (
        "a tool_result from the assistant",
        {
            **BASE,
            "messages": [
                HI,
                {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            ],
        },
        "messages[1].content[0].type",
    ),
    (
        "a tool_use from the user",
        {**BASE, "messages": [{"role": "user", "content": [USE]}]},
        "messages[0].content[0].type",
    ),
    (
        "a block of no known type",
        {**BASE, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
        "messages[0].content[0].type",
    ),
    (
        "a block that is no object",
        {**BASE, "messages": [{"role": "user", "content": ["Hi"]}]},
        "messages[0].content[0]",
    ),
    (
        "content of a number",
        {**BASE, "messages": [{"role": "user", "content": 3}]},
        "messages[0].content",
    ),
    ("no content", {**BASE, "messages": [{"role": "user"}]}, "messages[0].content"),
    (
        "a developer role",
        {**BASE, "messages": [{"role": "developer", "content": "x"}]},
        "messages[0].role",
    ),
    (
        "an image in the system prompt",
        {**OK, "system": [{"type": "image", "source": PNG}]},
        "system[0].type",
    ),
    (
        "a tool result's document",
        {
            **BASE,
            "messages": [
                HI,
                ASKED,
                result([{"type": "document", "source": {"type": "text", "data": "x"}}]),
            ],
        },
        "messages[2].content[0].content[0].type",
    ),
    (
        "is_error of a string",
        {**BASE, "messages": [HI, ASKED, result(is_error="yes")]},
        "messages[2].content[0].is_error",
    ),
    (
        "tool input of a string",
        {
            **BASE,
            "messages": [HI, {"role": "assistant", "content": [{**USE, "input": "{}"}]}, result()],
        },
        "messages[1].content[0].input",
    ),
    ("max_tokens 0 (a cache warm-up)", {**OK, "max_tokens": 0}, "max_tokens"),
    ("a temperature over 1", {**OK, "temperature": 1.5}, "temperature"),
    ("top_k of a float", {**OK, "top_k": 0.5}, "top_k"),
    ("stop_sequences of a string", {**OK, "stop_sequences": "END"}, "stop_sequences"),
    ("a stop sequence of a number", {**OK, "stop_sequences": [1]}, "stop_sequences[0]"),
    (
        "a named tool without tools",
        {**OK, "tool_choice": {"type": "tool", "name": "x"}},
        "tool_choice",
    ),
    (
        "tool_choice of no type",
        {**OK, "tools": [WEATHER], "tool_choice": {"type": "some"}},
        "tool_choice.type",
    ),
    ("thinking of no type", {**OK, "thinking": {"type": "deep"}}, "thinking.type"),
    (
        "thinking without a budget",
        {**OK, "thinking": {"type": "enabled"}},
        "thinking.budget_tokens",
    ),
    (
        "an effort of no name",
        {**OK, "thinking": {"type": "adaptive"}, "output_config": {"effort": "huge"}},
        "output_config.effort",
    ),
    (
        "an unknown output_config field",
        {**OK, "output_config": {"tone": "dry"}},
        "output_config.tone",
    ),
    (
        "a format without a schema",
        {**OK, "output_config": {"format": {"type": "json_schema"}}},
        "output_config.format.schema",
    ),
    ("metadata of a string", {**OK, "metadata": "x"}, "metadata"),
    ("a user_id of a number", {**OK, "metadata": {"user_id": 7}}, "metadata.user_id"),
    (
        "nothing but empty system turns",
        {**BASE, "messages": [{"role": "system", "content": ""}]},
        "messages",
    ),
]


@pytest.mark.parametrize(
    ("body", "param"), [row[1:] for row in REFUSED], ids=[row[0] for row in REFUSED]
)
def test_refusal_names_the_field(body: dict[str, Any], param: str) -> None:
    request, call = messages_request(orjson.dumps(body))
    assert call.refusal is not None
    assert (call.refusal.status, call.refusal.param) == (400, param)
    assert f"'{param}'" in call.refusal.message
    # Kept for an Anthropic upstream, which takes the request as it came: routed by the
    # client's model, stream and max_tokens, its body passed through untouched.
    assert (request.model, request.stream, request.max_tokens) == ("m", False, body["max_tokens"])
    assert call.body == body
    assert orjson.loads(passthrough_body(call.body, "up")) == {**body, "model": "up"}


INVALID: list[tuple[str, bytes, str | None]] = [
    ("not JSON", b"{", None),
    ("empty", b"", None),
    ("an array", b"[]", None),
    ("a string", b'"hi"', None),
    ("null", b"null", None),
    ("no model", orjson.dumps({"max_tokens": 1, "messages": [HI]}), "model"),
    ("a model of a number", orjson.dumps({**OK, "model": 3}), "model"),
    ("an empty model", orjson.dumps({**OK, "model": ""}), "model"),
    ("no messages", orjson.dumps(BASE), "messages"),
    ("messages of an object", orjson.dumps({**BASE, "messages": {"role": "user"}}), "messages"),
    ("no message", orjson.dumps({**BASE, "messages": []}), "messages"),
    ("a message of a string", orjson.dumps({**BASE, "messages": ["Hi"]}), "messages[0]"),
    ("no max_tokens", orjson.dumps({"model": "m", "messages": [HI]}), "max_tokens"),
    ("max_tokens of a string", orjson.dumps({**OK, "max_tokens": "9"}), "max_tokens"),
    ("max_tokens of a boolean", orjson.dumps({**OK, "max_tokens": True}), "max_tokens"),
    ("max_tokens below 0", orjson.dumps({**OK, "max_tokens": -1}), "max_tokens"),
    ("max_tokens of a float", orjson.dumps({**OK, "max_tokens": 1.5}), "max_tokens"),
    ("stream of a string", orjson.dumps({**OK, "stream": "yes"}), "stream"),
    (
        "an integer beyond 64 bits",
        b'{"model":"m","max_tokens":99999999999999999999999,"messages":[]}',
        None,
    ),
]


@pytest.mark.parametrize(
    ("raw", "param"), [row[1:] for row in INVALID], ids=[row[0] for row in INVALID]
)
def test_no_messages_request_is_refused_for_every_upstream(raw: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        messages_request(raw)
    assert (caught.value.status, caught.value.param) == (400, param)


# -- what Claude Code sends -----------------------------------------------------------


def test_what_claude_code_sends_is_translated_whole() -> None:
    body = claude_code_body()
    raw = orjson.dumps(body)
    assert 45_000 < len(raw) < 60_000
    request, call = messages_request(raw)
    assert call.refusal is None
    made = request.body
    validate(orjson.loads(orjson.dumps(made)), "CreateChatCompletionRequest")
    system = made["messages"][0]
    assert system["role"] == "system"
    # Both system blocks, then the system turns in the order they came.
    texts = [b["text"] for b in body["system"]] + [
        "<system-reminder>The working directory is /repo.</system-reminder>",
        "Be brief.",
    ]
    assert system["content"] == "\n\n".join(texts)
    assert [m["role"] for m in made["messages"]] == ["system", "user", "assistant", "tool"]
    assert made["messages"][2] == {
        "role": "assistant",
        "content": "I'll look.",
        "tool_calls": [
            {
                "id": "toolu_01A",
                "type": "function",
                "function": {"name": "Glob", "arguments": '{"command":"**/*.py"}'},
            }
        ],
    }
    assert made["messages"][3] == {
        "role": "tool",
        "tool_call_id": "toolu_01A",
        "content": "proxy/app.py\nproxy/cli.py",
    }
    assert len(made["tools"]) == 12
    for tool, sent in zip(made["tools"], body["tools"], strict=True):
        assert tool == {
            "type": "function",
            "function": {
                "name": sent["name"],
                "description": sent["description"],
                "parameters": sent["input_schema"],
            },
        }
    assert made["reasoning_effort"] == "high"
    assert made["user"] == USER_ID
    assert made["max_completion_tokens"] == request.max_tokens == 32000
    assert (request.stream, request.include_usage) == (True, True)
    assert made["stream_options"] == {"include_usage": True}
    assert "context_management" not in made and "thinking" not in made
    assert request.size >= len(raw)
    assert re.fullmatch(r"msg_[A-Za-z0-9]{24}", call.message_id)


def test_each_request_has_its_own_message_id() -> None:
    raw = orjson.dumps(OK)
    ids = {messages_request(raw)[1].message_id for _ in range(50)}
    assert len(ids) == 50


# -- passthrough and clamp --------------------------------------------------------------


def test_passthrough_body_changes_the_model_only() -> None:
    body = {
        "max_tokens": 10,
        "frobnicate": {"b": 1, "a": [1.5, None]},
        "model": "claude-client-name",
        "messages": claude_code_body()["messages"],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "container": "c_1",
    }
    out = passthrough_body(body, "claude-sonnet-4-5-20250929")
    assert list(orjson.loads(out)) == list(body)
    assert orjson.loads(out) == {**body, "model": "claude-sonnet-4-5-20250929"}
    assert body["model"] == "claude-client-name"


@pytest.mark.parametrize(("limit", "expected"), [(4096, 4096), (32000, 32000), (64000, 32000)])
def test_clamp_max_tokens(limit: int, expected: int) -> None:
    request, call = messages_request(orjson.dumps(claude_code_body()))
    clamp_max_tokens(request, limit)
    assert request.max_tokens == request.body["max_completion_tokens"] == expected
    assert call.body["max_tokens"] == 32000


def test_clamp_leaves_the_body_passed_through_as_it_came() -> None:
    body = {**claude_code_body(), "container": "c_1"}
    request, call = messages_request(orjson.dumps(body))
    assert call.refusal is not None and call.refusal.param == "container"
    clamp_max_tokens(request, 4096)
    assert request.max_tokens == 4096
    assert orjson.loads(passthrough_body(call.body, "up"))["max_tokens"] == 32000


# -- fuzz: nothing but InvalidRequest escapes ------------------------------------------

RICH: dict[str, Any] = {
    **BASE,
    "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "system", "content": "T"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "A"}, {"type": "image", "source": PNG}],
        },
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "h", "signature": "s"}, USE],
        },
        result([{"type": "text", "text": "R"}, {"type": "image", "source": PNG}], is_error=False),
    ],
    "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}],
    "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 4000},
    "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {}}},
    "metadata": {"user_id": "u"},
    "stop_sequences": ["x"],
    "temperature": 0.5,
    "top_k": 3,
    "stream": True,
}
_REPLACEMENTS: tuple[object, ...] = (None, 0, -1, 1.5, True, "", "x", [], [1], {}, {"type": "x"})


def _paths(value: object, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _replaced(value: Any, path: tuple[str | int, ...], new: object) -> Any:
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


def _answer(raw: bytes) -> None:
    try:
        request, call = messages_request(raw)
    except InvalidRequest:
        return
    assert call.refusal is None or isinstance(call.refusal, InvalidRequest)
    assert request.endpoint == "chat"


def test_the_rich_body_translates() -> None:
    made, _ = translate(RICH)
    assert made["reasoning_effort"] == "low"


def test_every_value_replaced_is_translated_or_refused() -> None:
    for path in _paths(RICH):
        for new in _REPLACEMENTS:
            _answer(orjson.dumps(_replaced(RICH, path, new)))


def test_every_prefix_and_byte_flip_is_translated_or_refused() -> None:
    raw = orjson.dumps(RICH)
    for end in range(len(raw) + 1):
        _answer(raw[:end])
    shuffle = random.Random(58)
    for _ in range(2000):
        position = shuffle.randrange(len(raw))
        _answer(raw[:position] + bytes([shuffle.randrange(256)]) + raw[position + 1 :])
