"""The official openai SDK, unchanged, against Anthropic and Gemini models through the proxy.

The emulator plays the providers' recorded native answers; what the SDK accumulates must be what
the fixture's golden says, and what the proxy sent upstream must be the provider's own request
(read back from the emulator's request log).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from tests.support import recorded
from tests.support.harness import (
    TEAM_KEY,
    UPSTREAM_SECRET,
    Servers,
    forget_upstream_requests,
    upstream_requests,
)
from tests.support.replay import GOLDEN

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CHAT: Any = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello"},
]

# A model per recording: (provider, the recording the emulator plays, the golden it is held to).
MODELS = {
    "claude": ("emu-anthropic", "anthropic", "anthropic.messages.stream.sse"),
    "claude-whole": ("emu-anthropic", "anthropic", "anthropic.messages.json"),
    "claude-tools": (
        "emu-anthropic",
        "anthropic.messages.stream.tool-use.sse",
        "anthropic.messages.stream.tool-use.sse",
    ),
    "claude-json": (
        "emu-anthropic",
        "contract.anthropic.messages.stream.json-tool.sse",
        "contract/contract.anthropic.messages.stream.json-tool.sse",
    ),
    "claude-json-whole": (
        "emu-anthropic",
        "contract.anthropic.messages.json-tool.json",
        "contract/contract.anthropic.messages.json-tool.json",
    ),
    "gemini": ("emu-gemini", "gemini", "gemini.generate-content.stream.sse"),
    "gemini-whole": ("emu-gemini", "gemini", "gemini.generate-content.json"),
    "gemini-tools": (
        "emu-gemini",
        "gemini.generate-content.stream.tool-call.sse",
        "gemini.generate-content.stream.tool-call.sse",
    ),
    "gemini-json": (
        "emu-gemini",
        "contract.gemini.generate-content.stream.json-schema.sse",
        "contract/contract.gemini.generate-content.stream.json-schema.sse",
    ),
    "gemini-json-whole": (
        "emu-gemini",
        "contract.gemini.generate-content.json-schema.json",
        "contract/contract.gemini.generate-content.json-schema.json",
    ),
}


def golden_of(model: str) -> dict[str, Any]:
    return recorded.golden_of(MODELS, model)


@pytest.fixture(scope="module")
def native_url(servers: Servers) -> str:
    url, _ = servers.start_proxy(recorded.models_config(MODELS))
    return url


@pytest.fixture
def client(native_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=native_url, api_key=TEAM_KEY, max_retries=0) as client:
        yield client


async def sent_upstream(servers: Servers) -> dict[str, Any]:
    """The last request the emulator received; then it forgets them all."""
    received = await upstream_requests(servers)
    await forget_upstream_requests(servers)
    assert received, "nothing reached the emulator"
    last: dict[str, Any] = received[-1]
    return last


@pytest.mark.parametrize("model", ["claude", "gemini"])
def test_stream_accumulates_the_golden_text(client: openai.OpenAI, model: str) -> None:
    want = golden_of(model)["choices"]["0"]
    stream = client.chat.completions.create(
        model=model, messages=CHAT, stream=True, stream_options={"include_usage": True}
    )
    text, reasoning, finish, usage = [], [], None, None
    for chunk in stream:
        assert chunk.model == model
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            extra = choice.delta.model_extra or {}
            reasoning.append(extra.get("reasoning_content") or "")
            finish = choice.finish_reason or finish
    assert "".join(text) == (want["content"] or "")
    assert "".join(reasoning) == (want["reasoning_content"] or "")
    assert finish == want["finish_reason"]
    assert usage is not None
    assert usage.total_tokens == golden_of(model)["usage"]["total_tokens"]


@pytest.mark.parametrize("model", ["claude", "gemini"])
def test_the_stream_helper_gives_the_final_completion(client: openai.OpenAI, model: str) -> None:
    want = golden_of(model)["choices"]["0"]
    with client.chat.completions.stream(model=model, messages=CHAT) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == want["content"]
    assert final.choices[0].finish_reason == want["finish_reason"]


@pytest.mark.parametrize("model", ["claude-whole", "gemini-whole"])
def test_a_whole_answer_parses(client: openai.OpenAI, model: str) -> None:
    golden = golden_of(model)
    completion = client.chat.completions.create(model=model, messages=CHAT)
    assert completion.choices[0].message.content == golden["choices"]["0"]["content"]
    assert completion.choices[0].finish_reason == golden["choices"]["0"]["finish_reason"]
    assert completion.usage is not None
    assert completion.usage.total_tokens == golden["usage"]["total_tokens"]


@pytest.mark.parametrize("model", ["claude-tools", "gemini-tools"])
def test_streamed_tool_calls_reach_the_stream_helper(client: openai.OpenAI, model: str) -> None:
    want = golden_of(model)["choices"]["0"]["tool_calls"]
    with client.chat.completions.stream(model=model, messages=CHAT, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    calls = message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        (c["name"], c["arguments"]) for c in want
    ]
    assert all(c.id for c in calls) and len({c.id for c in calls}) == len(calls)


@pytest.mark.parametrize(
    "model", ["claude-json", "claude-json-whole", "gemini-json", "gemini-json-whole"]
)
def test_parse_with_a_pydantic_model(client: openai.OpenAI, model: str) -> None:
    completion = client.chat.completions.parse(
        model=model, messages=CHAT, response_format=recorded.City
    )
    assert completion.choices[0].message.parsed == recorded.City(city="Paris", population=2102650)


@pytest.mark.parametrize("model", ["claude-json", "gemini-json"])
def test_parse_through_the_stream_helper(client: openai.OpenAI, model: str) -> None:
    with client.chat.completions.stream(
        model=model, messages=CHAT, response_format=recorded.City
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == recorded.City(city="Paris", population=2102650)


async def test_anthropic_gets_its_own_request(native_url: str, servers: Servers) -> None:
    await forget_upstream_requests(servers)
    async with openai.AsyncOpenAI(base_url=native_url, api_key=TEAM_KEY, max_retries=0) as client:
        await client.chat.completions.create(
            model="claude-whole", messages=CHAT, tools=TOOLS, tool_choice="required", stop=["END"]
        )
    sent = await sent_upstream(servers)
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == UPSTREAM_SECRET
    assert "authorization" not in sent["headers"]
    assert sent["headers"]["anthropic-version"]
    body = sent["json"]
    assert body["model"] == "anthropic"
    assert body["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])
    assert body["messages"] == [{"role": "user", "content": "Hello"}] or body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hello"}]}
    ]
    assert body["max_tokens"] == 4096  # the model's default: Anthropic requires one
    assert body["tools"][0]["name"] == "get_weather"
    assert body["tools"][0]["input_schema"] == TOOLS[0]["function"]["parameters"]
    assert body["tool_choice"] == {"type": "any"}
    assert body["stop_sequences"] == ["END"]


async def test_gemini_gets_its_own_request(native_url: str, servers: Servers) -> None:
    await forget_upstream_requests(servers)
    async with openai.AsyncOpenAI(base_url=native_url, api_key=TEAM_KEY, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="gemini", messages=CHAT, stream=True, temperature=0.5, max_tokens=99
        )
        async for _ in stream:
            pass
    sent = await sent_upstream(servers)
    assert sent["path"] == "/v1beta/models/gemini:streamGenerateContent"
    assert sent["query"] == {"alt": "sse"}
    assert sent["headers"]["x-goog-api-key"] == UPSTREAM_SECRET
    assert "authorization" not in sent["headers"]
    body = sent["json"]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hello"}]}]
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert body["generationConfig"]["temperature"] == 0.5
    assert body["generationConfig"]["maxOutputTokens"] == 99
    assert "model" not in body and "stream" not in body


@pytest.mark.parametrize("model", ["claude-whole", "gemini-whole"])
def test_what_the_provider_cannot_do_is_refused(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=CHAT, logit_bias={"50256": -100})
    assert info.value.status_code == 400
    assert "logit_bias" in str(info.value)


def test_a_deployment_that_cannot_take_the_request_hands_it_to_the_next(
    servers: Servers,
) -> None:
    """Anthropic has no seed and no completions: a model deployed there first and on an
    OpenAI-compatible server second answers both from the second, and its breaker is not
    told the refusal; a model with no other deployment refuses (the test above)."""
    mixed = {
        "deployments": [
            {"provider": "emu-anthropic", "model": "anthropic", "priority": 0},
            {"provider": "emu", "model": "openai", "priority": 1},
        ]
    }
    url, _ = servers.start_proxy({"mixed": mixed}, routing={"attempts": 2})
    chat_text = orjson.loads((GOLDEN / "openai.chat.json.json").read_bytes())["choices"]["0"]
    with openai.OpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0) as client:
        answer = client.chat.completions.create(model="mixed", messages=CHAT, seed=1)
        assert answer.choices[0].message.content == chat_text["content"]
        completion = client.completions.create(model="mixed", prompt="Hello")
        assert completion.choices[0].text
        # Without a seed Anthropic takes it (first by priority).
        claude = client.chat.completions.create(model="mixed", messages=CHAT)
        assert claude.id.startswith("msg_")
