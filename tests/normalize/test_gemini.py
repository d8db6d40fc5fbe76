"""The Gemini dialect: OpenAI requests to generateContent bodies, and Gemini's answers, streamed
and whole, through the normalizer to canonical objects (docs/providers/gemini.md).

Expected request bodies follow Google's generateContent reference field by field; the
fixtures' goldens are replayed by test_normalize_fixtures.py, these are the cases around them.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, UpstreamStatusError, to_openai_error
from proxy.core.framing import JSONArrayDecoder
from proxy.core.request import parse_request
from proxy.core.sse import Event, SSEDecoder
from proxy.http.upstream import status_error
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.dialects import DIALECTS, RequestOptions
from proxy.normalize.dialects.gemini_messages import SKIP_SIGNATURE
from proxy.normalize.toolcalls import PENDING_MAX
from tests.support.replay import FIXTURES, MADE_CALL_ID, parse_frames
from tests.support.schema import validate

GEMINI = DIALECTS["gemini"]
CREATED = 1_600_000_000
HI = [{"role": "user", "content": "Hi"}]
USER = [{"role": "user", "parts": [{"text": "Hi"}]}]


def build(body: dict[str, Any], model: str = "gemini-2.5-flash", **options: Any) -> Any:
    request = parse_request(orjson.dumps({"model": "client-model", "messages": HI, **body}), "chat")
    assert GEMINI.request is not None
    return GEMINI.request(request, RequestOptions(model, **options))


def refusal(body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        build(body)
    assert info.value.http_status == 400
    return info.value


# =========================================================================== requests

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
}
PNG = "iVBORw0KGgo="
REQUESTS = [
    ("minimal", {}, {"contents": USER}),
    (
        "system and developer messages",
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
                *HI,
            ]
        },
        {
            "contents": USER,
            "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Use French."}]},
        },
    ),
    (
        "roles user and model; consecutive turns share a content",
        {
            "messages": [
                *HI,
                {"role": "user", "content": [{"type": "text", "text": "there"}]},
                {"role": "user", "content": ""},  # empty text: no part (Gemini refuses one)
                {"role": "user", "content": [{"type": "text", "text": ""}]},
                {"role": "assistant", "content": "Hello"},
                {"role": "assistant", "content": None},  # nothing: no part
                {"role": "user", "content": "Bye"},
            ]
        },
        {
            "contents": [
                {"role": "user", "parts": [{"text": "Hi"}, {"text": "there"}]},
                {"role": "model", "parts": [{"text": "Hello"}]},
                {"role": "user", "parts": [{"text": "Bye"}]},
            ]
        },
    ),
    (
        "assistant text and refusal parts",
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "refusal", "refusal": "b"},
                    ],
                },
            ]
        },
        {"contents": [*USER, {"role": "model", "parts": [{"text": "a"}, {"text": "b"}]}]},
    ),
    (
        "sampling fields",
        {
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 40,
            "seed": 7,
            "presence_penalty": 0.1,
            "frequency_penalty": -0.2,
        },
        {
            "contents": USER,
            "generationConfig": {
                "temperature": 0.5,
                "topP": 0.9,
                "topK": 40,
                "presencePenalty": 0.1,
                "frequencyPenalty": -0.2,
                "seed": 7,
            },
        },
    ),
    (
        "max_tokens",
        {"max_tokens": 100},
        {"contents": USER, "generationConfig": {"maxOutputTokens": 100}},
    ),
    (
        "max_completion_tokens wins over max_tokens",
        {"max_tokens": 100, "max_completion_tokens": 50},
        {"contents": USER, "generationConfig": {"maxOutputTokens": 50}},
    ),
    ("n", {"n": 3}, {"contents": USER, "generationConfig": {"candidateCount": 3}}),
    ("n of 1", {"n": 1}, {"contents": USER}),
    (
        "stop string",
        {"stop": "END"},
        {"contents": USER, "generationConfig": {"stopSequences": ["END"]}},
    ),
    (
        "stop list",
        {"stop": ["a", "b"]},
        {"contents": USER, "generationConfig": {"stopSequences": ["a", "b"]}},
    ),
    ("response_format text", {"response_format": {"type": "text"}}, {"contents": USER}),
    (
        "response_format json_object",
        {"response_format": {"type": "json_object"}},
        {"contents": USER, "generationConfig": {"responseMimeType": "application/json"}},
    ),
    (
        "response_format json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "city", "strict": True, "schema": {"type": "object"}},
            }
        },
        {
            "contents": USER,
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": {"type": "object"},
            },
        },
    ),
    (
        "logprobs",
        {"logprobs": True},
        {"contents": USER, "generationConfig": {"responseLogprobs": True}},
    ),
    (
        "top_logprobs",
        {"logprobs": True, "top_logprobs": 5},
        {"contents": USER, "generationConfig": {"responseLogprobs": True, "logprobs": 5}},
    ),
    (
        "reasoning_effort: a budget for Gemini 2.5",
        {"reasoning_effort": "low"},
        {
            "contents": USER,
            "generationConfig": {
                "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": True}
            },
        },
    ),
    (
        "reasoning_effort none",
        {"reasoning_effort": "none"},
        {"contents": USER, "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}},
    ),
    (
        "tools",
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "description": "The weather",
                        "parameters": {"type": "object", "additionalProperties": False},
                        "strict": True,
                    },
                },
                {"type": "function", "function": {"name": "now"}},
            ]
        },
        {
            "contents": USER,
            "tools": [
                {
                    "functionDeclarations": [
                        {
                            "name": "weather",
                            "description": "The weather",
                            "parametersJsonSchema": {
                                "type": "object",
                                "additionalProperties": False,
                            },
                        },
                        {"name": "now"},
                    ]
                }
            ],
        },
    ),
    (
        "image as a data URL",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is it?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"},
                        },
                    ],
                }
            ]
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"text": "What is it?"},
                        {"inlineData": {"mimeType": "image/png", "data": PNG}},
                    ],
                }
            ]
        },
    ),
    (
        "images by URL: Gemini fetches them",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "https://x.test/a.JPG"}},
                        {"type": "image_url", "image_url": {"url": "http://x.test/img?id=1"}},
                    ],
                }
            ]
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"fileData": {"fileUri": "https://x.test/a.JPG", "mimeType": "image/jpeg"}},
                        {"fileData": {"fileUri": "http://x.test/img?id=1"}},
                    ],
                }
            ]
        },
    ),
    (
        "a percent-encoded data URL is sent as base64",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/svg+xml,%3Csvg%2F%3E"},
                        }
                    ],
                }
            ]
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [{"inlineData": {"mimeType": "image/svg+xml", "data": "PHN2Zy8+"}}],
                }
            ]
        },
    ),
    (
        "audio and files",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "AAA=", "format": "mp3"}},
                        {
                            "type": "file",
                            "file": {
                                "file_data": "data:application/pdf;base64,JVBE",
                                "filename": "a",
                            },
                        },
                        {"type": "file", "file": {"file_data": "JVBE", "filename": "b.pdf"}},
                    ],
                }
            ]
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"inlineData": {"mimeType": "audio/mp3", "data": "AAA="}},
                        {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}},
                        {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}},
                    ],
                }
            ]
        },
    ),
    (
        "tool calls and their results; the first call of a step gets the skip signature",
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": "Looking.",
                    "tool_calls": [
                        CALL,
                        {**CALL, "id": "call_2", "function": {"name": "time", "arguments": ""}},
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
                {
                    "role": "tool",
                    "tool_call_id": "call_2",
                    "content": [{"type": "text", "text": "noon"}],
                },
                {"role": "user", "content": "Thanks"},
            ]
        },
        {
            "contents": [
                *USER,
                {
                    "role": "model",
                    "parts": [
                        {"text": "Looking."},
                        {
                            "functionCall": {"name": "weather", "args": {"city": "Paris"}},
                            "thoughtSignature": SKIP_SIGNATURE,
                        },
                        {"functionCall": {"name": "time", "args": {}}},
                    ],
                },
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "weather", "response": {"output": "Sunny"}}},
                        {"functionResponse": {"name": "time", "response": {"output": "noon"}}},
                        {"text": "Thanks"},
                    ],
                },
            ]
        },
    ),
    (
        "a client's own thought signature is kept",
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {**CALL, "extra_content": {"google": {"thought_signature": "c2ln"}}}
                    ],
                },
            ]
        },
        {
            "contents": [
                *USER,
                {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"name": "weather", "args": {"city": "Paris"}},
                            "thoughtSignature": "c2ln",
                        }
                    ],
                },
            ]
        },
    ),
    (
        "fields that change nothing in the answer are dropped",
        {
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "u",
            "metadata": {"a": "b"},
            "store": True,
            "service_tier": "auto",
            "parallel_tool_calls": True,
            "modalities": ["text"],
            "verbosity": "medium",  # OpenAI's default
            "prediction": {"type": "content", "content": "x"},  # only a speed-up
            "logit_bias": {},
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "logprobs": False,
            "top_logprobs": 0,
        },
        {"contents": USER},
    ),
    (
        "json_schema without a schema asks for any JSON",
        {"response_format": {"type": "json_schema"}},
        {"contents": USER, "generationConfig": {"responseMimeType": "application/json"}},
    ),
    (
        "Gemini's own fields pass on; a generationConfig of its own is merged",
        {
            "temperature": 1,
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
            "generationConfig": {"responseModalities": ["TEXT"]},
        },
        {
            "contents": USER,
            "generationConfig": {"temperature": 1, "responseModalities": ["TEXT"]},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        },
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in REQUESTS], ids=[c[0] for c in REQUESTS]
)
def test_request(body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build(body) == expected


TOOLS = [
    {"type": "function", "function": {"name": "weather"}},
    {"type": "function", "function": {"name": "now"}},
]
TOOL_CHOICES = [
    ("auto", {"mode": "AUTO"}),
    ("none", {"mode": "NONE"}),
    ("required", {"mode": "ANY"}),
    (
        {"type": "function", "function": {"name": "now"}},
        {"mode": "ANY", "allowedFunctionNames": ["now"]},
    ),
    (
        {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": TOOLS[:1]}},
        {"mode": "ANY", "allowedFunctionNames": ["weather"]},
    ),
    (
        {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": TOOLS}},
        {"mode": "VALIDATED", "allowedFunctionNames": ["weather", "now"]},
    ),
]


@pytest.mark.parametrize(
    ("choice", "config"), TOOL_CHOICES, ids=[str(c[0])[:40] for c in TOOL_CHOICES]
)
def test_tool_choice(choice: object, config: dict[str, Any]) -> None:
    body = build({"tools": TOOLS, "tool_choice": choice})
    assert body["toolConfig"] == {"functionCallingConfig": config}


@pytest.mark.parametrize(
    ("model", "effort", "thinking"),
    [
        ("gemini-2.5-pro", "high", {"thinkingBudget": 24576, "includeThoughts": True}),
        ("gemini-2.5-flash", "minimal", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("gemini-3-pro-preview", "low", {"thinkingLevel": "low", "includeThoughts": True}),
        ("gemini-3.1-flash", "medium", {"thinkingLevel": "medium", "includeThoughts": True}),
        (
            "models/gemini-3-flash-preview",
            "high",
            {"thinkingLevel": "high", "includeThoughts": True},
        ),
        # An alias tells no generation: the budget, which Gemini 3 takes too.
        ("gemini-flash-latest", "low", {"thinkingBudget": 2048, "includeThoughts": True}),
    ],
)
def test_thinking_config(model: str, effort: str, thinking: dict[str, Any]) -> None:
    body = build({"reasoning_effort": effort}, model)
    assert body["generationConfig"] == {"thinkingConfig": thinking}


def test_thinking_budgets_come_from_the_model_config() -> None:
    budgets = {"minimal": 1, "low": 2, "medium": 3, "high": 4}
    body = build({"reasoning_effort": "medium"}, thinking_budgets=budgets)
    assert body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 3


REFUSALS = [
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "unsupported_parameter"),
    ({"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ({"function_call": "auto"}, "function_call", "unsupported_parameter"),
    ({"web_search_options": {}}, "web_search_options", "unsupported_parameter"),
    ({"logit_bias": {"50256": -100}}, "logit_bias", "unsupported_parameter"),
    ({"modalities": ["text", "audio"]}, "modalities", "unsupported_parameter"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls", "unsupported_parameter"),
    ({"verbosity": "low"}, "verbosity", "unsupported_parameter"),
    # Refused by every native API alike: OpenAI's own features, whatever their value.
    ({"temperature": "hot"}, "temperature", "invalid_type"),
    ({"seed": 1.5}, "seed", "invalid_type"),
    ({"stop": 5}, "stop", "invalid_type"),
    ({"top_logprobs": 3}, "top_logprobs", "invalid_value"),
    ({"logprobs": "yes"}, "logprobs", "invalid_type"),
    ({"response_format": {"type": "grammar"}}, "response_format.type", "unsupported_parameter"),
    ({"reasoning_effort": "xhigh"}, "reasoning_effort", "invalid_value"),
    ({"reasoning_effort": 3}, "reasoning_effort", "invalid_type"),
    (
        {"tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "tools[0].type",
        "unsupported_parameter",
    ),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "invalid_type"),
    ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
    (
        {"tools": TOOLS, "tool_choice": {"type": "custom", "custom": {"name": "x"}}},
        "tool_choice.type",
        "unsupported_parameter",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "x"}}},
        "tool_choice.allowed_tools.mode",
        "invalid_value",
    ),
    (
        {"messages": [{"role": "function", "name": "f", "content": "x"}]},
        "messages[0].role",
        "unsupported_parameter",
    ),
    ({"messages": [{"role": "system", "content": "Only me"}]}, "messages", "invalid_value"),
    (
        {
            "messages": [
                {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ]
        },
        "messages[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "video", "video": {}}]}]},
        "messages[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "ftp://x/a.png"}}],
                }
            ]
        },
        "messages[0].content[0].image_url.url",
        "invalid_value",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png"}}],
                }
            ]
        },
        "messages[0].content[0].image_url.url",
        "invalid_value",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "A", "format": "flac"}}
                    ],
                }
            ]
        },
        "messages[0].content[0].input_audio.format",
        "invalid_value",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}
            ]
        },
        "messages[0].content[0].file.file_id",
        "unsupported_parameter",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "file", "file": {"file_data": "JVBE", "filename": "a.bin"}}
                    ],
                }
            ]
        },
        "messages[0].content[0].file.file_data",
        "invalid_value",
    ),
    (
        {"messages": [*HI, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
        "messages[1].tool_call_id",
        "invalid_value",
    ),
    (
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{"}}],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "invalid_value",
    ),
    (
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1]"}}],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "invalid_value",
    ),
    (
        {"messages": [*HI, {"role": "assistant", "audio": {"id": "audio_1"}}]},
        "messages[1].audio",
        "unsupported_parameter",
    ),
    ({"contents": [{"parts": [{"text": "x"}]}]}, "contents", "invalid_value"),
    (
        {"temperature": 1, "generationConfig": {"temperature": 2}},
        "generationConfig.temperature",
        "invalid_value",
    ),
    ({"toolConfig": ["x"]}, "toolConfig", "invalid_type"),
    (
        {
            "messages": [{"role": "system", "content": "Be brief."}, *HI],
            "systemInstruction": {"parts": [{"text": "Be kind."}]},
        },
        "systemInstruction",
        "invalid_value",
    ),
]


@pytest.mark.parametrize(
    ("body", "param", "code"), REFUSALS, ids=[r[1] + ":" + r[2] for r in REFUSALS]
)
def test_refusal(body: dict[str, Any], param: str, code: str) -> None:
    error = refusal(body)
    assert (error.param, error.code) == (param, code)
    assert param in error.message


def test_a_tool_message_answers_only_an_earlier_call() -> None:
    # The call comes after the tool message: no name is known for it when it is read.
    messages: list[dict[str, Any]] = [
        *HI,
        {"role": "tool", "tool_call_id": "call_1", "content": "x"},
    ]
    messages.append({"role": "assistant", "tool_calls": [CALL]})
    assert refusal({"messages": messages}).param == "messages[1].tool_call_id"


def test_completions_are_not_served() -> None:
    assert "completions" not in GEMINI.paths
    request = parse_request(b'{"model": "m", "prompt": "Hi"}', "completions")
    assert GEMINI.request is not None
    with pytest.raises(InvalidRequest):
        GEMINI.request(request, RequestOptions("gemini-2.5-flash"))


def test_auth_and_paths() -> None:
    assert GEMINI.auth("k3y") == {"x-goog-api-key": "k3y"}
    assert GEMINI.paths["chat"] == "/v1beta/models/{model}:generateContent"
    assert GEMINI.stream_paths["chat"] == "/v1beta/models/{model}:streamGenerateContent?alt=sse"
    assert GEMINI.json_array_stream and GEMINI.native


# =========================================================================== streams


def context(**overrides: Any) -> RequestContext:
    values: dict[str, Any] = {
        "endpoint": "chat",
        "model": "client-model",
        "created": CREATED,
        "include_usage": True,
        "dialect": "gemini",
    }
    return RequestContext(**{**values, **overrides})


def run(events: list[dict[str, Any]], **overrides: Any) -> tuple[list[Any], StreamNormalizer]:
    normalizer = StreamNormalizer(context(**overrides))
    out: list[bytes] = []
    for payload in events:
        out += normalizer.feed(Event(orjson.dumps(payload)))
    out += normalizer.finish()
    frames = parse_frames(b"".join(out))
    for frame in frames:
        if isinstance(frame, dict) and "error" not in frame:
            validate(frame, "CreateChatCompletionStreamResponse")
    return frames, normalizer


def event(
    *parts: dict[str, Any], index: int | None = 0, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}}
    if index is not None:
        candidate["index"] = index
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "responseId": "r1", **extra}


def deltas(frames: list[Any], key: str, index: int = 0) -> str:
    return "".join(
        choice["delta"].get(key) or ""
        for frame in frames
        if isinstance(frame, dict)
        for choice in frame.get("choices", [])
        if choice["index"] == index
    )


def finishes(frames: list[Any]) -> dict[int, str]:
    return {
        choice["index"]: choice["finish_reason"]
        for frame in frames
        if isinstance(frame, dict)
        for choice in frame.get("choices", [])
        if choice["finish_reason"] is not None
    }


def calls(frames: list[Any], index: int = 0) -> list[dict[str, Any]]:
    made: list[dict[str, Any]] = []
    for frame in frames:
        for choice in frame.get("choices", []) if isinstance(frame, dict) else ():
            for fragment in (
                choice["delta"].get("tool_calls", []) if choice["index"] == index else ()
            ):
                if "id" in fragment:
                    made.append({"id": fragment["id"], **fragment["function"]})
                else:
                    made[fragment["index"]]["arguments"] += fragment["function"]["arguments"]
    return made


def usage_of(frames: list[Any]) -> dict[str, Any]:
    return next(f["usage"] for f in frames if isinstance(f, dict) and "usage" in f)


def decoded(name: str, decoder: SSEDecoder | JSONArrayDecoder) -> list[Any]:
    """The adapter's chunks for a fixture's events."""
    events = decoder.feed((FIXTURES / name).read_bytes()) + decoder.close()
    assert GEMINI.adapter is not None
    adapt = GEMINI.adapter(context())
    return [adapt(orjson.loads(e.data)) for e in events]


def test_sse_and_json_array_give_the_same_chunks() -> None:
    sse = decoded("gemini.generate-content.stream.sse", SSEDecoder())
    array = decoded("gemini.generate-content.stream.json-array.json", JSONArrayDecoder())
    assert len(sse) == 3 and sse == array


def test_text_thoughts_and_unknown_parts() -> None:
    frames, _ = run(
        [
            event({"text": "Let me think. ", "thought": True}, {"text": "Hmm.", "thought": True}),
            event(
                {"thoughtSignature": "c2ln"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
                {"executableCode": {"language": "PYTHON", "code": "1"}},
                {"text": "Hello"},
                {"text": ""},
                "not a part",  # type: ignore[arg-type]
                modelVersion="gemini-3",
                someFieldFromTheFuture={"x": 1},
            ),
            event({"text": " world"}, finish="STOP"),
        ]
    )
    assert deltas(frames, "reasoning_content") == "Let me think. Hmm."
    assert deltas(frames, "content") == "Hello world"
    assert finishes(frames) == {0: "stop"}
    assert {f["id"] for f in frames if isinstance(f, dict)} == {"r1"}
    assert {f["created"] for f in frames if isinstance(f, dict)} == {CREATED}


def test_an_event_with_nothing_to_say_makes_no_frame() -> None:
    frames, _ = run(
        [event({"text": "Hi"}), event({"text": ""}), {"responseId": "r1"}, event(finish="STOP")],
        include_usage=False,
    )
    assert len(frames) == 3  # the text, the finish, [DONE]
    assert frames[-1] == "[DONE]"


@pytest.mark.parametrize(
    ("reason", "canonical"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("SPII", "content_filter"),
        ("IMAGE_SAFETY", "content_filter"),
        ("LANGUAGE", "content_filter"),
        ("OTHER", "stop"),
        ("MALFORMED_FUNCTION_CALL", "stop"),
        ("FINISH_REASON_UNSPECIFIED", "stop"),
        ("A_REASON_FROM_THE_FUTURE", "stop"),
    ],
)
def test_finish_reasons(reason: str, canonical: str) -> None:
    frames, _ = run([event({"text": "x"}, finish=reason)])
    assert finishes(frames) == {0: canonical}


def test_usage_counts_thoughts_cache_and_tool_prompts() -> None:
    meta = {
        "promptTokenCount": 100,
        "cachedContentTokenCount": 60,
        "toolUsePromptTokenCount": 5,
        "candidatesTokenCount": 10,
        "thoughtsTokenCount": 30,
        "totalTokenCount": 145,
    }
    frames, normalizer = run([event({"text": "x"}, finish="STOP", usageMetadata=meta)])
    assert usage_of(frames) == {
        "prompt_tokens": 105,
        "completion_tokens": 40,
        "total_tokens": 145,
        "prompt_tokens_details": {"cached_tokens": 60},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    assert normalizer.usage.cached_tokens == 60 and normalizer.usage.reasoning_tokens == 30


def test_usage_without_counts_is_no_usage() -> None:
    _, normalizer = run(
        [event({"text": "abc"}, finish="STOP", usageMetadata={"trafficType": "ON_DEMAND"})]
    )
    assert normalizer.usage.source == "estimated"


def test_candidates_are_choices_and_usage_counts_once() -> None:
    def meta(n: int) -> dict[str, int]:
        return {"promptTokenCount": 4, "candidatesTokenCount": n, "totalTokenCount": 4 + n}

    events = [
        event({"text": "A"}, index=None, usageMetadata=meta(1)),  # index 0 left out
        event({"text": "B"}, index=1, usageMetadata=meta(2)),
        event({"text": "a"}, finish="STOP", index=0, usageMetadata=meta(3)),
        event({"text": "b"}, finish="MAX_TOKENS", index=1, usageMetadata=meta(4)),
    ]
    frames, normalizer = run(events, n=2)
    assert (deltas(frames, "content", 0), deltas(frames, "content", 1)) == ("Aa", "Bb")
    assert finishes(frames) == {0: "stop", 1: "length"}
    # Gemini's counts are the whole response's, however many candidates an event carries.
    assert usage_of(frames)["completion_tokens"] == 4
    assert normalizer.usage.total_tokens == 8


def test_a_blocked_prompt_is_one_empty_choice_filtered() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
    }
    frames, _ = run([blocked])
    assert finishes(frames) == {0: "content_filter"}
    assert deltas(frames, "content") == ""
    assert usage_of(frames)["prompt_tokens"] == 7


@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [
        (
            {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"},
            "upstream_error",
            502,
        ),
        (
            {"code": 429, "message": "Resource exhausted.", "status": "RESOURCE_EXHAUSTED"},
            "rate_limit_error",
            429,
        ),
    ],
)
def test_an_error_mid_stream_ends_it(error: dict[str, Any], kind: str, status: int) -> None:
    frames, normalizer = run([event({"text": "Hel"}), {"error": error}])
    assert deltas(frames, "content") == "Hel"
    assert frames[-1]["error"]["type"] == kind
    assert frames[-1]["error"]["message"] == error["message"]
    assert "[DONE]" not in frames
    assert normalizer.error is not None and normalizer.error.http_status == status


def test_a_stream_cut_short_is_an_error() -> None:
    frames, _ = run([event({"text": "Hel"})])
    assert frames[-1]["error"]["type"] == "upstream_error"
    assert "[DONE]" not in frames


def test_whole_function_calls_get_ids_once() -> None:
    frames, _ = run(
        [
            event({"functionCall": {"name": "a", "args": {"x": [1, {"y": None}]}}}),
            event(
                {"functionCall": {"name": "b", "id": "fc-7"}},  # no args: none to give
                {"text": "done"},
                finish="STOP",
            ),
        ]
    )
    made = calls(frames)
    assert [(c["name"], c["arguments"]) for c in made] == [
        ("a", '{"x":[1,{"y":null}]}'),
        ("b", "{}"),
    ]
    assert MADE_CALL_ID.match(made[0]["id"]) and made[1]["id"] == "fc-7"
    assert finishes(frames) == {0: "tool_calls"}
    assert deltas(frames, "content") == "done"


def partial(path: str, **value: Any) -> dict[str, Any]:
    return {"functionCall": {"partialArgs": [{"jsonPath": path, **value}], "willContinue": True}}


def test_partial_args_build_one_object() -> None:
    frames, _ = run(
        [
            event({"functionCall": {"name": "book", "willContinue": True}}),
            event(partial("$.city", stringValue="San ", willContinue=True)),
            event(partial("$.city", stringValue="José")),
            event(partial("$.when.day", numberValue=3)),
            event(partial("$.rooms[0].beds", numberValue=2)),
            event(partial("$.rooms[0]['sea view']", boolValue=True)),
            event(partial("$.rooms[1].beds", numberValue=1.5)),
            event(partial('$["note"]', nullValue="NULL_VALUE")),
            event(partial("$.city2", stringValue="a", willContinue=True)),
            event(partial("$.city3", stringValue="b")),  # another path: a new string
            event({"functionCall": {"partialArgs": [{"jsonPath": "$.x", "futureValue": 1}]}}),
            event({"text": ""}, finish="STOP"),
        ]
    )
    (made,) = calls(frames)
    assert made["name"] == "book"
    assert orjson.loads(made["arguments"]) == {
        "city": "San José",
        "when": {"day": 3},
        "rooms": [{"beds": 2, "sea view": True}, {"beds": 1.5}],
        "note": None,
        "city2": "a",
        "city3": "b",
    }
    assert finishes(frames) == {0: "tool_calls"}


def test_a_call_still_in_pieces_at_the_finish_is_given_whole() -> None:
    frames, _ = run(
        [
            event({"functionCall": {"name": "f", "willContinue": True}}),
            event(partial("$.a", stringValue="b"), finish="STOP"),
        ]
    )
    assert [c["arguments"] for c in calls(frames)] == ['{"a":"b"}']


@pytest.mark.parametrize(
    "piece",
    [
        {"jsonPath": "location", "stringValue": "x"},
        {"jsonPath": "$.a[", "stringValue": "x"},
        {"jsonPath": "$[0]", "stringValue": "x"},
        {"jsonPath": "$.a[2]", "stringValue": "x"},  # past the end of a new array
        {"jsonPath": "$", "stringValue": "x"},
        {"jsonPath": "$.a", "stringValue": 5},
    ],
)
def test_partial_args_that_cannot_be_put_together_end_the_stream(piece: dict[str, Any]) -> None:
    start = event({"functionCall": {"name": "f", "willContinue": True}})
    frames, _ = run([start, event({"functionCall": {"partialArgs": [piece]}})])
    assert frames[-1]["error"]["type"] == "upstream_error"
    assert "The upstream sent" in frames[-1]["error"]["message"]


def test_partial_args_are_bounded() -> None:
    start = event({"functionCall": {"name": "f", "willContinue": True}})
    big = event(partial("$.a", stringValue="x" * (PENDING_MAX + 1)))
    frames, _ = run([start, big])
    assert frames[-1]["error"]["type"] == "upstream_error"


def test_vertex_create_time_is_created() -> None:
    frames, _ = run([event({"text": "x"}, finish="STOP", createTime="2026-04-02T17:03:50.399550Z")])
    assert {f["created"] for f in frames if isinstance(f, dict)} == {1775149430}
    frames, _ = run([event({"text": "x"}, finish="STOP", createTime="yesterday")])
    assert {f["created"] for f in frames if isinstance(f, dict)} == {CREATED}


LOGPROBS = {
    "chosenCandidates": [
        {"token": "Hi", "tokenId": 1, "logProbability": -0.5},
        {"token": "!", "tokenId": 2},  # proto3 leaves out a 0
    ],
    "topCandidates": [
        {
            "candidates": [
                {"token": "Hi", "logProbability": -0.5},
                {"token": "Yo", "logProbability": -1.5},
            ]
        },
        {"candidates": [{"token": "!", "logProbability": 0}]},
    ],
}
LOGPROBS_OPENAI = {
    "content": [
        {
            "token": "Hi",
            "logprob": -0.5,
            "bytes": [72, 105],
            "top_logprobs": [
                {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                {"token": "Yo", "logprob": -1.5, "bytes": [89, 111]},
            ],
        },
        {
            "token": "!",
            "logprob": 0.0,
            "bytes": [33],
            "top_logprobs": [{"token": "!", "logprob": 0, "bytes": [33]}],
        },
    ],
    "refusal": None,
}


def test_stream_logprobs() -> None:
    moment = event({"text": "Hi!"}, finish="STOP")
    moment["candidates"][0]["logprobsResult"] = LOGPROBS
    frames, _ = run([moment])
    assert frames[0]["choices"][0]["logprobs"] == LOGPROBS_OPENAI


# =========================================================================== whole answers


def whole(body: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    result = normalize_response(orjson.dumps(body), context(include_usage=False, **overrides))
    out: dict[str, Any] = orjson.loads(result.body)
    validate(out, "CreateChatCompletionResponse")
    return out


def test_whole_answer_with_thoughts_calls_and_logprobs() -> None:
    body = {
        "candidates": [
            {
                "index": 1,
                "content": {"parts": [{"text": "B"}]},
                "finishReason": "MAX_TOKENS",
            },
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Plan.", "thought": True},
                        {"text": "Calling."},
                        {"functionCall": {"name": "weather", "args": {"city": "Paris"}}},
                        {"functionCall": {"name": "now"}},
                    ],
                },
                "finishReason": "STOP",
                "logprobsResult": LOGPROBS,
            },
        ],
        "usageMetadata": {
            "promptTokenCount": 3,
            "candidatesTokenCount": 4,
            "thoughtsTokenCount": 2,
            "totalTokenCount": 9,
        },
        "responseId": "r2",
        "createTime": "2026-04-02T17:03:50Z",
    }
    out = whole(body, n=2)
    assert (out["id"], out["created"]) == ("r2", 1775149430)
    first, second = out["choices"]
    assert first["index"] == 0 and first["finish_reason"] == "tool_calls"
    message = first["message"]
    assert (message["content"], message["reasoning_content"]) == ("Calling.", "Plan.")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("weather", '{"city":"Paris"}'),
        ("now", "{}"),
    ]
    assert all(MADE_CALL_ID.match(c["id"]) for c in message["tool_calls"])
    assert first["logprobs"] == LOGPROBS_OPENAI
    assert second == {
        "index": 1,
        "message": {"role": "assistant", "content": "B", "refusal": None},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert out["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 6,
        "total_tokens": 9,
        "completion_tokens_details": {"reasoning_tokens": 2},
    }


def test_whole_blocked_prompt() -> None:
    out = whole(
        {
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": {"promptTokenCount": 5},
        }
    )
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "content_filter" and choice["message"]["content"] is None
    assert out["usage"] == {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}
    assert out["id"].startswith("chatcmpl-")


def test_whole_error_body_in_a_200() -> None:
    body = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    with pytest.raises(UpstreamStatusError) as info:
        whole(body)
    assert (info.value.http_status, info.value.message) == (400, "API key not valid.")


def test_whole_answer_without_candidates_is_an_upstream_error() -> None:
    with pytest.raises(Exception, match="without any choice"):
        whole({"usageMetadata": {"promptTokenCount": 5}})


def test_googles_error_envelope_keeps_its_status_name_as_the_code() -> None:
    body = (FIXTURES / "gemini.error.429.json").read_bytes()
    error = status_error(429, "Too Many Requests", "application/json", body, None)
    status, answer = to_openai_error(error)
    assert status == 429
    assert answer["error"]["type"] == "rate_limit_error"
    assert answer["error"]["code"] == "RESOURCE_EXHAUSTED"
    assert answer["error"]["message"] == orjson.loads(body)["error"]["message"]


@pytest.mark.parametrize(
    ("details", "header", "seconds"),
    [
        (None, None, 34.4),  # the fixture's RetryInfo, with no Retry-After header
        (None, "2", 2.0),  # a header wins over the body
        ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}], None, 7.0),
        ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "soon"}], None, None),
        ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": 7}], None, None),
        ([{"@type": "type.googleapis.com/google.rpc.QuotaFailure"}], None, None),
        ("not a list", None, None),
        ([], None, None),
    ],
)
def test_googles_retry_info_is_the_retry_after(
    details: object, header: str | None, seconds: float | None
) -> None:
    payload = orjson.loads((FIXTURES / "gemini.error.429.json").read_bytes())
    if details is not None:
        payload["error"]["details"] = details
    error = status_error(429, "", "application/json", orjson.dumps(payload), header)
    assert error.retry_after == seconds
