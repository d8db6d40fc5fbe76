"""The rest of OpenAI's surface that apps call: a model retrieved, Azure's inbound paths, and
the stored-response endpoints a stateless proxy refuses (issue 38, items 3 and 4)."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers
from tests.support.replay import GOLDEN

CHAT: Any = [{"role": "user", "content": "Hello"}]


def root(proxy_url: str) -> str:
    return proxy_url.removesuffix("/v1")


def test_a_model_of_the_team_is_retrieved(proxy_url: str) -> None:
    with openai.OpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0) as client:
        model = client.models.retrieve("gpt-4o")
        listed = {m.id: m for m in client.models.list()}
    assert model.id == "gpt-4o" and model.object == "model"
    assert model == listed["gpt-4o"]


@pytest.mark.parametrize(
    ("key", "model"),
    [
        (TEAM_KEY, "no-such-model"),
        (SUPPORT_KEY, "gpt-4o"),  # another team's: not in this team's listing either
    ],
)
def test_a_model_the_team_cannot_see_is_404(proxy_url: str, key: str, model: str) -> None:
    with (
        openai.OpenAI(base_url=proxy_url, api_key=key, max_retries=0) as client,
        pytest.raises(openai.NotFoundError) as info,
    ):
        client.models.retrieve(model)
    error: Any = info.value.body
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert error["type"] == "invalid_request_error"


async def test_retrieving_a_model_needs_a_key(proxy_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(proxy_url + "/models/gpt-4o") as response,
    ):
        assert response.status == 401
        assert (await response.json())["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/responses/resp_123"),
        ("DELETE", "/responses/resp_123"),
        ("POST", "/responses/resp_123/cancel"),
        ("GET", "/responses/resp_123/input_items"),
    ],
)
async def test_stored_responses_are_404_saying_the_proxy_is_stateless(
    proxy_url: str, method: str, path: str
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, proxy_url + path, headers={"Authorization": f"Bearer {TEAM_KEY}"}
        ) as response,
    ):
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["code"] == "response_not_found" and "stateless" in error["message"]


def azure(proxy_url: str, key: str = TEAM_KEY) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=root(proxy_url), api_key=key, api_version="2024-10-21", max_retries=0
    )


def golden_text(name: str) -> str:
    text: str = orjson.loads((GOLDEN / f"{name}.json").read_bytes())["choices"]["0"]["content"]
    return text


def test_azure_openai_client_chats_through_the_deployment_path(proxy_url: str) -> None:
    with azure(proxy_url) as client:
        whole = client.chat.completions.create(model="gpt-4o", messages=CHAT)
        stream = client.chat.completions.create(model="gpt-4o", messages=CHAT, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert whole.model == "gpt-4o"
    assert whole.choices[0].message.content == golden_text("openai.chat.json")
    assert streamed == golden_text("openai.chat.stream.sse")


def test_azure_deployment_wins_over_the_body_model(proxy_url: str) -> None:
    # azure_deployment puts the deployment in the path; the body's model is another name.
    with openai.AzureOpenAI(
        azure_endpoint=root(proxy_url),
        azure_deployment="gpt-4o",
        api_key=TEAM_KEY,
        api_version="2024-10-21",
        max_retries=0,
    ) as client:
        whole = client.chat.completions.create(model="whatever-the-app-says", messages=CHAT)
    assert whole.model == "gpt-4o"


@pytest.fixture(scope="module")
def slashed_url(servers: Servers) -> str:
    url, _ = servers.start_proxy(
        {
            "meta-llama/Llama-3.1-8B": {"provider": "emu", "model": "openai"},
            "org/team/chat": {"provider": "emu", "model": "openai"},
        }
    )
    return url


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "org/team/chat"])
def test_an_azure_deployment_may_hold_slashes(slashed_url: str, model: str) -> None:
    # As vLLM and Hugging Face name models; "org/team/chat" ends like an endpoint's path.
    with azure(slashed_url) as client:
        whole = client.chat.completions.create(model=model, messages=CHAT)
        stream = client.chat.completions.create(model=model, messages=CHAT, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert whole.model == model
    assert whole.choices[0].message.content == golden_text("openai.chat.json")
    assert streamed == golden_text("openai.chat.stream.sse")


def test_azure_completions_path(proxy_url: str) -> None:
    with azure(proxy_url) as client:
        completion = client.completions.create(model="gpt-4o", prompt="Hello")
    assert completion.model == "gpt-4o" and completion.choices


def test_azure_api_key_must_be_a_team_key(proxy_url: str) -> None:
    with (
        azure(proxy_url, key="not-a-key-at-all") as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.chat.completions.create(model="gpt-4o", messages=CHAT)


async def test_api_key_header_is_only_for_azure_paths(proxy_url: str) -> None:
    """The /v1 paths take a bearer key, as OpenAI's do; api-key alone is no credential there."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy_url + "/chat/completions",
            json={"model": "gpt-4o", "messages": CHAT},
            headers={"api-key": TEAM_KEY},
        ) as response,
    ):
        assert response.status == 401


async def test_azure_path_for_an_unknown_endpoint_is_404(proxy_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            root(proxy_url) + "/openai/deployments/gpt-4o/images/generations?api-version=x",
            json={},
            headers={"api-key": TEAM_KEY},
        ) as response,
    ):
        assert response.status == 404
