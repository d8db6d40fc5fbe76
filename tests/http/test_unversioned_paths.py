"""The API without its /v1 (docs/endpoints.md): a client whose ``base_url`` is the proxy's root
posts to ``/chat/completions``, ``/models``, ... and gets what ``/v1/...`` answers, counted as
the same endpoint; the paths beside the API (probes, /metrics, /admin, Azure's) are untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.support.metrics import Metered, read_samples, scrape, stage, total

KEY = "sk-metrics-alpha"  # tests.support.metrics' team "alpha"
HELLO: Any = [{"role": "user", "content": "Hello"}]
MODELS = {
    "gpt": {"provider": "emu", "model": "openai"},
    "embed": {"provider": "emu", "model": "contract.openai.embeddings.json"},
}
ENDPOINTS = ("chat", "completions", "embeddings", "responses", "models")


@pytest.fixture(scope="module")
def proxy(fixture_dir: Path) -> Iterator[Metered]:
    with stage(fixture_dir) as built:
        yield built.proxy(MODELS, admin={"keys": ["sk-admin"]})


def _calls(client: openai.OpenAI) -> dict[str, Any]:
    """One call of each kind the SDK makes, and what it got: the same whatever the base_url."""
    chat = client.chat.completions.create(model="gpt", messages=HELLO)
    streamed = client.chat.completions.create(model="gpt", messages=HELLO, stream=True)
    completion = client.completions.create(model="gpt", prompt="Say")
    embedding = client.embeddings.create(model="embed", input="hello")
    response = client.responses.create(model="gpt", input="Hello")
    return {
        "chat": chat.choices[0].message.content,
        "chat stream": "".join(c.choices[0].delta.content or "" for c in streamed if c.choices),
        "completions": completion.choices[0].text,
        "embeddings": embedding.data[0].embedding,
        "responses": response.output_text,
        "models": sorted(m.id for m in client.models.list()),
        "model": client.models.retrieve("gpt").id,
    }


def _requests(proxy: Metered) -> dict[str, float]:
    samples = read_samples(scrape(proxy.root + "/metrics"))
    return {
        endpoint: total(samples, "llm_proxy_requests_total", endpoint=endpoint)
        for endpoint in (*ENDPOINTS, "other")
    }


def test_the_sdk_without_v1_gets_the_same_answers_counted_as_the_same_endpoints(
    proxy: Metered,
) -> None:
    before = _requests(proxy)
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client:
        versioned = _calls(client)
    middle = _requests(proxy)
    with openai.OpenAI(base_url=proxy.root, api_key=KEY, max_retries=0) as client:
        unversioned = _calls(client)
    after = _requests(proxy)
    assert versioned["chat"] and versioned["chat stream"] and versioned["embeddings"]
    assert versioned["models"] == ["embed", "gpt"] and versioned["model"] == "gpt"
    assert unversioned == versioned
    # Each form is counted under the same bounded endpoint label, and none as "other".
    counts = {"chat": 2, "completions": 1, "embeddings": 1, "responses": 1, "models": 2}
    for endpoint, count in counts.items():
        assert middle[endpoint] - before[endpoint] == count, endpoint
        assert after[endpoint] - middle[endpoint] == count, endpoint
    assert after["other"] == before["other"]


# (method, path, status, error code or None): the paths around the API keep their own answers.
AROUND = [
    ("GET", "/healthz", 200, None),
    ("GET", "/readyz", 200, None),
    ("GET", "/metrics", 200, None),
    ("HEAD", "/models", 200, None),
    ("GET", "/admin/usage", 403, "admin_key_required"),  # the admin API's own key check
    ("GET", "/chat/completions", 405, "method_not_allowed"),
    ("GET", "/models/nobody", 404, "model_not_found"),
    ("GET", "/responses/resp_1", 404, "response_not_found"),
    ("DELETE", "/responses/resp_1", 404, "response_not_found"),
    ("POST", "/chat/completions/", 404, "unknown_url"),
    ("POST", "/moderations", 404, "unknown_url"),
    ("GET", "/models/", 404, "unknown_url"),
    ("POST", "/v1/v1/chat/completions", 404, "unknown_url"),
    ("GET", "/v1/healthz", 404, "unknown_url"),
    ("GET", "/v1/admin/usage", 404, "unknown_url"),
    ("POST", "/openai/chat/completions", 404, "unknown_url"),
]


@pytest.mark.parametrize(("method", "path", "status", "code"), AROUND)
async def test_paths_around_the_api(
    proxy: Metered, method: str, path: str, status: int, code: str | None
) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, proxy.root + path, headers=headers) as response,
    ):
        raw = await response.read()
    assert response.status == status, raw
    if code is not None:
        assert orjson.loads(raw)["error"]["code"] == code


def test_azure_paths_still_name_the_deployment(proxy: Metered) -> None:
    client = openai.AzureOpenAI(
        azure_endpoint=proxy.root, api_key=KEY, api_version="2024-10-21", max_retries=0
    )
    with client:
        chat = client.chat.completions.create(model="gpt", messages=HELLO)
    assert chat.model == "gpt" and chat.choices[0].message.content
