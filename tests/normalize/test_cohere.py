"""``api: cohere``: the OpenAI request as Cohere's v2 Chat request, field by field, the refusals,
and Cohere's events and bodies as OpenAI's (the recorded fixtures are replayed against their
goldens by test_normalize_fixtures.py; these are the cases they do not show)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, UpstreamError, to_openai_error
from proxy.core.request import parse_request
from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request
from tests.support.replay import parse_frames

MODEL = "command-a-03-2025"
USER = {"role": "user", "content": "Hi"}
BASE: dict[str, Any] = {"model": "client-model", "messages": [USER]}
NATIVE: dict[str, Any] = {"model": MODEL, "messages": [USER], "stream": False}
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {"type": "function", "function": {"name": "time"}}
COHERE_WEATHER = {"type": "function", "function": WEATHER["function"]}
# Cohere needs a function's parameters: none is an object with no properties.
COHERE_TIME = {
    "type": "function",
    "function": {"name": "time", "parameters": {"type": "object", "properties": {}}},
}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def build(fields: dict[str, Any], **options: Any) -> dict[str, Any]:
    request = parse_request(orjson.dumps({**BASE, **fields}), "chat")
    body = upstream_request(DIALECTS["cohere"], request, RequestOptions(MODEL, **options))
    result: dict[str, Any] = orjson.loads(body)
    return result


TRANSLATED = [
    ({}, {}),
    ({"stream": True}, {"stream": True}),
    ({"max_tokens": 100}, {"max_tokens": 100}),
    ({"max_completion_tokens": 50, "max_tokens": 100}, {"max_tokens": 50}),
    ({"temperature": 0.2}, {"temperature": 0.2}),
    ({"top_p": 0.9}, {"p": 0.9}),
    ({"stop": "END"}, {"stop_sequences": ["END"]}),
    ({"stop": ["a", "b"]}, {"stop_sequences": ["a", "b"]}),
    ({"seed": 7}, {"seed": 7}),
    ({"frequency_penalty": 0.5}, {"frequency_penalty": 0.5}),
    ({"presence_penalty": 0.3}, {"presence_penalty": 0.3}),
    ({"response_format": {"type": "text"}}, {}),
    ({"response_format": {"type": "json_object"}}, {"response_format": {"type": "json_object"}}),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": SCHEMA},
            }
        },
        {"response_format": {"type": "json_object", "json_schema": SCHEMA}},
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        {"response_format": {"type": "json_object"}},
    ),
    ({"reasoning_effort": "none"}, {"thinking": {"type": "disabled"}}),
    ({"reasoning_effort": "low"}, {"thinking": {"type": "enabled", "token_budget": 2048}}),
    ({"reasoning_effort": "high"}, {"thinking": {"type": "enabled", "token_budget": 24576}}),
    ({"tools": [WEATHER, TIME]}, {"tools": [COHERE_WEATHER, COHERE_TIME]}),
    ({"tools": [WEATHER], "tool_choice": "auto"}, {"tools": [COHERE_WEATHER]}),
    (
        {"tools": [WEATHER], "tool_choice": "none"},
        {"tools": [COHERE_WEATHER], "tool_choice": "NONE"},
    ),
    (
        {"tools": [WEATHER], "tool_choice": "required"},
        {"tools": [COHERE_WEATHER], "tool_choice": "REQUIRED"},
    ),
    (  # forcing one function: only it is offered, and a call is required
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "time"}},
        },
        {"tools": [COHERE_TIME], "tool_choice": "REQUIRED"},
    ),
    (
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "weather"}}],
                },
            },
        },
        {"tools": [COHERE_WEATHER]},
    ),
    (
        {"tools": [{"type": "function", "function": {**TIME["function"], "strict": True}}]},
        {"tools": [COHERE_TIME], "strict_tools": True},
    ),
    # Fields that change nothing in the answer, and values that ask for nothing: dropped.
    (
        {
            "user": "u-1",
            "metadata": {"a": "b"},
            "store": True,
            "service_tier": "auto",
            "stream_options": {"include_usage": True},
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "n": 1,
            "logprobs": False,
            "parallel_tool_calls": True,
            "logit_bias": {},
            "modalities": ["text"],
            "top_logprobs": 0,
        },
        {},
    ),
    # Cohere's own fields pass through as they came.
    (
        {"k": 40, "documents": ["Paris is in France"]},
        {"k": 40, "documents": ["Paris is in France"]},
    ),
]


@pytest.mark.parametrize(("fields", "expected"), TRANSLATED)
def test_request_fields(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build(fields) == {**NATIVE, **expected}


def test_thinking_budgets_come_from_the_model() -> None:
    native = build({"reasoning_effort": "xhigh"}, thinking_budgets={"xhigh": 32000})
    assert native["thinking"] == {"type": "enabled", "token_budget": 32000}


MESSAGES = [
    ({"role": "system", "content": "Be brief"}, {"role": "system", "content": "Be brief"}),
    ({"role": "developer", "content": "Be brief"}, {"role": "system", "content": "Be brief"}),
    (
        {"role": "system", "content": [{"type": "text", "text": "Be", "cache_control": {}}]},
        {"role": "system", "content": [{"type": "text", "text": "Be"}]},
    ),
    (
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://x.test/a.png", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://x.test/a.png", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            ],
        },
    ),
    ({"role": "assistant", "content": "Hello"}, {"role": "assistant", "content": "Hello"}),
    (
        {"role": "assistant", "content": None, "refusal": "I can't"},
        {"role": "assistant", "content": "I can't"},
    ),
    (
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "No"}]},
    ),
    (  # the plan given to the client as reasoning goes back as the plan
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I will look it up",
            "tool_calls": [
                {
                    "id": "weather_e8p4",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "weather_e8p4",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "tool_plan": "I will look it up",
        },
    ),
    (
        {"role": "tool", "tool_call_id": "weather_e8p4", "content": '{"temp": 20}'},
        {"role": "tool", "tool_call_id": "weather_e8p4", "content": '{"temp": 20}'},
    ),
    (
        {"role": "tool", "tool_call_id": "w", "content": [{"type": "text", "text": "20"}]},
        {"role": "tool", "tool_call_id": "w", "content": [{"type": "text", "text": "20"}]},
    ),
]


@pytest.mark.parametrize(("message", "expected"), MESSAGES)
def test_messages(message: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build({"messages": [message]})["messages"] == [expected]


def _refusal(fields: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        build(fields)
    status, body = to_openai_error(info.value)
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    return info.value


REFUSED = [
    ({"n": 2}, "n", "unsupported_parameter"),
    ({"logprobs": True}, "logprobs", "unsupported_parameter"),
    ({"top_logprobs": 3}, "top_logprobs", "unsupported_parameter"),
    ({"logit_bias": {"50256": -100}}, "logit_bias", "unsupported_parameter"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls", "unsupported_parameter"),
    ({"modalities": ["text", "audio"]}, "modalities", "unsupported_parameter"),
    ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio", "unsupported_parameter"),
    ({"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ({"function_call": "auto"}, "function_call", "unsupported_parameter"),
    ({"web_search_options": {}}, "web_search_options", "unsupported_parameter"),
    ({"verbosity": "low"}, "verbosity", "unsupported_parameter"),
    ({"moderation": {"model": "omni-moderation-latest"}}, "moderation", "unsupported_parameter"),
    ({"reasoning_effort": "xhigh"}, "reasoning_effort", "invalid_value"),
    ({"reasoning_effort": 3}, "reasoning_effort", "invalid_type"),
    ({"stop": 3}, "stop", "invalid_type"),
    (
        {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "tools[0].type",
        "unsupported_parameter",
    ),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "invalid_type"),
    (
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        "tool_choice.function.name",
        "invalid_value",
    ),
    ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
    (
        {"tools": [WEATHER, {"type": "function", "function": {"name": "t", "strict": True}}]},
        "tools",
        "invalid_value",
    ),
    ({"response_format": {"type": "grammar"}}, "response_format.type", "unsupported_parameter"),
    (
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        "messages[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        {"messages": [{"role": "function", "name": "f", "content": "x"}]},
        "messages[0].role",
        "unsupported_parameter",
    ),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "invalid_value"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id", "invalid_type"),
    (
        {"messages": [{"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "f"}}]}]},
        "messages[0].tool_calls[0]",
        "invalid_type",
    ),
    # A Cohere field the translation sets from an OpenAI one: which was meant?
    ({"top_p": 0.5, "p": 0.9}, "p", "invalid_value"),
    ({"reasoning_effort": "low", "thinking": {"type": "disabled"}}, "thinking", "invalid_value"),
]


@pytest.mark.parametrize(("fields", "param", "code"), REFUSED)
def test_refusals(fields: dict[str, Any], param: str, code: str) -> None:
    error = _refusal(fields)
    assert (error.param, error.code) == (param, code)
    assert param.split("[")[0].split(".")[0] in error.message


# -- the stream -------------------------------------------------------------------------


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events
    )


def stream(events: list[dict[str, Any]], **ctx: Any) -> list[Any]:
    normalizer = StreamNormalizer(
        RequestContext("chat", "m", 1_700_000_000, include_usage=True, dialect="cohere", **ctx)
    )
    decoder = SSEDecoder()
    out = [frame for event in decoder.feed(_sse(events)) for frame in normalizer.feed(event)]
    out += normalizer.finish()
    return parse_frames(b"".join(out))


START = {"id": "3a2f", "type": "message-start", "delta": {"message": {"role": "assistant"}}}


def _text(text: str, kind: str = "text") -> dict[str, Any]:
    return {"type": "content-delta", "index": 0, "delta": {"message": {"content": {kind: text}}}}


def _end(reason: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"finish_reason": reason}
    if usage is not None:
        delta["usage"] = usage
    return {"type": "message-end", "delta": delta}


def _deltas(payloads: list[Any], key: str) -> str:
    return "".join(
        c["delta"].get(key) or ""
        for p in payloads
        if isinstance(p, dict)
        for c in p.get("choices", [])
    )


def test_thinking_is_reasoning() -> None:
    payloads = stream(
        [
            START,
            {
                "type": "content-start",
                "index": 0,
                "delta": {"message": {"content": {"type": "thinking", "thinking": ""}}},
            },
            _text("Paris is ", "thinking"),
            _text("the capital.", "thinking"),
            {"type": "content-end", "index": 0},
            {
                "type": "content-start",
                "index": 1,
                "delta": {"message": {"content": {"type": "text", "text": ""}}},
            },
            _text("Paris."),
            _end("COMPLETE", {"tokens": {"input_tokens": 5, "output_tokens": 9}}),
        ]
    )
    assert _deltas(payloads, "reasoning_content") == "Paris is the capital."
    assert _deltas(payloads, "content") == "Paris."
    assert payloads[-2]["usage"] == {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
    assert {p["id"] for p in payloads if isinstance(p, dict)} == {"3a2f"}


def test_reasoning_dropped_when_the_model_says_so() -> None:
    payloads = stream(
        [START, _text("hmm", "thinking"), _text("Hi"), _end("COMPLETE")], reasoning=False
    )
    assert _deltas(payloads, "reasoning_content") == ""
    assert _deltas(payloads, "content") == "Hi"


def test_events_that_say_nothing_are_skipped() -> None:
    payloads = stream(
        [
            START,
            {"type": "debug", "prompt": "<raw prompt>"},
            _text(""),
            _text("Paris"),
            {
                "type": "citation-start",
                "index": 0,
                "delta": {"message": {"citations": {"start": 0}}},
            },
            {"type": "citation-end", "index": 0},
            {"type": "something-new", "delta": {"message": {"content": {"text": "not text"}}}},
            _end("STOP_SEQUENCE"),
        ]
    )
    chunks = [p for p in payloads if isinstance(p, dict) and p["choices"]]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant"},
        {"content": "Paris"},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert payloads[-1] == "[DONE]"


@pytest.mark.parametrize("reason", ["ERROR", "TIMEOUT"])
def test_a_failed_generation_ends_in_an_error_event(reason: str) -> None:
    payloads = stream([START, _text("Par"), _end(reason)])
    assert _deltas(payloads, "content") == "Par"  # what came before the failure came
    assert payloads[-1]["error"]["type"] == "upstream_error"
    assert reason in payloads[-1]["error"]["message"]
    assert "[DONE]" not in payloads


def test_a_stream_without_message_end_was_cut_short() -> None:
    payloads = stream([START, _text("Par")])
    assert payloads[-1]["error"]["message"] == "The upstream stream was cut short"


def _finish(payloads: list[Any]) -> object:
    (reason,) = [
        c["finish_reason"]
        for p in payloads
        if isinstance(p, dict)
        for c in p.get("choices", [])
        if c["finish_reason"] is not None
    ]
    return reason


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("COMPLETE", "stop"), ("STOP_SEQUENCE", "stop"), ("MAX_TOKENS", "length"), ("NEW", "stop")],
)
def test_finish_reasons(reason: str, expected: str) -> None:
    assert _finish(stream([START, _text("a"), _end(reason)])) == expected


# -- whole answers ----------------------------------------------------------------------


def whole(body: dict[str, Any], **ctx: Any) -> dict[str, Any]:
    context = RequestContext("chat", "m", 1_700_000_000, dialect="cohere", **ctx)
    result: dict[str, Any] = orjson.loads(normalize_response(orjson.dumps(body), context).body)
    return result


def test_whole_tool_calls_with_thinking_and_plan() -> None:
    call = {
        "id": "weather_1",
        "type": "function",
        "function": {"name": "weather", "arguments": "{}"},
    }
    body = {
        "id": "9e1b",
        "finish_reason": "TOOL_CALL",
        "message": {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "Weather? "}],
            "tool_plan": "I will call weather.",
            "tool_calls": [call],
            "citations": [{"start": 0, "end": 1, "text": "x", "sources": []}],
        },
        "usage": {
            "billed_units": {"input_tokens": 1, "output_tokens": 1},
            "tokens": {"input_tokens": 30, "output_tokens": 12},
        },
    }
    message = whole(body)["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "reasoning_content": "Weather? I will call weather.",
        "tool_calls": [call],
    }
    assert whole(body)["choices"][0]["finish_reason"] == "tool_calls"
    assert whole(body)["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "total_tokens": 42,
    }


def test_whole_without_usage_tokens_is_estimated() -> None:
    body = {
        "id": "9e1b",
        "finish_reason": "COMPLETE",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Hello there"}]},
        "usage": {"billed_units": {"input_tokens": 3, "output_tokens": 2}},
    }
    context = RequestContext("chat", "m", 1_700_000_000, dialect="cohere", prompt="Hi")
    assert normalize_response(orjson.dumps(body), context).usage.source == "estimated"


@pytest.mark.parametrize("reason", ["ERROR", "TIMEOUT"])
def test_whole_failed_generation_is_an_upstream_error(reason: str) -> None:
    body = {"id": "x", "finish_reason": reason, "message": {"role": "assistant", "content": []}}
    with pytest.raises(UpstreamError) as info:
        whole(body)
    status, error = to_openai_error(info.value)
    assert status == 502 and reason in error["error"]["message"]
