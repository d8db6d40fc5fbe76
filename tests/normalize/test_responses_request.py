"""A Responses API request made a chat completions request, field by field, and what is refused.

Every chat body is also held to OpenAI's ``CreateChatCompletionRequest`` schema (strict keys)
and to the proxy's own chat request parser; every Echo to the ``Response`` schema.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.request import parse_request
from proxy.normalize.responses import Echo, chat_body, response_body
from tests.support.schema import validate

USER = {"role": "user", "content": "Hi"}
CALL = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"}
CALL_2 = {**CALL, "call_id": "call_2", "arguments": '{"city":"Paris"}'}
TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
TOOL_CALL_2 = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
}
WEATHER = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
ANSWER = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Sunny", "annotations": []}],
}


def summary(*texts: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": t} for t in texts],
    }


def translate(body: dict[str, Any]) -> tuple[dict[str, Any], Echo]:
    chat, echo = chat_body({"model": "m", **body})
    checked = orjson.loads(orjson.dumps(chat))
    for message in checked["messages"]:
        # The one extension (docs/canonical-output.md section 1).
        message.pop("reasoning_content", None)
    validate(checked, "CreateChatCompletionRequest")
    parse_request(orjson.dumps(chat), "chat")
    chat_answer = {
        "choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    response = response_body(chat_answer, echo, response_id="resp_1", created=1, model="m")
    validate(response, "Response")
    return chat, echo


# (the Responses request's fields, the chat request's messages)
MESSAGES = [
    pytest.param({"input": "Hi"}, [USER], id="input-string"),
    pytest.param(
        {"instructions": "Be brief", "input": "Hi"},
        [{"role": "system", "content": "Be brief"}, USER],
        id="instructions",
    ),
    pytest.param({"input": [USER]}, [USER], id="easy-message"),
    pytest.param(
        {
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Hi"}],
                }
            ]
        },
        [USER],
        id="one-text-part-is-a-string",
    ),
    pytest.param(
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {
                            "type": "input_image",
                            "image_url": "https://x.test/a.png",
                            "detail": "low",
                        },
                        {
                            "type": "input_image",
                            "image_url": "data:image/png;base64,AA==",
                            "detail": "original",
                        },
                        {
                            "type": "input_file",
                            "file_data": "data:application/pdf;base64,AA==",
                            "filename": "a.pdf",
                        },
                    ],
                }
            ]
        },
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x.test/a.png", "detail": "low"},
                    },
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    {
                        "type": "file",
                        "file": {
                            "file_data": "data:application/pdf;base64,AA==",
                            "filename": "a.pdf",
                        },
                    },
                ],
            }
        ],
        id="parts",
    ),
    pytest.param(
        {
            "input": [
                {"role": "developer", "content": "Rules"},
                {"role": "system", "content": "More"},
                USER,
            ]
        },
        [{"role": "system", "content": "Rules"}, {"role": "system", "content": "More"}, USER],
        id="developer-is-system",
    ),
    pytest.param(
        {"input": [USER, ANSWER, {"role": "user", "content": "Thanks"}]},
        [USER, {"role": "assistant", "content": "Sunny"}, {"role": "user", "content": "Thanks"}],
        id="assistant-output-message",
    ),
    pytest.param(
        {
            "input": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "I can't "},
                        {"type": "refusal", "refusal": "No."},
                        {"type": "output_text", "text": "help"},
                    ],
                }
            ]
        },
        [{"role": "assistant", "content": "I can't help", "refusal": "No."}],
        id="assistant-text-and-refusal",
    ),
    pytest.param(
        {
            "input": [
                USER,
                CALL,
                CALL_2,
                {"type": "function_call_output", "call_id": "call_1", "output": "20C"},
            ]
        },
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL, TOOL_CALL_2]},
            {"role": "tool", "tool_call_id": "call_1", "content": "20C"},
        ],
        id="calls-merge",
    ),
    pytest.param(
        {"input": [USER, ANSWER, CALL]},
        [USER, {"role": "assistant", "content": "Sunny", "tool_calls": [TOOL_CALL]}],
        id="calls-join-the-message-before",
    ),
    pytest.param(
        {
            "input": [
                USER,
                CALL,
                {"type": "function_call_output", "call_id": "call_1", "output": "20C"},
                CALL_2,
            ]
        },
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "20C"},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL_2]},
        ],
        id="calls-after-output-start-anew",
    ),
    pytest.param(
        {
            "input": [
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": [
                        {"type": "input_text", "text": "20"},
                        {"type": "input_text", "text": "C"},
                    ],
                }
            ]
        },
        [{"role": "tool", "tool_call_id": "call_1", "content": "20C"}],
        id="call-output-parts",
    ),
    pytest.param(
        {"input": [USER, summary("Plan", "Check"), ANSWER]},
        [USER, {"role": "assistant", "content": "Sunny", "reasoning_content": "Plan\n\nCheck"}],
        id="reasoning-summary",
    ),
    pytest.param(
        {
            "input": [
                USER,
                {
                    **summary("Short"),
                    "content": [{"type": "reasoning_text", "text": "Long thought"}],
                    "encrypted_content": "gAAAA",
                },
                CALL,
            ]
        },
        [
            USER,
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "Long thought",
                "tool_calls": [TOOL_CALL],
            },
        ],
        id="reasoning-content-first",
    ),
    pytest.param(
        {
            "input": [
                USER,
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gA"},
                ANSWER,
            ]
        },
        [USER, {"role": "assistant", "content": "Sunny"}],
        id="reasoning-encrypted-only",
    ),
    pytest.param(
        {"input": [summary("Stale"), USER]},
        [USER],
        id="reasoning-before-user-dropped",
    ),
]


@pytest.mark.parametrize(("body", "messages"), MESSAGES)
def test_input_becomes_messages(body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    chat, _ = translate(body)
    assert chat["messages"] == messages


# (the Responses request's fields beside input, what the chat request gets beside messages)
FIELDS = [
    pytest.param({}, {}, id="nothing"),
    pytest.param(
        {"tools": [{**WEATHER, "description": "Weather", "strict": True}]},
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "description": "Weather",
                        "parameters": {"type": "object"},
                        "strict": True,
                    },
                }
            ]
        },
        id="tools",
    ),
    pytest.param(
        {
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "weather"},
            "parallel_tool_calls": False,
        },
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "weather", "parameters": {"type": "object"}},
                }
            ],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "parallel_tool_calls": False,
        },
        id="tool-choice-function",
    ),
    pytest.param(
        {
            "tools": [WEATHER],
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "weather"}],
            },
        },
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "weather", "parameters": {"type": "object"}},
                }
            ],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "weather"}}],
                },
            },
        },
        id="tool-choice-allowed",
    ),
    pytest.param(
        {"tools": [WEATHER], "tool_choice": "required"},
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "weather", "parameters": {"type": "object"}},
                }
            ],
            "tool_choice": "required",
        },
        id="tool-choice-required",
    ),
    pytest.param(
        {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True},
        {},
        id="no-tools-no-choice",
    ),
    pytest.param(
        {
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "a",
                    "schema": {"type": "object"},
                    "strict": True,
                }
            }
        },
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "object"}, "strict": True},
            }
        },
        id="json-schema",
    ),
    pytest.param(
        {"text": {"format": {"type": "json_object"}}},
        {"response_format": {"type": "json_object"}},
        id="json-object",
    ),
    pytest.param(
        {"text": {"format": {"type": "text"}, "verbosity": "low"}},
        {"verbosity": "low"},
        id="text-verbosity",
    ),
    pytest.param(
        {"reasoning": {"effort": "high", "summary": "auto"}},
        {"reasoning_effort": "high"},
        id="reasoning-effort",
    ),
    pytest.param({"max_output_tokens": 64}, {"max_completion_tokens": 64}, id="max-output-tokens"),
    pytest.param(
        {"temperature": 0.2, "top_p": 0.9}, {"temperature": 0.2, "top_p": 0.9}, id="sampling"
    ),
    pytest.param({"metadata": {"k": "v"}, "store": False}, {}, id="metadata-and-store-stay"),
    pytest.param(
        {"store": True, "truncation": "auto", "include": ["reasoning.encrypted_content"]},
        {},
        id="accepted",
    ),
    pytest.param(
        {"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}, id="stream"
    ),
    pytest.param(
        {"stream": True, "stream_options": {"include_obfuscation": False}},
        {"stream": True, "stream_options": {"include_usage": True}},
        id="stream-options",
    ),
    pytest.param({"stream": False}, {}, id="no-stream"),
    pytest.param(
        {
            "user": "u",
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "service_tier": "flex",
        },
        {
            "user": "u",
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "service_tier": "flex",
        },
        id="identifiers",
    ),
    pytest.param(
        {"seed": 7, "stop": ["\n"]}, {"seed": 7, "stop": ["\n"]}, id="chat-fields-pass-on"
    ),
]


@pytest.mark.parametrize(("body", "expected"), FIELDS)
def test_fields(body: dict[str, Any], expected: dict[str, Any]) -> None:
    chat, _ = translate({"input": "Hi", **body})
    assert chat == {"model": "m", "messages": [USER], **expected}


def test_a_providers_own_fields_pass_on() -> None:
    """As for a chat client (docs/canonical-output.md section 5): fields no OpenAI API knows go
    upstream."""
    chat, _ = chat_body({"model": "m", "input": "Hi", "top_k": 3, "repetition_penalty": 1.1})
    assert chat == {"model": "m", "messages": [USER], "top_k": 3, "repetition_penalty": 1.1}


def test_echo_defaults() -> None:
    _, echo = translate({"input": "Hi"})
    assert echo == Echo()
    response = response_body(
        {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]},
        echo,
        response_id="resp_1",
        created=5,
        model="m",
    )
    assert {
        k: response[k] for k in ("temperature", "top_p", "tool_choice", "tools", "metadata")
    } == {
        "temperature": 1.0,
        "top_p": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "metadata": {},
    }
    assert response["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert response["parallel_tool_calls"] is True and response["truncation"] == "disabled"
    assert "usage" not in response  # none was given, none is made up


def test_echo_repeats_the_request() -> None:
    _, echo = translate(
        {
            "input": "Hi",
            "instructions": "Be brief",
            "tools": [WEATHER],
            "tool_choice": "none",
            "parallel_tool_calls": False,
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "a",
                    "schema": {"type": "object"},
                    "extra": 1,
                }
            },
            "reasoning": {"effort": "low", "generate_summary": "concise"},
            "temperature": 0.5,
            "top_p": 0.5,
            "max_output_tokens": 100,
            "max_tool_calls": 3,
            "metadata": {"team": "a"},
            "store": False,
            "truncation": "auto",
            "user": "u",
            "service_tier": "priority",
        }
    )
    assert echo == Echo(
        instructions="Be brief",
        tools=(
            {
                "type": "function",
                "name": "weather",
                "description": None,
                "parameters": {"type": "object"},
                "strict": None,
            },
        ),
        tool_choice="none",
        parallel_tool_calls=False,
        text_format={"type": "json_schema", "name": "a", "schema": {"type": "object"}},
        reasoning_effort="low",
        reasoning_summary="concise",
        temperature=0.5,
        top_p=0.5,
        max_output_tokens=100,
        max_tool_calls=3,
        metadata={"team": "a"},
        truncation="auto",
        user="u",
        service_tier="priority",
    )


# (the request's fields, the parameter named, words the message must hold)
REFUSED = [
    pytest.param(
        {"previous_response_id": "resp_1"},
        "previous_response_id",
        "stateless",
        id="previous-response",
    ),
    pytest.param({"conversation": "conv_1"}, "conversation", "stateless", id="conversation"),
    pytest.param({"background": True}, "background", "stateless", id="background"),
    pytest.param({"prompt": {"id": "pmpt_1"}}, "prompt", "stored prompt", id="prompt-template"),
    pytest.param(
        {"context_management": [{"type": "compaction"}]},
        "context_management",
        "compact",
        id="compaction",
    ),
    pytest.param({"moderation": {"model": "omni"}}, "moderation", "moderation", id="moderation"),
    pytest.param(
        {"tools": [{"type": "web_search"}]}, "tools[0].type", "function tools only", id="web-search"
    ),
    pytest.param(
        {"tools": [WEATHER, {"type": "custom", "name": "apply_patch"}]},
        "tools[1].type",
        "'custom'",
        id="custom-tool",
    ),
    pytest.param(
        {"tools": [WEATHER], "tool_choice": {"type": "file_search"}},
        "tool_choice.type",
        "only function",
        id="choice-built-in",
    ),
    pytest.param(
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        "input[0]",
        "stateless",
        id="item-reference",
    ),
    pytest.param(
        {"input": [USER, {"type": "web_search_call", "id": "ws_1", "status": "completed"}]},
        "input[1].type",
        "'web_search_call'",
        id="built-in-call",
    ),
    pytest.param(
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "file_id": "file_1", "detail": "auto"}],
                }
            ]
        },
        "input[0].content[0].file_id",
        "Files API",
        id="image-file-id",
    ),
    pytest.param(
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_file", "file_url": "https://x.test/a.pdf"}],
                }
            ]
        },
        "input[0].content[0].file_url",
        "file_data",
        id="file-url",
    ),
    pytest.param(
        {
            "input": [
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [{"type": "input_image", "image_url": "https://x.test/a.png"}],
                }
            ]
        },
        "input[0].output[0]",
        "text only",
        id="tool-output-image",
    ),
    pytest.param({"top_logprobs": 3}, "top_logprobs", "not available", id="top-logprobs"),
    pytest.param(
        {"include": ["message.output_text.logprobs"]},
        "include[0]",
        "not available",
        id="include-logprobs",
    ),
    pytest.param({"model": None}, "model", "Missing required parameter", id="no-model"),
    pytest.param({"input": None}, "input", "Missing required parameter", id="no-input"),
    pytest.param({"input": []}, "input", "Missing required parameter", id="empty-input"),
    pytest.param({"input": 3}, "input", "Invalid type", id="input-number"),
    pytest.param(
        {"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "must be one of", id="role"
    ),
    pytest.param(
        {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
        "input[0].call_id",
        "Missing",
        id="call-id",
    ),
    pytest.param({"temperature": 3}, "temperature", "between 0 and 2", id="temperature"),
    pytest.param(
        {"max_output_tokens": 0}, "max_output_tokens", "at least 1", id="max-output-tokens"
    ),
    pytest.param({"metadata": {"k": 1}}, "metadata.k", "a string", id="metadata-value"),
    pytest.param(
        {"text": {"format": {"type": "json_schema", "name": "a"}}},
        "text.format.schema",
        "Missing",
        id="schema",
    ),
    pytest.param(
        {"reasoning": {"effort": "extreme"}}, "reasoning.effort", "must be one of", id="effort"
    ),
    pytest.param({"stream": "yes"}, "stream", "a boolean", id="stream-type"),
    # Chat's own fields: one Response has one output, and the translation writes the others.
    pytest.param({"n": 3}, "n", "not a Responses API parameter", id="chat-n"),
    pytest.param(
        {"messages": [{"role": "user", "content": "x"}]},
        "messages",
        "not a Responses",
        id="chat-messages",
    ),
    pytest.param({"max_tokens": 5}, "max_tokens", "not a Responses", id="chat-max-tokens"),
    pytest.param(
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "http://x", "detail": []}],
                }
            ]
        },
        "input[0].content[0].detail",
        "string",
        id="image-detail-type",
    ),
]


@pytest.mark.parametrize(("body", "param", "words"), REFUSED)
def test_refused(body: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_body({"model": "m", "input": "Hi", **body})
    assert caught.value.status == 400
    assert caught.value.param == param
    assert words in caught.value.message, caught.value.message


def test_store_is_accepted_either_way() -> None:
    """A client that omits store (whose API default is true) works; store keeps nothing."""
    for body in ({}, {"store": True}, {"store": False}, {"store": None}):
        chat, echo = translate({"input": "Hi", **body})
        assert "store" not in chat
        assert "store" not in echo.response(
            response_id="resp_1", created=1, model="m", status="completed", output=[]
        )
    with pytest.raises(InvalidRequest) as caught:
        translate({"input": "Hi", "store": "yes"})
    assert caught.value.param == "store"
