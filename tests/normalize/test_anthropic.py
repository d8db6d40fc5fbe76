"""Anthropic's Messages API dialect: the request built from an OpenAI chat request, field by
field (docs/providers/anthropic.md), and its events and bodies made OpenAI's.

The recorded fixtures are replayed against their goldens by test_normalize_fixtures.py; here
are the request tables, the refusals, and what the fixtures do not show (calls after text,
the proxy's response_format tool, cache counts, unknown blocks and events, a stream cut short),
and the openai SDK's ``parse`` helper answered through the translation both ways.
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pydantic
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from proxy.core.errors import InvalidRequest
from proxy.core.request import ClientRequest, parse_request
from proxy.core.sse import SSEDecoder, encode_data
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request
from proxy.normalize.dialects.anthropic import finish_reason, openai_usage
from proxy.normalize.dialects.anthropic_request import JSON_TOOL

DIALECT = DIALECTS["anthropic"]
OPTIONS = RequestOptions("claude-up")
USER = {"role": "user", "content": "Hi"}
HI = {"role": "user", "content": [{"type": "text", "text": "Hi"}]}
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WEATHER_TOOL = {
    "name": "weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "description": "The weather in a city",
}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "A", "schema": SCHEMA}}
FORCED = {"name": JSON_TOOL, "description": "Give your whole answer as this tool's input."}


def client_request(body: dict[str, Any]) -> ClientRequest:
    return parse_request(orjson.dumps({"model": "claude", "messages": [USER], **body}), "chat")


def build(body: dict[str, Any], options: RequestOptions = OPTIONS) -> dict[str, Any]:
    upstream = orjson.loads(upstream_request(DIALECT, client_request(body), options))
    assert isinstance(upstream, dict)
    return upstream


# -- the request -----------------------------------------------------------------------------

BASE = {"model": "claude-up", "max_tokens": 4096, "messages": [HI]}


def _thinking(budget: int) -> dict[str, Any]:
    return {"type": "enabled", "budget_tokens": budget}


# (the client's fields beside model and messages, the native body's fields beside BASE's)
FIELDS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {}),
    ({"max_tokens": 100}, {"max_tokens": 100}),
    ({"max_tokens": 100, "max_completion_tokens": 200}, {"max_tokens": 200}),
    ({"temperature": 0.2, "top_p": 0.9}, {"temperature": 0.2, "top_p": 0.9}),
    ({"temperature": None, "top_p": None}, {}),
    ({"stop": "END"}, {"stop_sequences": ["END"]}),
    ({"stop": ["a", "b"]}, {"stop_sequences": ["a", "b"]}),
    ({"stop": []}, {}),
    ({"user": "u-1"}, {"metadata": {"user_id": "u-1"}}),
    ({"user": "u-1", "safety_identifier": "s-1"}, {"metadata": {"user_id": "s-1"}}),
    ({"user": ""}, {}),
    ({"service_tier": "auto"}, {"service_tier": "auto"}),
    ({"service_tier": "default"}, {"service_tier": "standard_only"}),
    ({"stream": True, "stream_options": {"include_usage": True}}, {"stream": True}),
    ({"stream": False}, {}),
    # Nothing of these reaches the model.
    ({"store": True, "metadata": {"k": "v"}, "prompt_cache_key": "k"}, {}),
    ({"prompt_cache_retention": "24h", "prompt_cache_options": {"k": "v"}}, {}),
    # Values that ask for nothing Anthropic lacks.
    ({"n": 1, "logprobs": False, "top_logprobs": 0, "seed": None}, {}),
    ({"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}}, {}),
    ({"modalities": ["text"], "verbosity": None, "audio": None}, {}),
    # OpenAI's default verbosity, and a predicted output (only a speed-up): nothing to ask for.
    ({"verbosity": "medium", "prediction": {"type": "content", "content": "x"}}, {}),
    # Not OpenAI's: Anthropic's own, as it came.
    ({"top_k": 5}, {"top_k": 5}),
    ({"system": "native"}, {"system": "native"}),
    # Thinking: the default limit is the answer's share, the budget comes on top.
    ({"reasoning_effort": "low"}, {"max_tokens": 6144, "thinking": _thinking(2048)}),
    ({"reasoning_effort": "none"}, {}),
    (
        {"reasoning_effort": "high", "max_tokens": 30000},
        {"max_tokens": 30000, "thinking": _thinking(24576)},
    ),
    # OpenAI's limit counts reasoning as Anthropic's counts thinking: the budget fits under it.
    (
        {"reasoning_effort": "high", "max_completion_tokens": 8000},
        {"max_tokens": 8000, "thinking": _thinking(7999)},
    ),
]


@pytest.mark.parametrize(("given", "expected"), FIELDS, ids=[str(c[0]) for c in FIELDS])
def test_field(given: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build(given) == {**BASE, **expected}


def test_thinking_budgets_come_from_the_model() -> None:
    options = RequestOptions("claude-up", max_tokens=1000, thinking_budgets={"medium": 3000})
    body = build({"reasoning_effort": "medium"}, options)
    assert (body["max_tokens"], body["thinking"]) == (
        4000,
        {"type": "enabled", "budget_tokens": 3000},
    )


def test_the_upstream_model_is_sent() -> None:
    assert build({}, RequestOptions("claude-opus-4-1"))["model"] == "claude-opus-4-1"


def msg(role: str, content: object, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


CALL = {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
PNG = "data:image/png;base64,iVBORw0KGgo="
PDF = "data:application/pdf;base64,JVBERi0="
EPHEMERAL = {"type": "ephemeral"}

# (the client's messages, the native system, the native messages)
MESSAGES: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[dict[str, Any]]]] = [
    ([USER], None, [HI]),
    # System and developer messages join the system prompt, wherever they stand.
    (
        [msg("system", "Be brief."), msg("developer", [text("Be kind.")]), USER],
        [text("Be brief."), text("Be kind.")],
        [HI],
    ),
    (
        [USER, msg("assistant", "Hello"), msg("system", "Now in French."), msg("user", "Ça va?")],
        [text("Now in French.")],
        [HI, msg("assistant", [text("Hello")]), msg("user", [text("Ça va?")])],
    ),
    # Consecutive messages of a role are one turn; empty ones say nothing.
    (
        [USER, msg("user", [text("again"), text("")]), msg("assistant", ""), msg("user", "x")],
        None,
        [msg("user", [text("Hi"), text("again"), text("x")])],
    ),
    # Images: a data URL's bytes, an http(s) URL as a URL; detail has no counterpart.
    (
        [msg("user", [{"type": "image_url", "image_url": {"url": PNG, "detail": "low"}}])],
        None,
        [
            msg(
                "user",
                [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    }
                ],
            )
        ],
    ),
    (
        [msg("user", [{"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}}])],
        None,
        [
            msg(
                "user",
                [{"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}}],
            )
        ],
    ),
    (
        [msg("user", [{"type": "file", "file": {"file_data": PDF, "filename": "a.pdf"}}])],
        None,
        [
            msg(
                "user",
                [
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": "JVBERi0=",
                        },
                    }
                ],
            )
        ],
    ),
    # cache_control passes untouched: on a part, or on a message (then on its last block).
    (
        [
            msg("system", [text("long rules", cache_control=EPHEMERAL)]),
            msg("user", "long context", cache_control={"type": "ephemeral", "ttl": "1h"}),
            msg("user", [text("q1"), text("q2", cache_control=EPHEMERAL)]),
        ],
        [text("long rules", cache_control=EPHEMERAL)],
        [
            msg(
                "user",
                [
                    text("long context", cache_control={"type": "ephemeral", "ttl": "1h"}),
                    text("q1"),
                    text("q2", cache_control=EPHEMERAL),
                ],
            )
        ],
    ),
    # Calls follow the text; results, merged into one user turn, then the user's own text.
    (
        [
            USER,
            msg(
                "assistant",
                "Let me look.",
                tool_calls=[
                    CALL,
                    {
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                ],
            ),
            msg("tool", "sunny", tool_call_id="toolu_1"),
            msg("tool", [text("rain")], tool_call_id="toolu_2", cache_control=EPHEMERAL),
            msg("user", "And tomorrow?"),
        ],
        None,
        [
            HI,
            msg(
                "assistant",
                [
                    text("Let me look."),
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}},
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "weather",
                        "input": {"city": "Oslo"},
                    },
                ],
            ),
            msg(
                "user",
                [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [text("sunny")]},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [text("rain")],
                        "cache_control": EPHEMERAL,
                    },
                    text("And tomorrow?"),
                ],
            ),
        ],
    ),
    # An assistant message of calls only (content null or ""); a refusal said earlier; a
    # result with nothing in it.
    (
        [
            USER,
            msg("assistant", [{"type": "refusal", "refusal": "I can't."}]),
            msg("user", "Please"),
            msg("assistant", None, tool_calls=[CALL]),
            msg("tool", "", tool_call_id="toolu_1"),
        ],
        None,
        [
            HI,
            msg("assistant", [text("I can't.")]),
            msg("user", [text("Please")]),
            msg(
                "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}]
            ),
            msg("user", [{"type": "tool_result", "tool_use_id": "toolu_1"}]),
        ],
    ),
]


@pytest.mark.parametrize(("messages", "system", "expected"), MESSAGES)
def test_messages(
    messages: list[dict[str, Any]],
    system: list[dict[str, Any]] | None,
    expected: list[dict[str, Any]],
) -> None:
    body = build({"messages": messages})
    assert body.get("system") == system
    assert body["messages"] == expected


# (the client's fields beside model and messages; tools, tool_choice and output_config sent)
TOOLS: list[tuple[dict[str, Any], list[Any] | None, Any, Any]] = [
    ({"tools": [WEATHER]}, [WEATHER_TOOL], None, None),
    (
        {"tools": [{"type": "function", "function": {"name": "now"}, "cache_control": EPHEMERAL}]},
        [
            {
                "name": "now",
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": EPHEMERAL,
            }
        ],
        None,
        None,
    ),
    ({"tools": [WEATHER], "tool_choice": "auto"}, [WEATHER_TOOL], {"type": "auto"}, None),
    ({"tools": [WEATHER], "tool_choice": "none"}, [WEATHER_TOOL], {"type": "none"}, None),
    ({"tools": [WEATHER], "tool_choice": "required"}, [WEATHER_TOOL], {"type": "any"}, None),
    (
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "weather"}}},
        [WEATHER_TOOL],
        {"type": "tool", "name": "weather"},
        None,
    ),
    ({"tool_choice": "none"}, None, None, None),
    ({"tools": [], "tool_choice": "auto"}, None, None, None),
    (
        {"tools": [WEATHER], "parallel_tool_calls": False},
        [WEATHER_TOOL],
        {"type": "auto", "disable_parallel_tool_use": True},
        None,
    ),
    (
        {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False},
        [WEATHER_TOOL],
        {"type": "any", "disable_parallel_tool_use": True},
        None,
    ),
    (
        {"tools": [WEATHER], "tool_choice": "none", "parallel_tool_calls": False},
        [WEATHER_TOOL],
        {"type": "none"},
        None,
    ),
    ({"parallel_tool_calls": False}, None, None, None),
    # response_format: the proxy's tool, forced, its input the answer.
    ({"response_format": {"type": "text"}}, None, None, None),
    (
        {"response_format": JSON_SCHEMA},
        [{**FORCED, "input_schema": SCHEMA}],
        {"type": "tool", "name": JSON_TOOL},
        None,
    ),
    (
        {"response_format": {"type": "json_object"}},
        [{**FORCED, "input_schema": {"type": "object"}}],
        {"type": "tool", "name": JSON_TOOL},
        None,
    ),
    # With the client's tools free to call: a call, or the answer.
    (
        {"response_format": JSON_SCHEMA, "tools": [WEATHER]},
        [WEATHER_TOOL, {**FORCED, "input_schema": SCHEMA}],
        {"type": "any"},
        None,
    ),
    (
        {"response_format": JSON_SCHEMA, "tools": [WEATHER], "tool_choice": "none"},
        [WEATHER_TOOL, {**FORCED, "input_schema": SCHEMA}],
        {"type": "tool", "name": JSON_TOOL},
        None,
    ),
    # A call asked for: no answer for the format to shape.
    (
        {"response_format": JSON_SCHEMA, "tools": [WEATHER], "tool_choice": "required"},
        [WEATHER_TOOL],
        {"type": "any"},
        None,
    ),
    # Thinking forbids a forced tool: Anthropic's own structured outputs.
    (
        {"response_format": JSON_SCHEMA, "reasoning_effort": "low"},
        None,
        None,
        {"format": {"type": "json_schema", "schema": SCHEMA}},
    ),
]


@pytest.mark.parametrize(("given", "tools", "tool_choice", "output_config"), TOOLS)
def test_tools(given: dict[str, Any], tools: Any, tool_choice: Any, output_config: Any) -> None:
    body = build(given)
    assert body.get("tools") == tools
    assert body.get("tool_choice") == tool_choice
    assert body.get("output_config") == output_config


def test_a_request_answering_tool_results_goes_without_thinking() -> None:
    # Anthropic wants that turn's signed thinking blocks back, which the client cannot give.
    loop = [
        USER,
        msg("assistant", None, tool_calls=[CALL]),
        msg("tool", "x", tool_call_id="toolu_1"),
    ]
    body = build({"messages": loop, "tools": [WEATHER], "reasoning_effort": "high"})
    assert "thinking" not in body and body["max_tokens"] == 4096
    body = build(
        {"messages": [*loop, msg("assistant", "Sunny."), USER], "reasoning_effort": "high"}
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 24576}


CUSTOM = {"type": "custom", "custom": {"name": "x"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "AAA=", "format": "wav"}}
BAD_CALL = {"id": "c", "type": "function", "function": {"name": "weather", "arguments": "{"}}
ARRAY_CALL = {"id": "c", "type": "function", "function": {"name": "weather", "arguments": "[1]"}}
# (the client's fields beside model and messages, the param named, the code)
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"n": 2}, "n", "unsupported_parameter"),
    ({"logprobs": True}, "logprobs", "unsupported_parameter"),
    ({"top_logprobs": 3}, "top_logprobs", "unsupported_parameter"),
    ({"presence_penalty": 0.5}, "presence_penalty", "unsupported_parameter"),
    ({"frequency_penalty": -1}, "frequency_penalty", "unsupported_parameter"),
    ({"logit_bias": {"50256": -100}}, "logit_bias", "unsupported_parameter"),
    ({"seed": 7}, "seed", "unsupported_parameter"),
    ({"modalities": ["text", "audio"]}, "modalities", "unsupported_parameter"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "unsupported_parameter"),
    ({"web_search_options": {}}, "web_search_options", "unsupported_parameter"),
    ({"verbosity": "low"}, "verbosity", "unsupported_parameter"),
    ({"service_tier": {"tier": "auto"}}, "service_tier", "invalid_value"),
    # Refused by every native API alike: OpenAI's own features, whatever their value.
    ({"moderation": {}}, "moderation", "unsupported_parameter"),
    ({"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ({"function_call": "auto"}, "function_call", "unsupported_parameter"),
    ({"service_tier": "flex"}, "service_tier", "invalid_value"),
    ({"stop": 5}, "stop", "invalid_type"),
    ({"user": 5}, "user", "invalid_type"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort", "invalid_value"),
    ({"reasoning_effort": 3}, "reasoning_effort", "invalid_type"),
    ({"reasoning_effort": "minimal", "max_tokens": 1024}, "max_tokens", "invalid_value"),
    (
        {"reasoning_effort": "low", "max_completion_tokens": 900},
        "max_completion_tokens",
        "invalid_value",
    ),
    ({"tools": [CUSTOM]}, "tools[0].type", "unsupported_parameter"),
    ({"tools": {"a": 1}}, "tools", "invalid_type"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "invalid_value"),
    (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
        "tools[0].function.parameters",
        "invalid_type",
    ),
    (
        {"tools": [{"type": "function", "function": {"name": JSON_TOOL}}]},
        "tools[0].function.name",
        "invalid_value",
    ),
    ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
    (
        {"tool_choice": {"type": "function", "function": {"name": "f"}}},
        "tool_choice",
        "invalid_value",
    ),
    (
        {"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}},
        "tool_choice.type",
        "unsupported_parameter",
    ),
    (
        {"response_format": {"type": "json_object"}, "reasoning_effort": "low"},
        "response_format",
        "invalid_value",
    ),
    ({"response_format": {"type": "xml"}}, "response_format.type", "unsupported_parameter"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "A", "schema": 1}}},
        "response_format.json_schema.schema",
        "invalid_type",
    ),
    ({"messages": [msg("function", "x", name="f")]}, "messages[0].role", "unsupported_parameter"),
    ({"messages": [msg("user", 5)]}, "messages[0].content", "invalid_type"),
    ({"messages": [msg("user", [AUDIO])]}, "messages[0].content[0].type", "unsupported_parameter"),
    (
        {"messages": [msg("system", [{"type": "image_url"}])]},
        "messages[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        {"messages": [msg("user", [{"type": "text"}])]},
        "messages[0].content[0].text",
        "invalid_type",
    ),
    (
        {"messages": [msg("user", [{"type": "image_url", "image_url": {"url": "ftp://x/a.png"}}])]},
        "messages[0].content[0].image_url.url",
        "invalid_value",
    ),
    (
        {
            "messages": [
                msg("user", [{"type": "image_url", "image_url": {"url": "data:image/png,x"}}])
            ]
        },
        "messages[0].content[0].image_url.url",
        "invalid_value",
    ),
    (
        {"messages": [msg("user", [{"type": "file", "file": {"file_id": "file-1"}}])]},
        "messages[0].content[0].file.file_data",
        "unsupported_parameter",
    ),
    (
        {
            "messages": [
                msg(
                    "user", [{"type": "file", "file": {"file_data": "data:text/plain;base64,eA=="}}]
                )
            ]
        },
        "messages[0].content[0].file.file_data",
        "invalid_value",
    ),
    (
        {"messages": [USER, msg("assistant", None, tool_calls=[BAD_CALL])]},
        "messages[1].tool_calls[0].function.arguments",
        "invalid_value",
    ),
    (
        {"messages": [USER, msg("assistant", None, tool_calls=[ARRAY_CALL])]},
        "messages[1].tool_calls[0].function.arguments",
        "invalid_value",
    ),
    (
        {"messages": [USER, msg("assistant", None, tool_calls=[{"id": "c"}])]},
        "messages[1].tool_calls[0].function",
        "invalid_type",
    ),
    (
        {"messages": [USER, msg("assistant", None, tool_calls={})]},
        "messages[1].tool_calls",
        "invalid_type",
    ),
    (
        {
            "messages": [
                USER,
                msg("assistant", None, function_call={"name": "f", "arguments": "{}"}),
            ]
        },
        "messages[1].function_call",
        "unsupported_parameter",
    ),
    ({"messages": [USER, msg("tool", "x")]}, "messages[1].tool_call_id", "invalid_value"),
    # A field of Anthropic's own that the translation also writes.
    ({"messages": [msg("system", "a"), USER], "system": "b"}, "system", "invalid_value"),
    ({"reasoning_effort": "low", "thinking": {"type": "disabled"}}, "thinking", "invalid_value"),
]


@pytest.mark.parametrize(("given", "param", "code"), REFUSED, ids=[c[1] for c in REFUSED])
def test_refused(given: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        build(given)
    assert info.value.status == 400
    assert (info.value.param, info.value.code) == (param, code)
    assert info.value.message


def test_only_chat_is_served() -> None:
    request = parse_request(b'{"model": "claude", "prompt": "Hi"}', "completions")
    with pytest.raises(InvalidRequest) as info:
        upstream_request(DIALECT, request, OPTIONS)
    assert info.value.code == "unsupported_endpoint"


# -- answers ---------------------------------------------------------------------------------

START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "model": "claude-up",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}
STOP = {"type": "message_stop"}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def message_delta(stop_reason: str | None, **usage: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage}


def tool_block(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {}}


def stream(events: list[dict[str, Any]], **ctx: Any) -> list[Any]:
    """The client's payloads for ``events`` through the normalizer (usage asked for)."""
    body = b"".join(
        b"event: %s\n" % e["type"].encode() + encode_data(orjson.dumps(e)) for e in events
    )
    context = RequestContext(
        "chat", "client", 1_700_000_000, include_usage=True, dialect="anthropic", **ctx
    )
    normalizer = StreamNormalizer(context)
    decoder = SSEDecoder()
    frames = [f for event in decoder.feed(body) + decoder.close() for f in normalizer.feed(event)]
    frames += normalizer.finish()
    return [orjson.loads(f[6:]) if f[6:-2] != b"[DONE]" else "[DONE]" for f in frames]


def deltas(payloads: list[Any]) -> list[dict[str, Any]]:
    return [p["choices"][0]["delta"] for p in payloads if isinstance(p, dict) and p.get("choices")]


def test_calls_are_counted_apart_from_blocks() -> None:
    payloads = stream(
        [
            START,
            block_start(0, {"type": "thinking", "thinking": ""}),
            delta(0, "thinking_delta", thinking="Two lookups."),
            delta(0, "signature_delta", signature="sig"),
            block_start(1, {"type": "text", "text": ""}),
            delta(1, "text_delta", text="Looking."),
            block_start(2, tool_block("toolu_a", "weather")),
            delta(2, "input_json_delta", partial_json=""),
            block_start(3, tool_block("toolu_b", "weather")),
            delta(3, "input_json_delta", partial_json='{"city":'),
            delta(2, "input_json_delta", partial_json="{}"),
            delta(3, "input_json_delta", partial_json=' "Oslo"}'),
            message_delta("tool_use", output_tokens=40),
            STOP,
        ]
    )
    assert deltas(payloads) == [
        {"role": "assistant", "reasoning_content": "Two lookups."},
        {"content": "Looking."},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "toolu_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": ""},
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "toolu_b",
                    "type": "function",
                    "function": {"name": "weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 1, "function": {"arguments": '{"city":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": ' "Oslo"}'}}]},
        {},
    ]
    assert payloads[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert payloads[-1] == "[DONE]"


def test_the_response_format_tool_streams_as_content() -> None:
    payloads = stream(
        [
            START,
            block_start(0, tool_block("toolu_j", JSON_TOOL)),
            delta(0, "input_json_delta", partial_json=""),
            delta(0, "input_json_delta", partial_json='{"a": '),
            delta(0, "input_json_delta", partial_json="1}"),
            message_delta("tool_use", output_tokens=9),
            STOP,
        ]
    )
    assert deltas(payloads) == [
        {"role": "assistant", "content": '{"a": '},
        {"content": "1}"},
        {},
    ]
    assert payloads[-3]["choices"][0]["finish_reason"] == "stop"


def test_unknown_blocks_and_events_are_ignored() -> None:
    payloads = stream(
        [
            START,
            {"type": "ping"},
            {"type": "some_event_added_later", "data": 1},
            block_start(
                0,
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            ),
            delta(0, "input_json_delta", partial_json='{"query": "x"}'),
            block_start(
                1, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
            ),
            block_start(2, {"type": "redacted_thinking", "data": "EmwKAhgB"}),
            block_start(3, {"type": "text", "text": ""}),
            delta(3, "citations_delta", citation={"type": "web_search_result_location"}),
            delta(3, "text_delta", text=""),
            delta(3, "a_delta_added_later", text="not text"),
            delta(3, "text_delta", text="Found it."),
            {"type": "content_block_stop", "index": 3},
            message_delta("end_turn", output_tokens=12),
            STOP,
        ]
    )
    assert deltas(payloads) == [{"role": "assistant", "content": "Found it."}, {}]
    assert payloads[-3]["choices"][0]["finish_reason"] == "stop"


def test_cache_counts_are_prompt_tokens() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_c",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
                "output_tokens": 1,
            },
        },
    }
    payloads = stream(
        [
            start,
            block_start(0, {"type": "text", "text": "Hi"}),
            # message_delta leaves out what it does not change (and may send null).
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3, "cache_read_input_tokens": None},
            },
            STOP,
        ]
    )
    assert deltas(payloads)[0] == {"role": "assistant", "content": "Hi"}
    assert payloads[-2]["usage"] == {
        "prompt_tokens": 1210,
        "completion_tokens": 3,
        "total_tokens": 1213,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 200},
    }


def test_a_stream_cut_short_ends_in_an_error() -> None:
    payloads = stream(
        [START, block_start(0, {"type": "text", "text": ""}), delta(0, "text_delta", text="Hel")]
    )
    assert deltas(payloads) == [{"role": "assistant", "content": "Hel"}]
    assert payloads[-1]["error"]["type"] == "upstream_error"


def test_nothing_goes_out_before_the_first_text() -> None:
    # An overload right after message_start is the whole answer: the relay answers it with an
    # HTTP error, and another attempt is made.
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    payloads = stream([START, {"type": "ping"}, overloaded])
    assert payloads == [
        {
            "error": {
                "message": "Overloaded",
                "type": "service_unavailable",
                "param": None,
                "code": None,
            }
        }
    ]


def test_a_retry_spliced_in_before_any_text_is_the_answer() -> None:
    second = {
        "type": "message_start",
        "message": {"id": "msg_2", "usage": {"input_tokens": 8, "output_tokens": 1}},
    }
    payloads = stream(
        [
            START,
            block_start(0, {"type": "text", "text": ""}),
            second,
            block_start(0, {"type": "text", "text": ""}),
            delta(0, "text_delta", text="Hi"),
            message_delta("end_turn", output_tokens=2),
            STOP,
        ]
    )
    assert deltas(payloads) == [{"role": "assistant", "content": "Hi"}, {}]
    assert payloads[0]["id"] == "msg_1"  # the stream's first id stays its id
    assert payloads[-2]["usage"] == {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}


def test_a_retry_spliced_in_after_text_ends_in_an_error() -> None:
    second = {"type": "message_start", "message": {"id": "msg_2"}}
    payloads = stream([START, block_start(0, {"type": "text", "text": "Hel"}), second])
    assert deltas(payloads) == [{"role": "assistant", "content": "Hel"}]
    assert payloads[-1]["error"]["type"] == "upstream_error"


def test_message_stop_ends_a_stream_that_said_no_reason() -> None:
    payloads = stream([START, block_start(0, {"type": "text", "text": "Hi"}), STOP])
    assert payloads[-3]["choices"][0]["finish_reason"] == "stop" and payloads[-1] == "[DONE]"


def test_an_error_event_keeps_its_message() -> None:
    error = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long"},
    }
    payloads = stream([START, error])
    assert payloads[-1] == {
        "error": {
            "message": "prompt is too long",
            "type": "upstream_error",
            "param": None,
            "code": None,
        }
    }


def test_adapter_alone() -> None:
    assert DIALECT.adapter is not None
    adapt = DIALECT.adapter(RequestContext("chat", "m", 1, dialect="anthropic"))
    assert adapt({"type": "ping"}) == (None, False)
    assert adapt({"type": "message_stop"}) == (None, True)
    assert adapt(block_start(0, {"type": "text", "text": ""})) == (None, False)
    assert adapt(delta(0, "input_json_delta", partial_json="{}")) == (None, False)  # no call
    assert adapt({"type": "content_block_delta", "index": [0], "delta": "x"}) == (None, False)


@pytest.mark.parametrize(
    ("stop_reason", "called", "expected"),
    [
        ("end_turn", False, "stop"),
        ("stop_sequence", False, "stop"),
        ("pause_turn", False, "stop"),
        ("max_tokens", False, "length"),
        ("model_context_window_exceeded", False, "length"),
        ("refusal", False, "content_filter"),
        ("tool_use", True, "tool_calls"),
        ("tool_use", False, "stop"),  # only the response_format tool was called
        ("a_reason_added_later", False, "stop"),
        (None, False, None),
    ],
)
def test_finish_reason(stop_reason: str | None, called: bool, expected: str | None) -> None:
    assert finish_reason(stop_reason, called) == expected


def test_usage_without_counts() -> None:
    assert openai_usage({"service_tier": "standard"}) is None
    assert openai_usage({"input_tokens": 3}) == {
        "prompt_tokens": 3,
        "completion_tokens": 0,
        "total_tokens": 3,
    }


def whole(message: dict[str, Any]) -> dict[str, Any]:
    ctx = RequestContext("chat", "client", 1_700_000_000, dialect="anthropic")
    body = orjson.loads(normalize_response(orjson.dumps(message), ctx).body)
    assert isinstance(body, dict)
    return body


MESSAGE = {"id": "msg_w", "type": "message", "role": "assistant", "model": "claude-up"}


def test_whole_message_with_thinking_text_and_calls() -> None:
    body = whole(
        {
            **MESSAGE,
            "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "Checking "},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "text", "text": "now."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 7, "cache_read_input_tokens": 3, "output_tokens": 20},
        }
    )
    assert body["id"] == "msg_w" and body["model"] == "client"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Checking now.",
                "refusal": None,
                "reasoning_content": "Look it up.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]
    assert body["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "total_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 3},
    }


def test_whole_message_of_the_response_format_tool() -> None:
    body = whole(
        {
            **MESSAGE,
            "content": [
                {"type": "tool_use", "id": "toolu_j", "name": JSON_TOOL, "input": {"a": 1}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 7, "output_tokens": 5},
        }
    )
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": '{"a":1}', "refusal": None}
    assert body["choices"][0]["finish_reason"] == "stop"


def test_whole_refusal() -> None:
    body = whole(
        {
            **MESSAGE,
            "content": [],
            "stop_reason": "refusal",
            "usage": {"input_tokens": 1, "output_tokens": 0},
        }
    )
    choice = body["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == (None, "content_filter")


# -- the openai SDK's parse, through the translation both ways --------------------------------


class Weather(pydantic.BaseModel):
    city: str
    celsius: int


async def _translating_server(aiohttp_server: AiohttpServer) -> str:
    """A stand-in for the proxy in front of Anthropic: the client's request is translated, the
    'model' answers by calling the forced tool, and the answer goes through the normalizer."""

    async def handle(request: web.Request) -> web.StreamResponse:
        client = parse_request(await request.read(), "chat")
        native = orjson.loads(upstream_request(DIALECT, client, OPTIONS))
        assert native["tool_choice"] == {"type": "tool", "name": JSON_TOOL}
        schema = native["tools"][0]["input_schema"]
        assert schema["properties"].keys() == {"city", "celsius"}
        ctx = RequestContext("chat", client.model, 1_700_000_000, dialect="anthropic")
        if not client.stream:
            message = {
                **MESSAGE,
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_j",
                        "name": JSON_TOOL,
                        "input": {"city": "Oslo", "celsius": 4},
                    }
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 30, "output_tokens": 12},
            }
            body = normalize_response(orjson.dumps(message), ctx).body
            return web.Response(body=body, content_type="application/json")
        events = [
            START,
            block_start(0, tool_block("toolu_j", JSON_TOOL)),
            delta(0, "input_json_delta", partial_json='{"city": "Os'),
            delta(0, "input_json_delta", partial_json='lo", "celsius": 4}'),
            message_delta("tool_use", output_tokens=12),
            STOP,
        ]
        normalizer = StreamNormalizer(ctx)
        frames = [f for e in events for f in normalizer.feed(_event(e))] + normalizer.finish()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"".join(frames))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    server = await aiohttp_server(app)
    return str(server.make_url("/v1"))


def _event(payload: dict[str, Any]) -> Any:
    (event,) = SSEDecoder().feed(encode_data(orjson.dumps(payload)))
    return event


async def test_sdk_parse_gets_the_model_back(aiohttp_server: AiohttpServer) -> None:
    url = await _translating_server(aiohttp_server)
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
    messages: Any = [{"role": "user", "content": "Weather in Oslo?"}]
    completion = await client.chat.completions.parse(
        model="claude", messages=messages, response_format=Weather
    )
    assert completion.choices[0].message.parsed == Weather(city="Oslo", celsius=4)
    assert completion.choices[0].finish_reason == "stop"
    async with client.chat.completions.stream(
        model="claude", messages=messages, response_format=Weather
    ) as events:
        final = await events.get_final_completion()
    assert final.choices[0].message.parsed == Weather(city="Oslo", celsius=4)
    await client.close()
