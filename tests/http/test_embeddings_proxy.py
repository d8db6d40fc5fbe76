"""POST /v1/embeddings through the running proxy, driven by the openai SDK, for an
OpenAI-compatible upstream and for Gemini, Cohere and Ollama's native embedding APIs.

openai-python asks for base64 unless told otherwise and decodes it itself, so its default call
and ``encoding_format="float"`` must give the same floats: the upstream's vectors, as float32.
"""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.support.harness import (
    TEAM_KEY,
    UPSTREAM_SECRET,
    Servers,
    forget_upstream_requests,
    upstream_requests,
)
from tests.support.hostile import proxied
from tests.support.schema import validate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"
TWO = ["hello", "goodbye"]

# A model per upstream: (provider, the upstream model the emulator finds a recording by, the
# recording, how its vectors are read from it).
MODELS: dict[str, tuple[str, str, str]] = {
    "embed-openai": ("emu", "contract.openai.embeddings.json", "openai"),
    "embed-openai-base64": ("emu", "contract.openai.embeddings.base64.json", "openai"),
    "embed-gemini": ("emu-gemini", "contract.gemini", "gemini"),
    "embed-cohere": ("emu-cohere", "contract.cohere", "cohere"),
    "embed-ollama": ("emu-ollama", "contract.ollama", "ollama"),
}
RECORDING = {
    "contract.openai.embeddings.json": "contract.openai.embeddings.json",
    "contract.openai.embeddings.base64.json": "contract.openai.embeddings.json",  # same vector
    "contract.gemini": "contract.gemini.batch-embed-contents.json",
    "contract.cohere": "contract.cohere.embed.json",
    "contract.ollama": "contract.ollama.api-embed.json",
}


def float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def recorded_vectors(model: str) -> list[list[float]]:
    _, upstream, kind = MODELS[model]
    body: Any = orjson.loads((FIXTURES / RECORDING[upstream]).read_bytes())
    if kind == "openai":
        return [item["embedding"] for item in sorted(body["data"], key=lambda d: d["index"])]
    if kind == "gemini":
        return [item["values"] for item in body["embeddings"]]
    if kind == "cohere":
        return list(body["embeddings"]["float"])
    return list(body["embeddings"])


def inputs(model: str) -> list[str]:
    return TWO[: len(recorded_vectors(model))]


@pytest.fixture(scope="module")
def embeddings_url(servers: Servers) -> str:
    models = {name: {"provider": p, "model": m} for name, (p, m, _) in MODELS.items()}
    url, _ = servers.start_proxy(models)
    return url


@pytest.fixture
def client(embeddings_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=embeddings_url, api_key=TEAM_KEY, max_retries=0) as client:
        yield client


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("encoding", ["default", "float", "base64"])
def test_the_sdk_gets_the_upstreams_vectors(
    client: openai.OpenAI, model: str, encoding: str
) -> None:
    want = [float32(vector) for vector in recorded_vectors(model)]
    if encoding == "default":
        # The SDK asks for base64 and decodes it: float32, exactly.
        answer = client.embeddings.create(model=model, input=inputs(model))
        got = [item.embedding for item in answer.data]
    elif encoding == "float":
        answer = client.embeddings.create(model=model, input=inputs(model), encoding_format="float")
        got = [float32(item.embedding) for item in answer.data]
    else:
        raw = client.embeddings.with_raw_response.create(
            model=model, input=inputs(model), encoding_format="base64"
        )
        body: Any = orjson.loads(raw.content)
        got = [
            list(struct.unpack(f"<{len(want[0])}f", base64.b64decode(d["embedding"])))
            for d in body["data"]
        ]
        answer = raw.parse()
    assert got == want
    assert answer.model == model
    assert [item.index for item in answer.data] == list(range(len(want)))
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 0


@pytest.mark.parametrize(
    ("model", "path", "check"),
    [
        (
            "embed-openai",
            "/v1/embeddings",
            lambda b: b["input"] == ["hello"] and b["dimensions"] == 8,
        ),
        (
            "embed-gemini",
            "/v1beta/models/contract.gemini:batchEmbedContents",
            lambda b: (
                [r["content"]["parts"] for r in b["requests"]]
                == [[{"text": "hello"}], [{"text": "goodbye"}]]
                and all(r["outputDimensionality"] == 8 for r in b["requests"])
            ),
        ),
        (
            "embed-cohere",
            "/v2/embed",
            lambda b: b["texts"] == TWO and b["output_dimension"] == 8,
        ),
        (
            "embed-ollama",
            "/api/embed",
            lambda b: b["input"] == TWO and b["dimensions"] == 8,
        ),
    ],
)
async def test_each_upstream_gets_its_own_request(
    embeddings_url: str, servers: Servers, model: str, path: str, check: Any
) -> None:
    await forget_upstream_requests(servers)
    async with openai.AsyncOpenAI(
        base_url=embeddings_url, api_key=TEAM_KEY, max_retries=0
    ) as client:
        await client.embeddings.create(model=model, input=inputs(model), dimensions=8)
    sent = (await upstream_requests(servers))[-1]
    assert sent["path"] == path
    assert check(sent["json"]), sent["json"]
    headers = sent["headers"]
    assert (
        UPSTREAM_SECRET
        in " ".join(headers.get(name, "") for name in ("authorization", "x-goog-api-key"))
        or model == "embed-ollama"
    )


def test_a_model_without_an_embeddings_api_is_refused(servers: Servers) -> None:
    url, _ = servers.start_proxy({"claude": {"provider": "emu-anthropic", "model": "anthropic"}})
    with (
        openai.OpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as info,
    ):
        client.embeddings.create(model="claude", input="hello")
    error: Any = info.value.body
    assert error["code"] == "unsupported_endpoint" and "/v1/embeddings" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "embed-openai"}, "input"),
        ({"model": "embed-openai", "input": ""}, "input"),
        ({"model": "embed-openai", "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "embed-openai", "input": "x", "dimensions": 0}, "dimensions"),
    ],
)
async def test_bad_embeddings_requests_are_400(
    embeddings_url: str, body: dict[str, Any], param: str
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            embeddings_url + "/embeddings",
            json=body,
            headers={"Authorization": f"Bearer {TEAM_KEY}"},
        ) as response,
    ):
        assert response.status == 400
        error = (await response.json())["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


async def _lengths_apart(request: bytes, writer: asyncio.StreamWriter) -> None:
    data = [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}]
    data.append({"object": "embedding", "index": 1, "embedding": [0.5, 0.25, 0.125]})
    body = orjson.dumps({"object": "list", "data": data, "model": "up"})
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


@pytest.mark.parametrize("encoding", ["float", "base64"])
async def test_vectors_of_different_lengths_are_the_upstream_s_failure(
    servers: Servers, encoding: str
) -> None:
    with proxied(servers, {"lengths-apart": _lengths_apart}) as (upstream, url, _):
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url + "/embeddings",
                json={"model": "lengths-apart", "input": TWO, "encoding_format": encoding},
                headers={"Authorization": f"Bearer {TEAM_KEY}"},
            ) as response,
        ):
            status, body = response.status, await response.json()
    assert upstream.received["lengths-apart"] > 0
    assert status == 502, body
    validate(body, "ErrorResponse")
    assert "different lengths" in body["error"]["message"]
