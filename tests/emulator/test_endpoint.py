"""Routes: which recording a request's endpoint and model ask for, on OpenAI's API and the
providers' native ones, and the models listing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import build_emulator_app
from tests.emulator.exchange import packaged, post, served_type


@pytest.mark.parametrize(
    ("path", "body", "name"),
    [
        ("/v1/chat/completions", {"model": "openai"}, "openai.chat.json"),
        ("/v1/chat/completions", {"model": "openai", "stream": True}, "openai.chat.stream.sse"),
        ("/openai/v1/chat/completions", {"model": "groq"}, "groq.chat.json"),
        ("/chat/completions", {"model": "mistral", "stream": True}, "mistral.chat.stream.sse"),
        ("/v1/chat/completions/", {"model": "deepseek"}, "deepseek.chat.json"),
        ("/v1/completions", {"model": "openai"}, "openai.completions.json"),
        ("/serverless/v1/completions", {"model": "friendli"}, "friendli.completions.json"),
        (
            "/serverless/v1/chat/completions",
            {"model": "friendli", "stream": True},
            "friendli.chat.stream.sse",
        ),
        ("/api/chat/inference", {"model": "maritaca"}, "maritaca.chat-inference.json"),
        (
            "/api/chat/inference",
            {"model": "maritaca", "stream": True},
            "maritaca.chat-inference.stream.sse",
        ),
        ("/api/chat/completions", {"model": "maritaca"}, "maritaca.chat.json"),
        # A model naming a file gets it whatever the endpoint and the stream flag say.
        ("/v1/completions", {"model": "groq.chat.stream.sse"}, "groq.chat.stream.sse"),
        (
            "/v1/chat/completions",
            {"model": "openai.chat.json", "stream": True},
            "openai.chat.json",
        ),
        # Only true streams: a truthy non-boolean is not a stream request.
        ("/v1/chat/completions", {"model": "openai", "stream": "yes"}, "openai.chat.json"),
        ("/v1/responses", {"model": "openai", "input": "Hi"}, "openai.responses.json"),
        (
            "/v1/responses",
            {"model": "openai", "input": "Hi", "stream": True},
            "openai.responses.stream.sse",
        ),
        # Azure's v1 path, as an Azure provider with responses: true sends it.
        (
            "/openai/v1/responses",
            {"model": "openai", "input": [], "stream": True},
            "openai.responses.stream.sse",
        ),
        # Native APIs, at the root as at the providers' hosts, or under a prefix.
        ("/v1/messages", {"model": "anthropic"}, "anthropic.messages.json"),
        (
            "/anthropic/v1/messages",
            {"model": "anthropic", "stream": True},
            "anthropic.messages.stream.sse",
        ),
        ("/v1beta/models/gemini:generateContent", {"contents": []}, "gemini.generate-content.json"),
        # Gemini's body has no stream flag: the path says whether.
        (
            "/v1beta/models/gemini:generateContent",
            {"contents": [], "stream": True},
            "gemini.generate-content.json",
        ),
        (
            "/v1beta/models/gemini:streamGenerateContent?alt=sse",
            {"contents": []},
            "gemini.generate-content.stream.sse",
        ),
        (
            "/google/v1beta/models/gemini:streamGenerateContent",
            {"contents": []},
            "gemini.generate-content.stream.json-array.json",
        ),
        (
            "/v1beta/models/gemini.generate-content.stream.sse:streamGenerateContent",
            {"contents": []},
            "gemini.generate-content.stream.sse",
        ),
        ("/v1/models/gemini:generateContent", {}, "gemini.generate-content.json"),
        ("/v2/chat", {"model": "cohere"}, "cohere.chat.json"),
        ("/v2/chat", {"model": "cohere", "stream": True}, "cohere.chat.stream.sse"),
        # Ollama streams unless told not to.
        ("/api/chat", {"model": "ollama"}, "ollama.api-chat.stream.ndjson"),
        ("/api/chat", {"model": "ollama", "stream": True}, "ollama.api-chat.stream.ndjson"),
        ("/api/chat", {"model": "ollama", "stream": False}, "ollama.api-chat.json"),
        ("/tgi/tgi/generate_stream", {"inputs": "Hi"}, "tgi.generate-stream.sse"),
        (
            "/tgi/tgi.generate-stream.sse/generate_stream",
            {"inputs": "Hi", "parameters": {"details": True}},
            "tgi.generate-stream.sse",
        ),
        ("/tgi.generate-stream.sse/generate", {"inputs": "Hi"}, "tgi.generate-stream.sse"),
    ],
)
async def test_route_serves_recording(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, body: object, name: str
) -> None:
    status, headers, served = await post(session, emulator, path, body)
    assert (status, served) == (200, packaged(name))
    assert headers["Content-Type"] == served_type(name)


@pytest.mark.parametrize(
    ("path", "body", "served"),
    [
        ("/api/generate", {"model": "m"}, b'{"response":"a","done":false}\n'),
        ("/api/generate", {"model": "m", "stream": False}, b'{"response":"a","done":true}'),
        ("/m/generate", {"inputs": "Hi"}, b'[{"generated_text":"a"}]'),
        ("/m/generate_stream", {"inputs": "Hi"}, b'data:{"token":{"text":"a"}}\n\n'),
        # A TGI model's name may be a whole file's, with dots.
        ("/tgi/m.generate.json/generate", {"inputs": "Hi"}, b'[{"generated_text":"a"}]'),
    ],
)
async def test_ollama_generate_and_tgi_generate_find_their_recordings(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    path: str,
    body: object,
    served: bytes,
) -> None:
    (tmp_path / "m.api-generate.stream.ndjson").write_bytes(b'{"response":"a","done":false}\n')
    (tmp_path / "m.api-generate.json").write_bytes(b'{"response":"a","done":true}')
    (tmp_path / "m.generate.json").write_bytes(b'[{"generated_text":"a"}]')
    (tmp_path / "m.generate-stream.sse").write_bytes(b'data:{"token":{"text":"a"}}\n\n')
    server = await aiohttp_server(build_emulator_app(tmp_path))
    status, _, got = await post(session, server, path, body)
    assert (status, got) == (200, served)


@pytest.mark.parametrize(
    ("path", "body", "name"),
    [
        ("/v1/embeddings", {"model": "m", "input": "Hi"}, "m.embeddings.json"),
        # Never streamed, whatever the body says.
        (
            "/openai/v1/embeddings",
            {"model": "m", "input": "Hi", "stream": True},
            "m.embeddings.json",
        ),
        (
            "/v1beta/models/m:batchEmbedContents",
            {"requests": [{"model": "models/m", "content": {"parts": [{"text": "Hi"}]}}]},
            "m.batch-embed-contents.json",
        ),
        (
            "/v2/embed",
            {"model": "m", "texts": ["Hi"], "input_type": "search_document"},
            "m.embed.json",
        ),
        ("/api/embed", {"model": "m", "input": ["Hi"]}, "m.api-embed.json"),
    ],
)
async def test_embeddings_endpoints_find_their_recordings(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    path: str,
    body: dict[str, Any],
    name: str,
) -> None:
    for each in ("embeddings", "batch-embed-contents", "embed", "api-embed"):
        (tmp_path / f"m.{each}.json").write_bytes(orjson.dumps({"file": each}))
    server = await aiohttp_server(build_emulator_app(tmp_path))
    status, headers, got = await post(session, server, path, body)
    assert (status, got) == (200, (tmp_path / name).read_bytes())
    assert headers["Content-Type"] == "application/json"
    async with session.get(server.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert [(entry["path"], entry["json"]) for entry in log] == [(path.split("?")[0], body)]


async def test_packaged_embeddings_answer_the_demo(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai", "input": "Hi", "encoding_format": "base64"}
    status, _, got = await post(session, emulator, "/v1/embeddings", body)
    assert (status, got) == (200, packaged("openai.embeddings.json"))


async def test_exact_name_comes_before_the_endpoint_pattern(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings))
    status, _, body = await post(session, server, "/v1/completions", {"model": "m.chat.json"})
    assert (status, body) == (200, b'{"exact":true}')


@pytest.mark.parametrize("path", ["/v1/models", "/openai/v1/models", "/models", "/v1beta/models"])
async def test_models_lists_what_can_be_asked_for(
    session: aiohttp.ClientSession, emulator: TestServer, path: str
) -> None:
    async with session.get(emulator.make_url(path)) as resp:
        assert resp.status == 200
        listing = await resp.json()
    ids = {model["id"] for model in listing["data"]}
    assert listing["object"] == "list"
    assert {"openai", "maritaca", "groq.chat.stream.sse"} <= ids
    assert "README.md" not in ids


async def test_stored_responses_are_not_kept(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    for method in ("GET", "DELETE"):
        async with session.request(method, emulator.make_url("/v1/responses/resp_1")) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "unknown_url"
    async with session.get(emulator.make_url("/v1/responses")) as resp:
        assert (resp.status, resp.headers["Allow"]) == (405, "POST")
