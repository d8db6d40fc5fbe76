"""POST /v1/messages through the running proxy, driven by Anthropic's TypeScript SDK
(``@anthropic-ai/sdk``, run by node: tests/support/anthropic_sdk.cjs), over an Anthropic upstream
(passed through) and an OpenAI-compatible one (translated), the emulator's recordings behind
both: ``messages.create``, ``messages.stream`` (its ``finalMessage`` the whole answer), tools
over two turns, ``countTokens``, the models list, and errors as the SDK's own classes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.harness import TEAM_KEY, Servers
from tests.support.node import node_with_package

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "anthropic_sdk.cjs"
RECORDINGS = Path(__file__).resolve().parents[2] / "proxy" / "emulator" / "recordings"
MODELS = {
    "claude-native": {"provider": "emu-anthropic", "model": "anthropic"},
    "claude-openai": {"provider": "emu", "model": "openai"},
    "claude-tools": {"provider": "emu", "model": "openai.chat.stream.tool-calls.sse"},
    "claude-500": {"provider": "emu", "model": "openai@status=500"},
    "claude-503": {"provider": "emu", "model": "openai@status=503"},
    "claude-native-529": {"provider": "emu-anthropic", "model": "anthropic@status=529"},
}
HELLO = [{"role": "user", "content": "Hello"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.fixture(scope="module")
def node() -> tuple[str, Path]:
    return node_with_package("@anthropic-ai/sdk")


@pytest.fixture(scope="module")
def root(servers: Servers, fixture_dir: Path) -> str:
    counted = fixture_dir / "anthropic.count-tokens.json"
    if not counted.exists():
        counted.symlink_to(RECORDINGS / counted.name)
    url, _ = servers.start_proxy(MODELS)
    return url.removesuffix("/v1")


def sdk(node: tuple[str, Path], root: str, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """Run ``calls`` with the TypeScript SDK in one node process; their results, in order."""
    program, modules = node
    plan = {
        "baseURL": root,
        "apiKey": TEAM_KEY,
        "calls": [{"op": op, "params": params} for op, params in calls],
    }
    done = subprocess.run(
        [program, str(SCRIPT)],
        input=orjson.dumps(plan),
        capture_output=True,
        env={"NODE_PATH": str(modules), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    results: list[Any] = orjson.loads(done.stdout)
    return results


def text_of(message: dict[str, Any]) -> str:
    return "".join(block["text"] for block in message["content"] if block["type"] == "text")


@pytest.mark.parametrize("model", ["claude-native", "claude-openai"])
def test_create_and_stream(node: tuple[str, Path], root: str, model: str) -> None:
    params = {"model": model, "max_tokens": 256, "messages": HELLO}
    created, streamed = sdk(node, root, ("create", params), ("stream", params))
    for message in (created["message"], streamed["message"]):
        assert message["type"] == "message" and message["model"] == model
        assert message["id"].startswith("msg_")
        assert text_of(message)
        assert message["stop_reason"] in ("end_turn", "max_tokens")
        usage = message["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert isinstance(usage["cache_read_input_tokens"], int)
        assert isinstance(usage["cache_creation_input_tokens"], int)
    assert streamed["text"] == text_of(streamed["message"])
    assert streamed["events"][0] == "message_start" and streamed["events"][-1] == "message_stop"


def test_a_streams_final_message_is_the_whole_answer(node: tuple[str, Path], root: str) -> None:
    # The emulator serves this recording to both, so the two answers are the same one.
    params = {"model": "claude-tools", "max_tokens": 256, "messages": HELLO, "tools": TOOLS}
    streamed, created = sdk(node, root, ("stream", params), ("create", params))
    final, whole = streamed["message"], created["message"]
    assert final["stop_reason"] == "tool_use"
    # The SDK's stream helper adds its own (structured output's parse, null here).
    assert final.pop("parsed_output") is None
    assert {**final, "id": None} == {**whole, "id": None}


def test_tools_over_two_turns(node: tuple[str, Path], root: str) -> None:
    params: dict[str, Any] = {"model": "claude-tools", "max_tokens": 256, "tools": TOOLS}
    (first,) = sdk(node, root, ("create", {**params, "messages": HELLO}))
    calls = [block for block in first["message"]["content"] if block["type"] == "tool_use"]
    assert calls and all(isinstance(call["input"], dict) for call in calls)
    results = [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "Sunny, 21 C"}
        for call in calls
    ]
    turns = [
        *HELLO,
        {"role": "assistant", "content": first["message"]["content"]},
        {"role": "user", "content": results},
    ]
    (second,) = sdk(node, root, ("create", {**params, "model": "claude-openai", "messages": turns}))
    assert text_of(second["message"])


def test_count_tokens_and_models(node: tuple[str, Path], root: str) -> None:
    native, estimated, models = sdk(
        node,
        root,
        ("count_tokens", {"model": "claude-native", "messages": HELLO}),
        ("count_tokens", {"model": "claude-openai", "messages": HELLO}),
        ("models", {}),
    )
    assert native["message"]["input_tokens"] == 2095  # the Anthropic upstream's own count
    assert estimated["message"]["input_tokens"] > 0
    assert set(MODELS) <= {model["id"] for model in models["models"]}
    assert all(model["type"] == "model" for model in models["models"])


@pytest.mark.parametrize(
    ("model", "status", "kind", "cls"),
    [
        ("no-such-model", 404, "not_found_error", "NotFoundError"),
        ("claude-500", 502, "api_error", "InternalServerError"),
        ("claude-503", 529, "overloaded_error", "OverloadedError"),
        ("claude-native-529", 529, "overloaded_error", "OverloadedError"),
    ],
)
def test_errors_as_the_sdks_classes(
    node: tuple[str, Path], root: str, model: str, status: int, kind: str, cls: str
) -> None:
    params = {"model": model, "max_tokens": 64, "messages": HELLO}
    created, streamed = sdk(node, root, ("create", params), ("stream", params))
    for result in (created, streamed):
        error = result["error"]
        assert (error["class"], error["status"]) == (cls, status)
        assert error["body"]["type"] == "error"
        assert error["body"]["error"]["type"] == kind
        assert error["requestID"]
