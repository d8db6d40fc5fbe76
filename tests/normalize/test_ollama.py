"""``api: ollama``: OpenAI requests as Ollama's ``/api/chat`` and ``/api/generate`` requests,
field by field, the refusals, and Ollama's NDJSON lines and bodies as OpenAI's (the recorded
/api/chat fixtures are replayed against their goldens by test_normalize_fixtures.py; no
/api/generate recording exists, so its lines are written here from Ollama's API reference)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, UpstreamError, to_openai_error
from proxy.core.framing import NDJSONDecoder
from proxy.core.request import Endpoint, parse_request
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request
from proxy.normalize.dialects.ollama import parse_created
from tests.support.replay import MADE_CALL_ID, parse_frames
from tests.support.schema import validate, validate_completion_chunk

MODEL = "llama3.2"
USER = {"role": "user", "content": "Hi"}
CHAT: dict[str, Any] = {"model": "client-model", "messages": [USER]}
NATIVE_CHAT: dict[str, Any] = {"model": MODEL, "messages": [USER], "stream": False}
COMPLETION: dict[str, Any] = {"model": "client-model", "prompt": "Once upon a time"}
NATIVE_COMPLETION: dict[str, Any] = {
    "model": MODEL,
    "prompt": "Once upon a time",
    "raw": True,
    "think": False,
    "stream": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}
OLLAMA_WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {"type": "function", "function": {"name": "time"}}
OLLAMA_TIME = {
    "type": "function",
    "function": {"name": "time", "parameters": {"type": "object", "properties": {}}},
}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
PNG = "iVBORw0KGgo="


def build(fields: dict[str, Any], endpoint: Endpoint = "chat") -> dict[str, Any]:
    base = CHAT if endpoint == "chat" else COMPLETION
    request = parse_request(orjson.dumps({**base, **fields}), endpoint)
    body = upstream_request(DIALECTS["ollama"], request, RequestOptions(MODEL))
    result: dict[str, Any] = orjson.loads(body)
    return result


NEUTRAL = {
    "user": "u-1",
    "metadata": {"a": "b"},
    "store": False,
    "service_tier": "default",
    "stream_options": {"include_usage": True},
    "prompt_cache_key": "k",
    "n": 1,
    "logprobs": False,
    "parallel_tool_calls": True,
}
CHAT_TRANSLATED = [
    ({}, {}),
    ({"stream": True}, {"stream": True}),
    ({"max_tokens": 64}, {"options": {"num_predict": 64}}),
    ({"max_completion_tokens": 32}, {"options": {"num_predict": 32}}),
    (
        {
            "temperature": 0.1,
            "top_p": 0.9,
            "seed": 3,
            "frequency_penalty": 0.2,
            "presence_penalty": 0.4,
        },
        {
            "options": {
                "temperature": 0.1,
                "top_p": 0.9,
                "seed": 3,
                "frequency_penalty": 0.2,
                "presence_penalty": 0.4,
            }
        },
    ),
    ({"stop": "\n\n"}, {"options": {"stop": ["\n\n"]}}),
    ({"response_format": {"type": "text"}}, {}),
    ({"response_format": {"type": "json_object"}}, {"format": "json"}),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": SCHEMA},
            }
        },
        {"format": SCHEMA},
    ),
    ({"reasoning_effort": "none"}, {"think": False}),
    ({"reasoning_effort": "minimal"}, {"think": "low"}),
    ({"reasoning_effort": "medium"}, {"think": "medium"}),
    ({"reasoning_effort": "high"}, {"think": "high"}),
    ({"reasoning_effort": "xhigh"}, {"think": "max"}),
    ({"tools": [WEATHER, TIME]}, {"tools": [OLLAMA_WEATHER, OLLAMA_TIME]}),
    ({"tools": [WEATHER], "tool_choice": "auto"}, {"tools": [OLLAMA_WEATHER]}),
    ({"tools": [WEATHER], "tool_choice": "none"}, {}),  # no tool offered, none called
    (
        {
            "tools": [WEATHER, TIME],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "time"}}],
                },
            },
        },
        {"tools": [OLLAMA_TIME]},
    ),
    ({"logprobs": True}, {"logprobs": True}),
    ({"logprobs": True, "top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
    (NEUTRAL, {}),
    # Ollama's own fields: passed on; its options merged with the translated ones.
    ({"keep_alive": "10m"}, {"keep_alive": "10m"}),
    (
        {"max_tokens": 10, "options": {"num_ctx": 8192}},
        {"options": {"num_predict": 10, "num_ctx": 8192}},
    ),
]


@pytest.mark.parametrize(("fields", "expected"), CHAT_TRANSLATED)
def test_chat_request_fields(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build(fields) == {**NATIVE_CHAT, **expected}


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
}
MESSAGES = [
    ([{"role": "system", "content": "Be brief"}], [{"role": "system", "content": "Be brief"}]),
    ([{"role": "developer", "content": "Be brief"}], [{"role": "system", "content": "Be brief"}]),
    (
        [
            {
                "role": "system",
                "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief"}],
            }
        ],
        [{"role": "system", "content": "Be brief"}],
    ),
    (
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            }
        ],
        [{"role": "user", "content": "What is this?", "images": [PNG]}],
    ),
    (
        [{"role": "assistant", "content": None, "refusal": "I can't"}],
        [{"role": "assistant", "content": "I can't"}],
    ),
    (
        [
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Paris, then.",
                "tool_calls": [CALL],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "20 C"},
            {"role": "tool", "tool_call_id": "call_unknown", "content": "?"},
        ],
        [
            {
                "role": "assistant",
                "content": "",
                "thinking": "Paris, then.",
                "tool_calls": [
                    {
                        "function": {"name": "weather", "arguments": {"city": "Paris"}},
                        "id": "call_1",
                    }
                ],
            },
            {"role": "tool", "content": "20 C", "tool_call_id": "call_1", "tool_name": "weather"},
            {"role": "tool", "content": "?", "tool_call_id": "call_unknown"},
        ],
    ),
]


@pytest.mark.parametrize(("messages", "expected"), MESSAGES)
def test_messages(messages: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert build({"messages": messages})["messages"] == expected


COMPLETION_TRANSLATED = [
    ({}, {}),
    ({"prompt": ["Once upon a time"]}, {}),
    ({"stream": True}, {"stream": True}),
    ({"max_tokens": 16, "stop": ["."]}, {"options": {"num_predict": 16, "stop": ["."]}}),
    ({"temperature": 0, "seed": 1}, {"options": {"temperature": 0, "seed": 1}}),
    # With a suffix, the model's template builds the fill-in-the-middle prompt: not raw.
    ({"suffix": "The end."}, {"suffix": "The end.", "raw": None}),
    ({"echo": False, "n": 1, "best_of": 1, "user": "u", "stream_options": None}, {}),
]


@pytest.mark.parametrize(("fields", "expected"), COMPLETION_TRANSLATED)
def test_completion_request_fields(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    want = {
        key: value for key, value in {**NATIVE_COMPLETION, **expected}.items() if value is not None
    }
    assert build(fields, "completions") == want


REFUSED: list[tuple[Endpoint, dict[str, Any], str, str]] = [
    ("chat", {"n": 3}, "n", "unsupported_parameter"),
    ("chat", {"logit_bias": {"1": 1}}, "logit_bias", "unsupported_parameter"),
    ("chat", {"parallel_tool_calls": False}, "parallel_tool_calls", "unsupported_parameter"),
    ("chat", {"modalities": ["audio"]}, "modalities", "unsupported_parameter"),
    ("chat", {"audio": {"voice": "alloy"}}, "audio", "unsupported_parameter"),
    ("chat", {"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ("chat", {"function_call": "none"}, "function_call", "unsupported_parameter"),
    ("chat", {"web_search_options": {}}, "web_search_options", "unsupported_parameter"),
    ("chat", {"verbosity": "high"}, "verbosity", "unsupported_parameter"),
    ("chat", {"moderation": {"model": "m"}}, "moderation", "unsupported_parameter"),
    (
        "chat",
        {"tools": [WEATHER], "tool_choice": "required"},
        "tool_choice",
        "unsupported_parameter",
    ),
    (
        "chat",
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "weather"}}},
        "tool_choice",
        "unsupported_parameter",
    ),
    ("chat", {"reasoning_effort": "extreme"}, "reasoning_effort", "invalid_value"),
    ("chat", {"top_logprobs": 2}, "top_logprobs", "invalid_value"),
    (
        "chat",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
                    ],
                }
            ]
        },
        "messages[0].content[0].image_url.url",
        "unsupported_parameter",
    ),
    (
        "chat",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "file:///a.png"}}],
                }
            ]
        },
        "messages[0].content[0].image_url.url",
        "invalid_value",
    ),
    (
        "chat",
        {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]},
        "messages[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        "chat",
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "w", "arguments": "[1]"}}],
                }
            ]
        },
        "messages[0].tool_calls[0].function.arguments",
        "invalid_value",
    ),
    (
        "chat",
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "w", "arguments": "{"}}],
                }
            ]
        },
        "messages[0].tool_calls[0].function.arguments",
        "invalid_value",
    ),
    (
        "chat",
        {"messages": [{"role": "tool", "content": "x"}]},
        "messages[0].tool_call_id",
        "invalid_type",
    ),
    ("chat", {"options": "fast"}, "options", "invalid_type"),
    (
        "chat",
        {"temperature": 0.5, "options": {"temperature": 1}},
        "options.temperature",
        "invalid_value",
    ),
    ("chat", {"reasoning_effort": "low", "think": True}, "think", "invalid_value"),
    (
        "chat",
        {"response_format": {"type": "json_object"}, "format": "json"},
        "format",
        "invalid_value",
    ),
    ("completions", {"prompt": ["a", "b"]}, "prompt", "unsupported_parameter"),
    ("completions", {"prompt": [1, 2, 3]}, "prompt", "unsupported_parameter"),
    ("completions", {"n": 2}, "n", "unsupported_parameter"),
    ("completions", {"best_of": 3}, "best_of", "unsupported_parameter"),
    ("completions", {"logprobs": 0}, "logprobs", "unsupported_parameter"),
    ("completions", {"logprobs": 5}, "logprobs", "unsupported_parameter"),
    ("completions", {"echo": True}, "echo", "unsupported_parameter"),
    ("completions", {"suffix": 3}, "suffix", "invalid_type"),
]


@pytest.mark.parametrize(("endpoint", "fields", "param", "code"), REFUSED)
def test_refusals(endpoint: Endpoint, fields: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        build(fields, endpoint)
    status, body = to_openai_error(info.value)
    assert status == 400 and (body["error"]["param"], body["error"]["code"]) == (param, code)


# -- streams ----------------------------------------------------------------------------

T0 = "2025-01-22T11:22:42.180546Z"


def stream(lines: list[dict[str, Any]], endpoint: Endpoint = "chat", **ctx: Any) -> list[Any]:
    context = RequestContext(
        endpoint, "m", 1_700_000_000, include_usage=True, dialect="ollama", **ctx
    )
    normalizer = StreamNormalizer(context)
    decoder = NDJSONDecoder()
    body = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    out = [frame for event in decoder.feed(body) for frame in normalizer.feed(event)]
    out += [frame for event in decoder.close() for frame in normalizer.feed(event)]
    out += normalizer.finish()
    payloads = parse_frames(b"".join(out))
    for payload in payloads:
        if isinstance(payload, dict) and "error" not in payload:
            if endpoint == "chat":
                validate(payload, "CreateChatCompletionStreamResponse")
            else:
                validate_completion_chunk(payload)
    return payloads


def line(message: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "qwen3", "created_at": T0}
    if message is not None:
        out["message"] = {"role": "assistant", "content": "", **message}
    out["done"] = False
    out.update(fields)
    return out


def last(message: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    final = {"done": True, "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 30}
    return line(message or {}, **{**final, **fields})


def _choices(payloads: list[Any]) -> list[dict[str, Any]]:
    return [c for p in payloads if isinstance(p, dict) for c in p.get("choices", [])]


def _joined(payloads: list[Any], key: str) -> str:
    return "".join(c["delta"].get(key) or "" for c in _choices(payloads))


def _finish(payloads: list[Any]) -> object:
    (reason,) = [c["finish_reason"] for c in _choices(payloads) if c["finish_reason"]]
    return reason


def test_thinking_then_text() -> None:
    payloads = stream(
        [
            line({"thinking": "The user"}),
            line({"thinking": " greets."}),
            line({"content": "Hello!"}),
            last(),
        ]
    )
    assert _joined(payloads, "reasoning_content") == "The user greets."
    assert _joined(payloads, "content") == "Hello!"
    assert payloads[-2]["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 30,
        "total_tokens": 42,
    }
    assert {p["created"] for p in payloads if isinstance(p, dict)} == {1737544962}


def test_tool_calls_are_numbered_across_lines_with_ids_made_up() -> None:
    weather = {"function": {"name": "weather", "arguments": {"city": "Paris", "unit": "C"}}}
    payloads = stream(
        [
            line(
                {
                    "tool_calls": [
                        weather,
                        {"function": {"index": 1, "name": "time", "arguments": {}}},
                    ]
                }
            ),
            line(
                {
                    "tool_calls": [
                        {"id": "call_given", "function": {"name": "date", "arguments": {}}}
                    ]
                }
            ),
            last(),
        ]
    )
    calls = [call for c in _choices(payloads) for call in c["delta"].get("tool_calls", [])]
    assert [(c["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "weather", '{"city":"Paris","unit":"C"}'),
        (1, "time", "{}"),
        (2, "date", "{}"),
    ]
    assert MADE_CALL_ID.match(calls[0]["id"]) and MADE_CALL_ID.match(calls[1]["id"])
    assert calls[2]["id"] == "call_given"
    assert _finish(payloads) == "tool_calls"  # Ollama says stop


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        ({"done_reason": "length"}, "length"),
        ({"done_reason": "load"}, "stop"),
        ({"done_reason": None}, "stop"),  # servers before done_reason: the normalizer decides
    ],
)
def test_done_reasons(done: dict[str, Any], expected: str) -> None:
    final = {k: v for k, v in last(**done).items() if v is not None}
    assert _finish(stream([line({"content": "a"}), final])) == expected


def test_a_missing_count_is_zero() -> None:
    final = last()
    del final["prompt_eval_count"]  # all of the prompt came from Ollama's cache
    assert stream([line({"content": "a"}), final])[-2]["usage"]["prompt_tokens"] == 0


def test_an_error_line_ends_the_stream() -> None:
    payloads = stream(
        [line({"content": "Par"}), {"error": "an error was encountered while running the model"}]
    )
    assert _joined(payloads, "content") == "Par"
    assert payloads[-1]["error"]["message"] == "an error was encountered while running the model"
    assert payloads[-1]["error"]["type"] == "upstream_error"


def test_a_stream_without_its_last_line_was_cut_short() -> None:
    payloads = stream([line({"content": "Par"})])
    assert payloads[-1]["error"]["message"] == "The upstream stream was cut short"


def test_logprobs_are_openai_shaped() -> None:
    logprobs = [
        {
            "token": "Hi",
            "logprob": -0.1,
            "bytes": [72, 105],
            "top_logprobs": [{"token": "Hi", "logprob": -0.1}, {"token": "Hey", "logprob": -2.3}],
        }
    ]
    payloads = stream([line({"content": "Hi"}, logprobs=logprobs), last()])
    (content,) = [c["logprobs"]["content"] for c in _choices(payloads) if c["logprobs"]]
    assert content == [
        {
            "token": "Hi",
            "logprob": -0.1,
            "bytes": [72, 105],
            "top_logprobs": [
                {"token": "Hi", "logprob": -0.1, "bytes": None},
                {"token": "Hey", "logprob": -2.3, "bytes": None},
            ],
        }
    ]


def test_generate_stream_for_completions() -> None:
    # /api/generate lines, as docs/api.md shows them: the text in "response".
    lines = [
        {
            "model": "llama3.2",
            "created_at": "2023-08-04T08:52:19.385406455-07:00",
            "response": " there",
            "done": False,
        },
        {
            "model": "llama3.2",
            "created_at": "2023-08-04T08:52:19.4Z",
            "response": " was",
            "done": False,
        },
        {
            "model": "llama3.2",
            "created_at": "2023-08-04T19:22:45.499127Z",
            "response": "",
            "done": True,
            "done_reason": "length",
            "context": [1, 2, 3],
            "prompt_eval_count": 26,
            "eval_count": 2,
        },
    ]
    payloads = stream(lines, "completions")
    chunks = [p for p in payloads if isinstance(p, dict)]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == " there was"
    assert chunks[0]["created"] == 1691164339  # 15:52:19 UTC
    assert _finish(payloads) == "length"
    assert chunks[-1]["usage"] == {"prompt_tokens": 26, "completion_tokens": 2, "total_tokens": 28}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-09-15T01:31:49.502405293Z", 1726363909),
        ("2023-08-04T08:52:19.385406455-07:00", 1691164339),
        ("2025-01-22T11:22:42Z", 1737544962),
        ("2025-01-22T11:22:42", None),  # no offset: no instant
        ("yesterday", None),
        (1737544962, None),
        (None, None),
    ],
)
def test_parse_created(value: object, expected: int | None) -> None:
    assert parse_created(value) == expected


# -- whole answers ----------------------------------------------------------------------


def whole(body: dict[str, Any], endpoint: Endpoint = "chat") -> dict[str, Any]:
    context = RequestContext(endpoint, "m", 1_700_000_000, dialect="ollama")
    result: dict[str, Any] = orjson.loads(normalize_response(orjson.dumps(body), context).body)
    return result


def test_whole_tool_calls_and_thinking() -> None:
    message = {
        "role": "assistant",
        "content": "",
        "thinking": "Weather, then.",
        "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}],
    }
    body = whole(last(message=message))
    choice = body["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert MADE_CALL_ID.match(call["id"])
    assert call["function"] == {"name": "weather", "arguments": '{"city":"Paris"}'}
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning_content"] == "Weather, then."
    assert choice["finish_reason"] == "tool_calls"
    assert body["usage"]["total_tokens"] == 42


def test_whole_generate() -> None:
    body = {
        "model": "llama3.2",
        "created_at": "2023-08-04T19:22:45.499127Z",
        "response": "The sky is blue because of Rayleigh scattering.",
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 26,
        "eval_count": 10,
    }
    answer = whole(body, "completions")
    assert answer["choices"][0]["text"] == "The sky is blue because of Rayleigh scattering."
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["created"] == 1691176965
    assert answer["usage"] == {"prompt_tokens": 26, "completion_tokens": 10, "total_tokens": 36}


def test_whole_error_body() -> None:
    with pytest.raises(UpstreamError) as info:
        whole({"error": "model 'llama9' not found"})
    assert info.value.message == "model 'llama9' not found"
