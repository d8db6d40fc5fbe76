"""POST /v1/messages through the running proxy, driven by Anthropic's own Python SDK: over an
Anthropic upstream (passed through as it came) and over OpenAI-compatible, Gemini and Ollama
upstreams (translated), whole and streamed, with tools, thinking, count_tokens, the models list,
Claude Code's preflights, and every error status in Anthropic's envelope."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from tests.support.harness import (
    TEAM_KEY,
    UPSTREAM_SECRET,
    Servers,
    proxy_config,
    upstream_requests,
)
from tests.support.hostile import proxied

RECORDINGS = Path(__file__).resolve().parents[2] / "proxy" / "emulator" / "recordings"
RPM_KEY = "sk-team-rpm-face-0001"

MODELS = {
    "claude-native": {"provider": "emu-anthropic", "model": "anthropic"},
    "claude-openai": {"provider": "emu", "model": "openai"},
    "claude-tools": {"provider": "emu", "model": "openai.chat.stream.tool-calls.sse"},
    "claude-think": {"provider": "emu", "model": "deepseek.chat.stream.reasoning.sse"},
    "claude-gemini": {"provider": "emu-gemini", "model": "gemini"},
    "claude-ollama": {"provider": "emu-ollama", "model": "ollama"},
    "claude-500": {"provider": "emu", "model": "openai@status=500"},
    "claude-503": {"provider": "emu", "model": "openai@status=503"},
    "claude-hang": {"provider": "emu-fast", "model": "openai@hang"},
    "claude-stall": {"provider": "emu-fast", "model": "openai.chat.stream.sse@stall-after=1500"},
    "claude-betas": {"provider": "emu-anthropic-betas", "model": "anthropic"},
}
TEAMS = {
    "research": {"keys": [TEAM_KEY], "models": ["*"]},
    "rpm": {"keys": [RPM_KEY], "models": ["*"], "limits": {"requests_per_minute": 1}},
}
TRANSLATED = ["claude-openai", "claude-gemini", "claude-ollama"]
HELLO: Any = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def root(servers: Servers, fixture_dir: Path) -> str:
    """The proxy's root URL: Anthropic's SDKs add /v1/messages themselves."""
    # The count the emulator's Anthropic answers count_tokens with (packaged with it).
    counted = fixture_dir / "anthropic.count-tokens.json"
    if not counted.exists():
        counted.symlink_to(RECORDINGS / counted.name)
    providers = proxy_config(servers.emulator_url, {})["providers"]
    providers["emu-anthropic-betas"] = {
        **providers["emu-anthropic"],
        "drop_betas": ["dropped-beta"],
    }
    url, _ = servers.start_proxy(
        MODELS, teams=TEAMS, providers=providers, server={"max_body_bytes": 200_000}
    )
    return url.removesuffix("/v1")


@pytest.fixture
def client(root: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=root, api_key=TEAM_KEY, max_retries=0) as client:
        yield client


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


# --- answers ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["claude-native", *TRANSLATED])
def test_messages_create(client: anthropic.Anthropic, model: str) -> None:
    message = client.messages.create(model=model, max_tokens=256, messages=HELLO)
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == model
    assert message.id.startswith("msg_")
    assert text_of(message)
    assert message.stop_reason in ("end_turn", "max_tokens")
    usage = message.usage
    assert usage.output_tokens > 0 and usage.input_tokens > 0
    assert isinstance(usage.cache_read_input_tokens, int)
    assert isinstance(usage.cache_creation_input_tokens, int)


@pytest.mark.parametrize("model", ["claude-native", *TRANSLATED, "claude-think"])
def test_messages_stream_accumulates_the_answer(client: anthropic.Anthropic, model: str) -> None:
    with client.messages.stream(model=model, max_tokens=256, messages=HELLO) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert final.model == model
    assert "".join(texts) == text_of(final) != ""
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0
    assert isinstance(final.usage.cache_read_input_tokens, int)


def test_a_stream_told_whole_is_the_same_message(client: anthropic.Anthropic) -> None:
    # The emulator serves this recording to both, so the two answers are the same one.
    with client.messages.stream(model="claude-tools", max_tokens=256, messages=HELLO) as stream:
        streamed = stream.get_final_message()
    whole = client.messages.create(model="claude-tools", max_tokens=256, messages=HELLO)
    assert streamed.model_dump(exclude={"id"}) == whole.model_dump(exclude={"id"})


def test_thinking_comes_first(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-think",
        max_tokens=2048,
        messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    kinds = [block.type for block in message.content]
    assert kinds[0] == "thinking" and "text" in kinds
    assert message.content[0].thinking  # type: ignore[union-attr]


def test_tools_over_two_turns(client: anthropic.Anthropic, servers: Servers) -> None:
    tools: Any = [
        {
            "name": "get_weather",
            "description": "The weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    first = client.messages.create(
        model="claude-tools", max_tokens=256, messages=HELLO, tools=tools
    )
    assert first.stop_reason == "tool_use"
    calls = [block for block in first.content if block.type == "tool_use"]
    assert calls and all(isinstance(call.input, dict) for call in calls)
    turns: Any = [
        *HELLO,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}
                for call in calls
            ],
        },
    ]
    second = client.messages.create(
        model="claude-openai", max_tokens=256, messages=turns, tools=tools
    )
    assert text_of(second)
    sent = servers.loop.call(lambda: upstream_requests(servers))[-1]["json"]
    tool_messages = [m for m in sent["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [call.id for call in calls]
    (asked,) = [m for m in sent["messages"] if m.get("tool_calls")]
    assert [c["function"]["name"] for c in asked["tool_calls"]] == [call.name for call in calls]


# --- the Anthropic upstream: as it came -----------------------------------------------------


def _stream_bytes(root: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    async def fetch() -> bytes:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{root}/v1/messages", json=body, headers=headers) as response,
        ):
            assert response.status == 200, await response.text()
            return await response.read()

    return asyncio.run(fetch())


@pytest.mark.parametrize("model", ["claude-native", "claude-betas"])
def test_an_anthropic_stream_is_relayed_as_it_came(root: str, servers: Servers, model: str) -> None:
    body = {
        "model": model,
        "max_tokens": 256,
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "an_unknown_field": {"kept": True},
    }
    headers = {
        "x-api-key": TEAM_KEY,
        "anthropic-version": "2099-01-01",
        "anthropic-beta": "newest-beta-2099,dropped-beta",
    }
    relayed = _stream_bytes(root, body, headers)
    recorded = (RECORDINGS / "anthropic.messages.stream.sse").read_bytes()
    named = f'"model":"{model}"'.encode()
    assert relayed == recorded.replace(b'"model":"claude-sonnet-4-5-20250929"', named)
    sent = servers.loop.call(lambda: upstream_requests(servers))[-1]
    assert sent["json"] == {**body, "model": "anthropic"}  # as it came but for the model
    assert sent["headers"]["anthropic-version"] == "2099-01-01"
    betas = "newest-beta-2099" if model == "claude-betas" else "newest-beta-2099,dropped-beta"
    assert sent["headers"]["anthropic-beta"] == betas
    assert sent["headers"]["x-api-key"] == UPSTREAM_SECRET  # never the client's key


# --- around the messages ------------------------------------------------------------------


def test_count_tokens(client: anthropic.Anthropic) -> None:
    native = client.messages.with_raw_response.count_tokens(model="claude-native", messages=HELLO)
    assert native.parse().input_tokens == 2095  # the Anthropic upstream's own count
    assert native.headers["x-usage-source"] == "upstream"
    estimated = client.messages.with_raw_response.count_tokens(
        model="claude-openai", messages=HELLO
    )
    assert estimated.parse().input_tokens > 0
    assert estimated.headers["x-usage-source"] == "estimated"


def test_models_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    page = client.models.list()
    ids = [model.id for model in page.data]
    assert set(MODELS) <= set(ids)
    assert all(model.type == "model" and model.display_name for model in page.data)
    assert client.models.retrieve("claude-native").id == "claude-native"


@pytest.mark.parametrize("path", ["/", "/api/hello", "/v1/messages"])
def test_preflights_need_no_key(root: str, path: str) -> None:
    async def head() -> int:
        async with aiohttp.ClientSession() as session, session.head(root + path) as response:
            return response.status

    assert asyncio.run(head()) == 200


@pytest.mark.parametrize("style", ["x-api-key", "bearer"])
def test_either_way_of_sending_the_key(root: str, style: str) -> None:
    if style == "bearer":
        client = anthropic.Anthropic(
            base_url=root, auth_token=TEAM_KEY, api_key=None, max_retries=0
        )
    else:
        client = anthropic.Anthropic(base_url=root, api_key=TEAM_KEY, max_retries=0)
    with client:
        message = client.messages.create(
            model="claude-openai",
            max_tokens=64,
            messages=HELLO,
            extra_query={"beta": "true"},  # as Claude Code asks
        )
    assert text_of(message)


# --- errors -------------------------------------------------------------------------------


def _status_error(call: Any) -> anthropic.APIStatusError:
    with pytest.raises(anthropic.APIStatusError) as caught:
        call()
    return caught.value


@pytest.mark.parametrize(
    ("model", "extra", "status", "kind", "cls"),
    [
        (
            "claude-openai",
            {"max_tokens": -1},
            400,
            "invalid_request_error",
            anthropic.BadRequestError,
        ),
        ("no-such-model", {}, 404, "not_found_error", anthropic.NotFoundError),
        ("claude-500", {}, 502, "api_error", anthropic.InternalServerError),
        ("claude-503", {}, 529, "overloaded_error", anthropic.OverloadedError),
        ("claude-hang", {}, 504, "timeout_error", anthropic.GatewayTimeoutError),
    ],
)
def test_errors_in_anthropics_envelope(
    client: anthropic.Anthropic,
    model: str,
    extra: dict[str, Any],
    status: int,
    kind: str,
    cls: type[anthropic.APIStatusError],
) -> None:
    body: dict[str, Any] = {"model": model, "max_tokens": 64, "messages": HELLO, **extra}
    error = _status_error(lambda: client.messages.create(**body))
    assert isinstance(error, cls)
    assert error.status_code == status
    assert error.body == {
        "type": "error",
        "error": {"type": kind, "message": error.body["error"]["message"]},
    }  # type: ignore[index]
    assert error.response.headers["request-id"]


def test_a_wrong_key_is_an_authentication_error(root: str) -> None:
    with anthropic.Anthropic(base_url=root, api_key="sk-wrong-key-000000", max_retries=0) as client:
        error = _status_error(
            lambda: client.messages.create(model="claude-openai", max_tokens=8, messages=HELLO)
        )
    assert isinstance(error, anthropic.AuthenticationError)
    assert error.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_a_body_too_large(client: anthropic.Anthropic) -> None:
    big: Any = [{"role": "user", "content": "x" * 300_000}]
    error = _status_error(
        lambda: client.messages.create(model="claude-openai", max_tokens=8, messages=big)
    )
    assert error.status_code == 413
    assert error.body["error"]["type"] == "request_too_large"  # type: ignore[index]


def test_a_rate_limit_says_when_to_retry(root: str) -> None:
    with anthropic.Anthropic(base_url=root, api_key=RPM_KEY, max_retries=0) as client:
        client.messages.create(model="claude-openai", max_tokens=8, messages=HELLO)
        error = _status_error(
            lambda: client.messages.create(model="claude-openai", max_tokens=8, messages=HELLO)
        )
    assert isinstance(error, anthropic.RateLimitError)
    headers = error.response.headers
    assert int(headers["retry-after"]) >= 1
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert error.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_every_answer_has_a_request_id(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model="claude-openai", max_tokens=8, messages=HELLO
    )
    assert raw.headers["request-id"]
    assert raw.parse().id.startswith("msg_")


def test_an_error_after_the_first_byte_is_an_error_event(root: str) -> None:
    # The upstream stalls after its first events: the idle limit cuts it (emu-fast: 1 s).
    body = {"model": "claude-stall", "max_tokens": 64, "stream": True, "messages": HELLO}
    relayed = _stream_bytes(root, body, {"x-api-key": TEAM_KEY, "anthropic-version": "2023-06-01"})
    events = [frame.split(b"\n", 1) for frame in relayed.split(b"\n\n") if frame]
    names = [name.removeprefix(b"event: ") for name, _ in events]
    assert names[0] == b"message_start"
    assert names[-1] == b"error" and b"message_stop" not in names
    error = orjson.loads(events[-1][1].removeprefix(b"data: "))
    assert error["type"] == "error" and error["error"]["type"] in ("timeout_error", "api_error")


# --- count_tokens from an Anthropic upstream that misbehaves --------------------------------


def _answer(status: int, body: bytes) -> Any:
    async def script(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (status, len(body), body)
        )
        await writer.drain()

    return script


COUNT_SCRIPTS = {
    "count-extra": _answer(200, b'{"input_tokens": 7, "note": "anything"}'),
    "count-garbage": _answer(200, b"[1, 2]"),
    "count-negative": _answer(200, b'{"input_tokens": -1}'),
    "count-echo": _answer(
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"bad key '
        + UPSTREAM_SECRET.encode()
        + b'"}}',
    ),
}


@pytest.fixture(scope="module")
def counting(servers: Servers) -> Iterator[str]:
    provider = {"api": "anthropic", "api_key": UPSTREAM_SECRET}
    with proxied(servers, COUNT_SCRIPTS, provider=provider) as (_, url, _):
        yield url.removesuffix("/v1")


@pytest.mark.parametrize(
    ("model", "status", "body"),
    [
        ("count-extra", 200, {"input_tokens": 7}),  # only the count: nothing else vouched for
        ("count-garbage", 502, None),
        ("count-negative", 502, None),
        ("count-echo", 400, None),
    ],
)
def test_count_tokens_holds_the_upstreams_answer(
    counting: str, model: str, status: int, body: dict[str, Any] | None
) -> None:
    async def count() -> tuple[int, bytes]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{counting}/v1/messages/count_tokens",
                json={"model": model, "messages": HELLO},
                headers={"x-api-key": TEAM_KEY, "anthropic-version": "2023-06-01"},
            ) as response,
        ):
            return response.status, await response.read()

    got, raw = asyncio.run(count())
    assert got == status, raw
    answer = orjson.loads(raw)
    if body is not None:
        assert answer == body
    else:
        assert answer["type"] == "error"
        assert UPSTREAM_SECRET not in raw.decode()
