"""The client libraries apps use, unchanged, against the running proxy: the OpenAI Agents SDK and
pydantic-ai (whose default models call /v1/responses), LangChain's ChatOpenAI on the Responses
API and its OpenAIEmbeddings, over several dialects (issue 38's "done when").

The emulator answers every request of a model with the same recording, so an agent that calls
a tool is told to stop at its first tool call: one model turn, the tool run, its result the
run's output.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agents
import langchain_openai
import openai
import orjson
import pydantic_ai
import pytest
from pydantic_ai.models import infer_model
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.support import recorded
from tests.support.harness import TEAM_KEY, Servers

EMBEDDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"
MODELS = {
    "gpt": ("emu", "openai.chat.stream.sse", "openai.chat.stream.sse"),
    "claude": ("emu-anthropic", "anthropic.messages.stream.sse", "anthropic.messages.stream.sse"),
    "gemini": (
        "emu-gemini",
        "gemini.generate-content.stream.sse",
        "gemini.generate-content.stream.sse",
    ),
    "gpt-tools": ("emu", "openai.chat.stream.tool-calls.sse", "openai.chat.stream.tool-calls.sse"),
    "claude-tools": (
        "emu-anthropic",
        "anthropic.messages.stream.tool-use.sse",
        "anthropic.messages.stream.tool-use.sse",
    ),
    "gemini-tools": (
        "emu-gemini",
        "gemini.generate-content.stream.tool-call.sse",
        "gemini.generate-content.stream.tool-call.sse",
    ),
}
EMBEDDING_MODELS = {
    "embed-gemini": ("emu-gemini", "contract.gemini"),
    "embed-ollama": ("emu-ollama", "contract.ollama"),
}
TEXT_MODELS = ["gpt", "claude", "gemini"]
TOOL_MODELS = ["gpt-tools", "claude-tools", "gemini-tools"]


def golden_choice(model: str) -> dict[str, Any]:
    choice: dict[str, Any] = recorded.golden_of(MODELS, model)["choices"]["0"]
    return choice


@pytest.fixture(scope="module")
def url(servers: Servers) -> str:
    models: dict[str, Any] = {
        name: {"provider": p, "model": m} for name, (p, m, _) in MODELS.items()
    }
    models.update({name: {"provider": p, "model": m} for name, (p, m) in EMBEDDING_MODELS.items()})
    proxy_url, _ = servers.start_proxy(models)
    return proxy_url


# --- the OpenAI Agents SDK ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def agents_default_client(url: str) -> AsyncIterator[None]:
    """The Agents SDK's default client pointed at the proxy, closed after; no tracing (it
    would export). Made in the test's own loop: its connections belong to that loop."""
    async with openai.AsyncOpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0) as client:
        agents.set_default_openai_client(client, use_for_tracing=False)
        agents.set_default_openai_api("responses")  # the SDK's default, said out loud
        agents.set_tracing_disabled(True)
        yield


def tool_agent(model: str, calls: list[tuple[str, str]]) -> Any:
    """An agent with a tool of each name the model's recording calls; each records its call."""

    def tool(name: str) -> Any:
        async def invoke(_context: Any, arguments: str) -> str:
            calls.append((name, arguments))
            return "sunny"

        return agents.FunctionTool(
            name=name,
            description="The weather.",
            params_json_schema={"type": "object", "properties": {}},
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    names = dict.fromkeys(call["name"] for call in golden_choice(model)["tool_calls"])
    return agents.Agent(
        name="weather",
        instructions="Answer about the weather.",
        model=model,
        tools=[tool(name) for name in names],
        tool_use_behavior="stop_on_first_tool",
    )


@pytest.mark.parametrize("model", TEXT_MODELS)
async def test_agents_sdk_run(url: str, model: str) -> None:
    agent = agents.Agent(name="greeter", instructions="Be brief.", model=model)
    async with agents_default_client(url):
        result = await agents.Runner.run(agent, "Hello")
    assert result.final_output == golden_choice(model)["content"]


@pytest.mark.parametrize("model", TEXT_MODELS)
async def test_agents_sdk_run_streamed(url: str, model: str) -> None:
    agent = agents.Agent(name="greeter", instructions="Be brief.", model=model)
    async with agents_default_client(url):
        result = agents.Runner.run_streamed(agent, "Hello")
        deltas = [
            event.data.delta
            async for event in result.stream_events()
            if event.type == "raw_response_event"
            and event.data.type == "response.output_text.delta"
        ]
    assert result.final_output == "".join(deltas) == golden_choice(model)["content"]


@pytest.mark.parametrize("model", TOOL_MODELS)
@pytest.mark.parametrize("streamed", [False, True])
async def test_agents_sdk_runs_a_function_tool(url: str, model: str, streamed: bool) -> None:
    calls: list[tuple[str, str]] = []
    agent = tool_agent(model, calls)
    async with agents_default_client(url):
        if streamed:
            result: Any = agents.Runner.run_streamed(agent, "Weather?")
            async for _ in result.stream_events():
                pass
        else:
            result = await agents.Runner.run(agent, "Weather?")
    assert result.final_output == "sunny"
    # The recording's calls, as it made them (its first stops the run, but all are run).
    wanted = [(c["name"], c["arguments"]) for c in golden_choice(model)["tool_calls"]]
    assert calls[0] == wanted[0]
    assert sorted(calls) == sorted(wanted)


# --- pydantic-ai -------------------------------------------------------------------------------


def test_pydantic_ai_default_openai_models_are_its_responses_models(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an app writes, Agent("openai:..."), is pydantic-ai's Responses model, on the client
    it makes from OPENAI_BASE_URL: the proxy, when the app points it there."""
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", TEAM_KEY)
    model = infer_model("openai:gpt")
    assert isinstance(model, OpenAIResponsesModel)
    assert model.base_url.rstrip("/") == url


@contextlib.asynccontextmanager
async def responses_model(url: str, name: str) -> AsyncIterator[OpenAIResponsesModel]:
    """That same model, on a client closed after (the one pydantic-ai makes is process-wide)."""
    async with openai.AsyncOpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0) as client:
        yield OpenAIResponsesModel(name, provider=OpenAIProvider(openai_client=client))


@pytest.mark.parametrize("model", TEXT_MODELS)
async def test_pydantic_ai_default_agent(url: str, model: str) -> None:
    async with responses_model(url, model) as llm:
        result = await pydantic_ai.Agent(llm, instructions="Be brief.").run("Hello")
    assert result.output == golden_choice(model)["content"]
    usage = result.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0


@pytest.mark.parametrize("model", ["gpt", "claude"])
async def test_pydantic_ai_streams_text(url: str, model: str) -> None:
    async with (
        responses_model(url, model) as llm,
        pydantic_ai.Agent(llm).run_stream("Hello") as run,
    ):
        text = await run.get_output()
    assert text == golden_choice(model)["content"]


# --- LangChain ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", TEXT_MODELS)
def test_langchain_chat_on_the_responses_api(url: str, model: str) -> None:
    chat = langchain_openai.ChatOpenAI(
        model=model, base_url=url, api_key=TEAM_KEY, use_responses_api=True, max_retries=0
    )
    message = chat.invoke("Hello")
    assert message.text == golden_choice(model)["content"]
    streamed = "".join(chunk.text for chunk in chat.stream("Hello"))
    assert streamed == golden_choice(model)["content"]


@pytest.mark.parametrize("model", list(EMBEDDING_MODELS))
def test_langchain_embeddings(url: str, model: str) -> None:
    # check_embedding_ctx_length off: tiktoken would fetch its encodings from the network.
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=model,
        base_url=url,
        api_key=TEAM_KEY,
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    vectors = embeddings.embed_documents(["hello", "goodbye"])
    name = {"embed-gemini": "contract.gemini.batch-embed-contents.json"}.get(
        model, "contract.ollama.api-embed.json"
    )
    body: Any = orjson.loads((EMBEDDINGS / name).read_bytes())
    recorded = body["embeddings"]
    if model == "embed-gemini":
        recorded = [item["values"] for item in recorded]
    assert vectors == [float32(vector) for vector in recorded]


def float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))
