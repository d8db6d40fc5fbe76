"""POST /v1/responses through the running proxy, answered by the chat pipeline over several
dialects, driven by the official openai SDK (``responses.create``, streamed and not,
``responses.stream()``, ``responses.parse``); every object and event validates against OpenAI's
schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.support import recorded
from tests.support.harness import TEAM_KEY, Servers, forget_upstream_requests, upstream_requests
from tests.support.schema import validate

# A model per recording: (provider, the recording the emulator plays, the golden it is held to).
MODELS = {
    "gpt": ("emu", "openai.chat.stream.sse", "openai.chat.stream.sse"),
    "gpt-whole": ("emu", "openai.chat.json", "openai.chat.json"),
    "gpt-length": ("emu", "openai.chat.stream.length.sse", "openai.chat.stream.length.sse"),
    "gpt-tools": ("emu", "openai.chat.stream.tool-calls.sse", "openai.chat.stream.tool-calls.sse"),
    "r1": ("emu", "deepseek.chat.stream.reasoning.sse", "deepseek.chat.stream.reasoning.sse"),
    "claude": ("emu-anthropic", "anthropic.messages.stream.sse", "anthropic.messages.stream.sse"),
    "claude-whole": ("emu-anthropic", "anthropic.messages.json", "anthropic.messages.json"),
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
    "gemini": (
        "emu-gemini",
        "gemini.generate-content.stream.sse",
        "gemini.generate-content.stream.sse",
    ),
    "gemini-json-whole": (
        "emu-gemini",
        "contract.gemini.generate-content.json-schema.json",
        "contract/contract.gemini.generate-content.json-schema.json",
    ),
    "ollama": ("emu-ollama", "ollama.api-chat.stream.ndjson", "ollama.api-chat.stream.ndjson"),
    # Stalls after its first events; emu-fast gives up after a second of silence.
    "cut": ("emu-fast", "openai.chat.stream.sse@stall-after=600", "openai.chat.stream.sse"),
    # Its connection breaks after the headers, before any event.
    "broken": ("emu", "openai.chat.stream.sse@reset-after=1", "openai.chat.stream.sse"),
}
TOOLS: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def golden_of(model: str) -> dict[str, Any]:
    return recorded.golden_of(MODELS, model)


@pytest.fixture(scope="module")
def responses_url(servers: Servers) -> str:
    url, _ = servers.start_proxy(recorded.models_config(MODELS))
    return url


@pytest.fixture
def client(responses_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=responses_url, api_key=TEAM_KEY, max_retries=0) as client:
        yield client


@pytest.mark.parametrize("model", ["gpt-whole", "claude-whole", "gemini-json-whole", "gpt"])
def test_a_whole_response(client: openai.OpenAI, model: str) -> None:
    golden = golden_of(model)
    want = golden["choices"]["0"]
    raw = client.responses.with_raw_response.create(
        model=model, input="Hello", instructions="Be brief."
    )
    validate(orjson.loads(raw.content), "Response")
    response = raw.parse()
    assert response.model == model and response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.output_text == (want["content"] or "")
    assert response.instructions == "Be brief."
    assert response.usage is not None
    assert response.usage.total_tokens == golden["usage"]["total_tokens"]
    assert response.usage.input_tokens == golden["usage"]["prompt_tokens"]


@pytest.mark.parametrize("model", ["gpt", "claude", "gemini", "ollama", "r1"])
def test_a_streamed_response_follows_openais_event_sequence(
    client: openai.OpenAI, model: str
) -> None:
    golden = golden_of(model)
    want = golden["choices"]["0"]
    events = list(client.responses.create(model=model, input="Hello", stream=True))
    kinds = [event.type for event in events]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert (
        sum(
            kind in ("response.completed", "response.incomplete", "response.failed")
            for kind in kinds
        )
        == 1
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == (want["content"] or "")
    done = [e for e in events if e.type == "response.output_text.done"]
    assert [e.text for e in done] == ([want["content"]] if want["content"] else [])
    final: Any = events[-1]
    assert final.response.output_text == (want["content"] or "")
    assert final.response.usage.total_tokens == golden["usage"]["total_tokens"]
    reasoning = "".join(
        e.delta for e in events if e.type == "response.reasoning_summary_text.delta"
    )
    assert reasoning == (want["reasoning_content"] or "")


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_the_stream_helper_gives_the_final_response(client: openai.OpenAI, model: str) -> None:
    want = golden_of(model)["choices"]["0"]
    with client.responses.stream(model=model, input="Hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == want["content"]


def test_the_token_limit_makes_an_incomplete_response(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="gpt-length", input="Hello", stream=True))
    final: Any = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.status == "incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("model", ["gpt-tools", "claude-tools"])
@pytest.mark.parametrize("stream", [True, False])
def test_function_calls_come_as_function_call_items(
    client: openai.OpenAI, model: str, stream: bool
) -> None:
    want = golden_of(model)["choices"]["0"]["tool_calls"]
    if stream:
        with client.responses.stream(model=model, input="Weather?", tools=TOOLS) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model=model, input="Weather?", tools=TOOLS)
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [(c["name"], c["arguments"]) for c in want]
    assert all(c.call_id for c in calls)


@pytest.mark.parametrize("model", ["claude-json", "gemini-json-whole"])
def test_parse_with_a_pydantic_model(client: openai.OpenAI, model: str) -> None:
    parsed = client.responses.parse(model=model, input="Paris?", text_format=recorded.City)
    assert parsed.output_parsed == recorded.City(city="Paris", population=2102650)


async def test_the_chat_request_carries_the_translation(
    responses_url: str, servers: Servers
) -> None:
    await forget_upstream_requests(servers)
    async with openai.AsyncOpenAI(
        base_url=responses_url, api_key=TEAM_KEY, max_retries=0
    ) as client:
        await client.responses.create(
            model="gpt-whole",
            instructions="Be brief.",
            input=[
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city":"Paris"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            ],
            tools=TOOLS,
            max_output_tokens=50,
            temperature=0.5,
            store=True,
        )
    sent = (await upstream_requests(servers))[-1]
    assert sent["path"] == "/v1/chat/completions"
    body = sent["json"]
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "Weather?"}
    assert body["messages"][2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["max_completion_tokens"] == 50 and body["temperature"] == 0.5
    assert "store" not in body and "input" not in body


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_abc"}, "previous_response_id"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
def test_what_needs_state_or_a_built_in_tool_is_refused(
    client: openai.OpenAI, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt", input="Hello", extra_body=extra)
    error: Any = info.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("model", "extra", "param", "named"),
    [
        # Anthropic's thinking budget cannot fit in the limit: chat's refusal is of
        # max_completion_tokens "with reasoning_effort".
        (
            "claude",
            {"reasoning": {"effort": "high"}, "max_output_tokens": 500},
            "max_output_tokens",
            "with reasoning.effort",
        ),
        # Ollama has no verbosity setting.
        ("ollama", {"text": {"verbosity": "high"}}, "text.verbosity", "'text.verbosity'"),
    ],
)
def test_a_dialects_refusal_names_the_responses_parameter(
    client: openai.OpenAI, model: str, extra: dict[str, Any], param: str, named: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=model, input="Hello", extra_body=extra)
    error: Any = info.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert named in error["message"]
    for chat in ("max_completion_tokens", "reasoning_effort", "'verbosity'"):
        assert chat not in error["message"]


def test_a_failure_after_the_first_byte_is_response_failed(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="cut", input="Hello", stream=True))
    final: Any = events[-1]
    assert final.type == "response.failed"
    assert final.response.status == "failed" and final.response.error.message


@pytest.mark.parametrize("model", [m for m in MODELS if not m.endswith("-whole") and m != "broken"])
async def test_every_event_validates_on_its_named_line_and_there_is_no_done(
    responses_url: str, model: str
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            responses_url + "/responses",
            json={"model": model, "input": "Hello", "stream": True, "tools": TOOLS},
            headers={"Authorization": f"Bearer {TEAM_KEY}"},
        ) as response,
    ):
        assert response.headers["Content-Type"].startswith("text/event-stream")
        body = await response.read()
    frames = [frame for frame in body.split(b"\n\n") if frame]
    for number, frame in enumerate(frames):
        event, data = frame.split(b"\n", 1)
        assert event.startswith(b"event: ") and data.startswith(b"data: ")
        payload = orjson.loads(data[6:])
        assert payload["type"] == event[7:].decode()
        assert payload["sequence_number"] == number
        validate(payload, "ResponseStreamEvent")
    assert b"[DONE]" not in body


async def test_a_bad_body_is_a_400_in_openais_shape(responses_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            responses_url + "/responses",
            data=b"{not json",
            headers={"Authorization": f"Bearer {TEAM_KEY}", "Content-Type": "application/json"},
        ) as response,
    ):
        assert response.status == 400
        error = (await response.json())["error"]
    assert error["code"] == "invalid_json"


# --- a provider that serves the Responses API itself (responses: true) ------------------------

RESPONSES = Path(__file__).resolve().parents[1] / "fixtures" / "responses"
PASSED = {
    # The emulator plays contract.openai.responses.json, or .responses.stream.sse for a stream.
    "native": "contract.openai",
    "native-calls": "contract.openai.responses.stream.function-call.sse",
    "native-extras": "contract.openai.responses.stream.extras.sse",
}


@pytest.fixture(scope="module")
def passthrough_url(servers: Servers) -> str:
    models = {name: {"provider": "emu-responses", "model": m} for name, m in PASSED.items()}
    url, _ = servers.start_proxy(models)
    return url


async def raw_stream(url: str, model: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/responses",
            json={"model": model, "input": "Hello", "stream": True},
            headers={"Authorization": f"Bearer {TEAM_KEY}"},
        ) as response,
    ):
        assert response.status == 200
        body = await response.read()
    events = []
    for frame in (f for f in body.split(b"\n\n") if f):
        event, data = frame.split(b"\n", 1)
        payload = orjson.loads(data.removeprefix(b"data: "))
        assert event == b"event: " + payload["type"].encode()
        events.append(payload)
    return events


def recorded_events(name: str) -> list[dict[str, Any]]:
    text = (RESPONSES / name).read_bytes()
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith(b"data: ")]


@pytest.mark.parametrize("model", ["native", "native-calls", "native-extras"])
async def test_a_passed_through_stream_is_held_to_the_contract(
    passthrough_url: str, servers: Servers, model: str
) -> None:
    events = await raw_stream(passthrough_url, model)
    for number, event in enumerate(events):
        validate(event, "ResponseStreamEvent")  # the extras are gone
        assert event["sequence_number"] == number
        if isinstance(event.get("response"), dict):
            assert event["response"]["model"] == model  # the client's name, not the upstream's
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "response.completed"
    recorded = PASSED[model] if model != "native" else "contract.openai.responses.stream.sse"
    known = [e for e in recorded_events(recorded) if e["type"] != "keepalive"]
    assert kinds == [e["type"] for e in known]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "".join(e["delta"] for e in known if e["type"] == "response.output_text.delta")


def test_a_passed_through_whole_response_reaches_the_sdk(passthrough_url: str) -> None:
    recorded: Any = orjson.loads((RESPONSES / "contract.openai.responses.json").read_bytes())
    with openai.OpenAI(base_url=passthrough_url, api_key=TEAM_KEY, max_retries=0) as client:
        raw = client.responses.with_raw_response.create(model="native", input="Hello")
        with client.responses.stream(model="native", input="Hello") as stream:
            streamed = stream.get_final_response()
    body = orjson.loads(raw.content)
    validate(body, "Response")
    response = raw.parse()
    assert response.model == "native" and response.id == recorded["id"]
    assert response.output_text == streamed.output_text
    assert response.usage is not None
    assert response.usage.total_tokens == recorded["usage"]["total_tokens"]


async def test_a_passed_through_request_goes_up_as_it_came(
    passthrough_url: str, servers: Servers
) -> None:
    await forget_upstream_requests(servers)
    async with openai.AsyncOpenAI(
        base_url=passthrough_url, api_key=TEAM_KEY, max_retries=0
    ) as client:
        await client.responses.create(
            model="native", input="Hello", reasoning={"effort": "low"}, store=False
        )
    sent = (await upstream_requests(servers))[-1]
    assert sent["path"] == "/v1/responses"
    assert sent["json"] == {
        "model": "contract.openai",
        "input": "Hello",
        "reasoning": {"effort": "low"},
        "store": False,
    }


async def test_state_is_refused_before_a_passthrough_too(passthrough_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            passthrough_url + "/responses",
            json={"model": "native", "input": "Hi", "previous_response_id": "resp_1"},
            headers={"Authorization": f"Bearer {TEAM_KEY}"},
        ) as response,
    ):
        assert response.status == 400
        assert (await response.json())["error"]["param"] == "previous_response_id"


@pytest.mark.parametrize("path", ["/responses", "/chat/completions"])
async def test_a_failure_before_anything_was_said_is_an_http_error(
    responses_url: str, path: str
) -> None:
    """As for a chat client: an HTTP error (which a retry may yet turn into an answer), not a
    stream that opens only to fail."""
    body: dict[str, Any] = {"model": "broken", "stream": True}
    if path == "/responses":
        body["input"] = "Hello"
    else:
        body["messages"] = [{"role": "user", "content": "Hello"}]
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            responses_url + path, json=body, headers={"Authorization": f"Bearer {TEAM_KEY}"}
        ) as response,
    ):
        assert response.status == 502, await response.read()
        error = (await response.json())["error"]
    assert error["type"] == "upstream_error"


async def test_what_only_the_responses_api_can_say_goes_to_a_provider_serving_it(
    passthrough_url: str, servers: Servers
) -> None:
    """A built-in tool cannot be made a chat request, but a provider serving the Responses API
    takes it as it came (a model translated to chat refuses it: the test above)."""
    async with openai.AsyncOpenAI(
        base_url=passthrough_url, api_key=TEAM_KEY, max_retries=0
    ) as client:
        response = await client.responses.create(
            model="native", input="News?", tools=[{"type": "web_search"}]
        )
    assert response.status == "completed"
    sent = (await upstream_requests(servers))[-1]
    assert sent["path"] == "/v1/responses" and sent["json"]["tools"] == [{"type": "web_search"}]
