"""The upstream emulator, exercised over loopback TCP with real aiohttp clients."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import RECORDINGS_DIR, build_emulator_app, run_emulator
from proxy.emulator.__main__ import parse_args
from proxy.emulator.fault import Fault, FaultError, parse_fault, split_model
from proxy.emulator.recording import (
    content_type,
    parse_recording,
    recording_status,
    split_array,
    split_events,
    split_lines,
)
from proxy.emulator.server import EMULATOR, REQUEST_LOG_SIZE
from tests.support.schema import validate

CATALOGUE = Path(__file__).parent / "fixtures" / "providers"
EMBEDDINGS = Path(__file__).parent / "fixtures" / "embeddings"
RESPONSES = Path(__file__).parent / "fixtures" / "responses"
# Packaged files that are ours, not the catalogue's, and the fixture each is a copy of.
OWN = {
    "openai.embeddings.json": EMBEDDINGS / "contract.openai.embeddings.json",
    "openai.responses.json": RESPONSES / "contract.openai.responses.json",
    "openai.responses.stream.sse": RESPONSES / "contract.openai.responses.stream.sse",
}
PACKAGED = (
    "anthropic.messages.json",
    "anthropic.messages.stream.sse",
    "azure.chat.stream.model-router.sse",
    "cohere.chat.json",
    "cohere.chat.stream.sse",
    "deepseek.chat.json",
    "deepseek.chat.stream.reasoning.sse",
    "friendli.chat.json",
    "friendli.chat.stream.sse",
    "friendli.completions.json",
    "friendli.completions.stream.sse",
    "gemini.generate-content.json",
    "gemini.generate-content.stream.json-array.json",
    "gemini.generate-content.stream.sse",
    "groq.chat.json",
    "groq.chat.stream.sse",
    "maritaca.chat-inference.json",
    "maritaca.chat-inference.stream.sse",
    "maritaca.chat.json",
    "mistral.chat.json",
    "mistral.chat.stream.sse",
    "ollama.api-chat.json",
    "ollama.api-chat.stream.ndjson",
    "openai.chat.json",
    "openai.chat.stream.sse",
    "openai.chat.stream.tool-calls.sse",
    "openai.completions.json",
    "openai.completions.stream.sse",
    "openai.embeddings.json",
    "openai.responses.json",
    "openai.responses.stream.sse",
    "tgi.generate-stream.sse",
)
CRLF_STREAM = (
    b'data: {"n":1}\r\n\r\n'
    b": keep-alive comment\r\n\r\n"
    b'event: message\r\nid: 7\r\ndata: {"n":2}\r\n\r\n'
    b"data: [DONE]\r\n"
)


@pytest.fixture(autouse=True)
def _no_logged_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    # A fault must look broken to the client only: the emulator itself logs no tracebacks.
    yield
    # Servers are closed in teardown, before this fixture's own teardown.
    records = [r for when in ("setup", "call", "teardown") for r in caplog.get_records(when)]
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
async def emulator(aiohttp_server: AiohttpServer) -> TestServer:
    return await aiohttp_server(build_emulator_app())


@pytest.fixture
def recordings(tmp_path: Path) -> Path:
    (tmp_path / "crlf.chat.stream.sse").write_bytes(CRLF_STREAM)
    (tmp_path / "lines.chat.stream.ndjson").write_bytes(b'{"a":1}\n{"b":2}\r\n{"c":3}')
    (tmp_path / "three.chat.stream.sse").write_bytes(b"data: 1\n\ndata: 2\n\ndata: 3\n\n")
    (tmp_path / "m.chat.json").write_bytes(b'{"exact":true}')
    (tmp_path / "m.chat.json.completions.json").write_bytes(b'{"exact":false}')
    (tmp_path / "README.md").write_bytes(b"# not a recording\n")
    return tmp_path


async def post(
    session: aiohttp.ClientSession, server: TestServer, path: str, body: object, **kwargs: Any
) -> tuple[int, dict[str, str], bytes]:
    async with session.post(server.make_url(path), data=orjson.dumps(body), **kwargs) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def packaged(name: str) -> bytes:
    return (RECORDINGS_DIR / name).read_bytes()


def served_type(name: str) -> str:
    if name.endswith(".sse"):
        return "text/event-stream"
    return "application/x-ndjson" if name.endswith(".ndjson") else "application/json"


# Splitting recordings: joined, the pieces are always exactly the input.


@pytest.mark.parametrize(
    ("data", "events"),
    [
        (b"data: a\n\ndata: b\n\n", [b"data: a\n\n", b"data: b\n\n"]),
        (b"data: a\r\n\r\ndata: b\r\n\r\n", [b"data: a\r\n\r\n", b"data: b\r\n\r\n"]),
        (b"data: a\r\rdata: b\r\r", [b"data: a\r\r", b"data: b\r\r"]),
        (b"data: a\r\n\ndata: b\n\r\n", [b"data: a\r\n\n", b"data: b\n\r\n"]),
        (b"data: a\r\ndata: b\r\n", [b"data: a\r\ndata: b\r\n"]),
        (b": ping\n\ndata: a\n\n", [b": ping\n\n", b"data: a\n\n"]),
        (b"data: a\n\ndata: [DONE]\n", [b"data: a\n\n", b"data: [DONE]\n"]),
        (b"data: a\n\ndata: [DONE]", [b"data: a\n\n", b"data: [DONE]"]),
        (b"\n\ndata: a\n\n\n", [b"\n", b"\n", b"data: a\n\n", b"\n"]),
        (b"", []),
    ],
)
def test_split_events(data: bytes, events: list[bytes]) -> None:
    assert list(split_events(data)) == events


@pytest.mark.parametrize("name", [n for n in PACKAGED if n.endswith(".sse")])
def test_split_events_keeps_packaged_streams_whole(name: str) -> None:
    events = split_events(packaged(name))
    assert b"".join(events) == packaged(name)
    assert all(event.endswith((b"\n\n", b"\r\n\r\n")) for event in events[:-1])


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b'{"a":1}\n{"b":2}\n', [b'{"a":1}\n', b'{"b":2}\n']),
        (b'{"a":"x\ry"}\n{"b":2}', [b'{"a":"x\ry"}\n', b'{"b":2}']),
    ],
)
def test_split_lines(data: bytes, lines: list[bytes]) -> None:
    assert list(split_lines(data)) == lines


@pytest.mark.parametrize(
    ("data", "pieces"),
    [
        (b'[{"a":1}\r\n,\r\n{"b":2}\r\n]', [b'[{"a":1}\r\n', b',\r\n{"b":2}\r\n', b"]"]),
        (b'[{"a":[1,2]},{"b":{"c":3}}]\n', [b'[{"a":[1,2]}', b',{"b":{"c":3}}', b"]\n"]),
        # Brackets, commas and escaped quotes inside strings never split.
        (
            b'[{"t":"a,]\\"}["},{"u":"\\\\"}]',
            [b'[{"t":"a,]\\"}["}', b',{"u":"\\\\"}', b"]"],
        ),
        (b'  [1, "x"]', [b"  [1", b', "x"', b"]"]),
        (b"[]", [b"[", b"]"]),
        # An array cut short keeps what it has; a body that is no array stays whole.
        (b'[{"a":1},{"b"', [b'[{"a":1}', b',{"b"']),
        (b'{"error":{"code":429}}', [b'{"error":{"code":429}}']),
        (b"", []),
    ],
)
def test_split_array(data: bytes, pieces: list[bytes]) -> None:
    assert list(split_array(data)) == pieces
    assert b"".join(pieces) == data


def test_split_array_gives_the_gemini_recording_one_element_a_piece() -> None:
    data = packaged("gemini.generate-content.stream.json-array.json")
    pieces = split_array(data)
    assert b"".join(pieces) == data
    assert len(pieces) == 4
    assert pieces[0].startswith(b"[{") and pieces[-1] == b"]"
    elements = [orjson.loads(piece.lstrip(b"[,")) for piece in pieces[:-1]]
    assert [element["responseId"] for element in elements] == ["bH6LaZW8Fp_3nsEPqtaSwQ4"] * 3


@pytest.mark.parametrize(
    ("name", "kind", "streamed"),
    [
        ("g.generate-content.stream.json-array.json", "application/json", True),
        ("g.generate-content.json", "application/json", False),
        ("o.api-chat.stream.ndjson", "application/x-ndjson", True),
        ("a.messages.stream.sse", "text/event-stream", True),
    ],
)
def test_recording_format_follows_the_name(name: str, kind: str, streamed: bool) -> None:
    recording = parse_recording(name, b"[1,2]")
    assert (recording.content_type, recording.streamed) == (kind, streamed)
    assert content_type("." + name.split(".", 1)[1]) == kind  # All of the name after the model.


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("openai.chat.json", 200),
        ("openai.error.json", 400),
        ("gemini.error.429.json", 429),
        ("x.error.503.json", 503),
        ("anthropic.error.overloaded.json", 529),
        ("openrouter.chat.stream.error.sse", 200),
        ("anthropic.messages.stream.error.sse", 200),
    ],
)
def test_recording_status(name: str, status: int) -> None:
    assert recording_status(name) == status


# The packaged recordings.


def test_packaged_recordings_are_the_listed_ones() -> None:
    names = sorted(path.name for path in RECORDINGS_DIR.iterdir() if path.name != "README.md")
    assert names == sorted(PACKAGED)


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_recording_is_a_copy_of_the_catalogue(name: str) -> None:
    source = OWN.get(name, CATALOGUE / name)
    if not source.exists():
        pytest.skip(f"{source} is not there to compare with")
    assert packaged(name) == source.read_bytes()


@pytest.mark.parametrize("name", PACKAGED)
async def test_each_packaged_recording_is_served_by_name(
    session: aiohttp.ClientSession, emulator: TestServer, name: str
) -> None:
    path = "/api/chat/inference" if "chat-inference" in name else "/v1/chat/completions"
    status, headers, body = await post(session, emulator, path, {"model": name})
    assert (status, body) == (200, packaged(name))
    assert headers["Content-Type"] == served_type(name)


# Routes and the choice of recording.


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


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        (
            "/v2/embed",
            {"model": "m@status=429", "texts": ["Hi"]},
            {"message": "emulated fault: status 429"},
        ),
        (
            "/api/embed",
            {"model": "m@status=429", "input": ["Hi"]},
            {"error": "emulated fault: status 429"},
        ),
        (
            "/v1beta/models/m@status=429:batchEmbedContents",
            {"requests": []},
            {
                "error": {
                    "code": 429,
                    "message": "emulated fault: status 429",
                    "status": "RESOURCE_EXHAUSTED",
                }
            },
        ),
    ],
)
async def test_native_embeddings_faults_in_the_providers_envelope(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: dict[str, Any],
    error: dict[str, Any],
) -> None:
    status, _, got = await post(session, emulator, path, body)
    assert (status, orjson.loads(got)) == (429, error)


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


@pytest.mark.parametrize(
    ("model", "stream"),
    [
        ("nope", False),
        ("nope", True),
        ("README.md", False),
        ("../recordings/openai.chat.json", False),
        ("/etc/passwd", False),
        (".openai.chat.json", False),
    ],
)
async def test_unknown_model_is_404(
    session: aiohttp.ClientSession, emulator: TestServer, model: str, stream: bool
) -> None:
    body = {"model": model, "stream": stream}
    status, headers, served = await post(session, emulator, "/v1/chat/completions", body)
    assert status == 404
    assert headers["Content-Type"] == "application/json"
    assert orjson.loads(served) == {
        "error": {
            "message": f"no recording for model '{model}'",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


@pytest.mark.parametrize(
    ("body", "message", "param", "code"),
    [
        (b"{not json", "the request body is not valid JSON", None, "invalid_json"),
        (b"", "the request body is not valid JSON", None, "invalid_json"),
        (b"[1]", "the request body must be a JSON object with a string 'model'", "model", None),
        (
            b'{"model": 7}',
            "the request body must be a JSON object with a string 'model'",
            "model",
            None,
        ),
    ],
)
async def test_bad_body_is_400(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    body: bytes,
    message: str,
    param: str | None,
    code: str | None,
) -> None:
    async with session.post(emulator.make_url("/v1/chat/completions"), data=body) as resp:
        assert resp.status == 400
        error = await resp.json()
    assert error == {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }


async def test_unknown_path_is_404(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    status, _, body = await post(session, emulator, "/v1/moderations", {"model": "openai"})
    assert status == 404
    assert orjson.loads(body)["error"]["code"] == "unknown_url"


async def test_wrong_method_is_405(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    async with session.get(emulator.make_url("/v1/chat/completions")) as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"
        assert (await resp.json())["error"]["type"] == "invalid_request_error"


# Native APIs: their errors come in the provider's own envelope.

NO_RECORDING = "no recording for model 'nope'"
NOT_JSON = "the request body is not valid JSON"
NO_MODEL = "the request body must be a JSON object with a string 'model'"


def anthropic_error(kind: str, message: str) -> object:
    return {"type": "error", "error": {"type": kind, "message": message}}


def google_error(code: int, status: str, message: str) -> object:
    return {"error": {"code": code, "message": message, "status": status}}


def tgi_error(kind: str, message: str) -> object:
    return {"error": message, "error_type": kind}


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/v1/messages", {"model": "nope"}, anthropic_error("not_found_error", NO_RECORDING)),
        (
            "/v1/messages",
            {"model": "nope", "stream": True},
            anthropic_error("not_found_error", NO_RECORDING),
        ),
        ("/v1beta/models/nope:generateContent", {}, google_error(404, "NOT_FOUND", NO_RECORDING)),
        (
            "/v1beta/models/nope:streamGenerateContent?alt=sse",
            {},
            google_error(404, "NOT_FOUND", NO_RECORDING),
        ),
        ("/v2/chat", {"model": "nope", "stream": True}, {"message": NO_RECORDING}),
        ("/api/chat", {"model": "nope"}, {"error": NO_RECORDING}),
        ("/api/generate", {"model": "nope", "stream": False}, {"error": NO_RECORDING}),
        ("/tgi/nope/generate_stream", {"inputs": "Hi"}, tgi_error("validation", NO_RECORDING)),
        ("/tgi/nope/generate", {"inputs": "Hi"}, tgi_error("validation", NO_RECORDING)),
    ],
)
async def test_native_unknown_model_is_404(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, body: object, error: object
) -> None:
    status, headers, served = await post(session, emulator, path, body)
    assert (status, headers["Content-Type"]) == (404, "application/json")
    assert orjson.loads(served) == error


@pytest.mark.parametrize(
    ("path", "model"),
    [
        # The server decodes %2F, but the model is only the path's last segment.
        ("/v1beta/models/..%2F..%2Fsecret.json:generateContent", "secret.json"),
        ("/v1beta/models/.openai.chat.json:generateContent", ".openai.chat.json"),
        ("/tgi/..%2F..%2Fsecret.json/generate", "secret.json"),
        ("/README.md/generate_stream", "README.md"),
    ],
)
async def test_a_model_in_the_path_cannot_leave_the_folder(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, model: str
) -> None:
    # A string URL: the client sends the %2F escapes as they are.
    async with session.post(f"http://{emulator.host}:{emulator.port}{path}", json={}) as resp:
        assert resp.status == 404
        assert f"no recording for model '{model}'" in await resp.text()


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/v1/messages", b"{", anthropic_error("invalid_request_error", NOT_JSON)),
        ("/v1/messages", b'{"max_tokens": 1}', anthropic_error("invalid_request_error", NO_MODEL)),
        (
            "/v1beta/models/gemini:generateContent",
            b"{",
            google_error(400, "INVALID_ARGUMENT", NOT_JSON),
        ),
        (
            "/v1beta/models/gemini:streamGenerateContent?alt=sse",
            b"[1]",
            google_error(400, "INVALID_ARGUMENT", "the request body must be a JSON object"),
        ),
        (
            "/v1beta/models/:generateContent",
            b"{}",
            google_error(
                400, "INVALID_ARGUMENT", "the path names no model before :generateContent"
            ),
        ),
        ("/v2/chat", b"", {"message": NOT_JSON}),
        ("/v2/chat", b'{"model": null}', {"message": NO_MODEL}),
        ("/api/chat", b"{", {"error": NOT_JSON}),
        ("/api/generate", b"[]", {"error": NO_MODEL}),
        ("/tgi/tgi/generate_stream", b"nope", tgi_error("validation", NOT_JSON)),
        (
            "/generate_stream",
            b'{"inputs": "Hi"}',
            tgi_error("validation", "the path names no model before /generate_stream"),
        ),
    ],
)
async def test_native_bad_body_is_400(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, body: bytes, error: object
) -> None:
    async with session.post(emulator.make_url(path), data=body) as resp:
        assert (resp.status, resp.headers["Content-Type"]) == (400, "application/json")
        assert await resp.json() == error


@pytest.mark.parametrize(
    ("path", "error"),
    [
        (
            "/v1/messages",
            anthropic_error(
                "invalid_request_error", "GET is not allowed on /v1/messages; use POST"
            ),
        ),
        ("/api/chat", {"error": "GET is not allowed on /api/chat; use POST"}),
    ],
)
async def test_native_wrong_method_is_405(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, error: object
) -> None:
    async with session.get(emulator.make_url(path)) as resp:
        assert (resp.status, resp.headers["Allow"]) == (405, "POST")
        assert await resp.json() == error


# Streams: the exact bytes, event by event.


async def read_http_chunks(resp: aiohttp.ClientResponse) -> list[bytes]:
    chunks, current = [], b""
    async for data, end_of_chunk in resp.content.iter_chunks():
        current += data
        if end_of_chunk:
            chunks.append(current)
            current = b""
    assert current == b""
    return chunks


async def test_crlf_stream_is_served_exactly_one_event_per_chunk(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings))
    body = {"model": "crlf", "stream": True}
    async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        chunks = await read_http_chunks(resp)
    assert b"".join(chunks) == CRLF_STREAM
    assert chunks == list(split_events(CRLF_STREAM))
    assert len(chunks) == 4


async def test_ndjson_is_served_line_by_line(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings))
    body = {"model": "lines.chat.stream.ndjson"}
    async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
        assert resp.headers["Content-Type"] == "application/x-ndjson"
        chunks = await read_http_chunks(resp)
    assert chunks == [b'{"a":1}\n', b'{"b":2}\r\n', b'{"c":3}']


async def test_chunk_delay_paces_events(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, recordings: Path
) -> None:
    server = await aiohttp_server(build_emulator_app(recordings, chunk_delay=0.1))
    started = time.monotonic()
    body = {"model": "three", "stream": True}
    async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
        chunks = await read_http_chunks(resp)
    assert chunks == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(
    ("path", "body", "name", "split"),
    [
        (
            "/v1/messages",
            {"model": "anthropic", "stream": True},
            "anthropic.messages.stream.sse",
            split_events,
        ),
        (
            "/v1beta/models/gemini:streamGenerateContent?alt=sse",
            {"contents": []},
            "gemini.generate-content.stream.sse",
            split_events,
        ),
        (
            "/v1beta/models/gemini:streamGenerateContent",
            {"contents": []},
            "gemini.generate-content.stream.json-array.json",
            split_array,
        ),
        ("/v2/chat", {"model": "cohere", "stream": True}, "cohere.chat.stream.sse", split_events),
        ("/api/chat", {"model": "ollama"}, "ollama.api-chat.stream.ndjson", split_lines),
        ("/tgi/tgi/generate_stream", {"inputs": "Hi"}, "tgi.generate-stream.sse", split_events),
    ],
)
async def test_native_stream_is_written_in_its_units(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: object,
    name: str,
    split: Callable[[bytes], tuple[bytes, ...]],
) -> None:
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == served_type(name)
        assert "Content-Length" not in resp.headers
        chunks = await read_http_chunks(resp)
    assert b"".join(chunks) == packaged(name)
    assert chunks == list(split(packaged(name)))
    assert len(chunks) > 2


async def test_gemini_array_stream_is_written_one_element_at_a_time(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    url = emulator.make_url("/v1beta/models/gemini:streamGenerateContent")
    async with session.post(url, json={"contents": []}) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        chunks = await read_http_chunks(resp)
    assert [chunk[:1] for chunk in chunks] == [b"[", b",", b",", b"]"]
    elements = orjson.loads(b"".join(chunks))
    assert [len(element["candidates"]) for element in elements] == [1, 1, 1]


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("g.error.429.json", 429),
        ("a.error.overloaded.json", 529),
        ("o.error.json", 400),
        ("r.chat.stream.error.sse", 200),
    ],
)
async def test_error_recording_status(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    name: str,
    status: int,
) -> None:
    (tmp_path / name).write_bytes(b'{"error":{"message":"recorded"}}')
    server = await aiohttp_server(build_emulator_app(tmp_path))
    served_status, _, body = await post(session, server, "/v1/chat/completions", {"model": name})
    assert (served_status, body) == (status, b'{"error":{"message":"recorded"}}')


def test_chunk_delay_must_be_seconds() -> None:
    with pytest.raises(ValueError, match="chunk_delay"):
        build_emulator_app(chunk_delay=-1)


# The request log.


async def test_request_log_shows_what_was_sent(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai", "stream": True, "stream_options": {"include_usage": True}}
    headers = [("Authorization", "Bearer sk-upstream"), ("X-Dup", "a"), ("X-Dup", "b")]
    params = {"api-version": "2024-10-21"}
    url = emulator.make_url("/openai/deployments/d/chat/completions")
    async with session.post(url, json=body, headers=headers, params=params) as resp:
        await resp.read()
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert len(log) == 1
    (entry,) = log
    assert entry["method"] == "POST"
    assert entry["path"] == "/openai/deployments/d/chat/completions"
    assert entry["query_string"] == "api-version=2024-10-21"
    assert entry["query"] == {"api-version": "2024-10-21"}
    assert entry["headers"]["authorization"] == "Bearer sk-upstream"
    assert entry["headers"]["x-dup"] == "a, b"
    assert entry["json"] == body

    async with session.delete(emulator.make_url("/_emulator/requests")) as resp:
        assert resp.status == 204
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        assert await resp.json() == []


async def test_request_log_records_bad_requests_too(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    async with session.post(emulator.make_url("/v1/chat/completions"), data=b"{") as resp:
        assert resp.status == 400
    async with session.get(emulator.make_url("/nowhere")) as resp:
        assert resp.status == 404
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert [(e["method"], e["path"], e["json"]) for e in log] == [
        ("POST", "/v1/chat/completions", None),
        ("GET", "/nowhere", None),
    ]


async def test_request_log_shows_native_requests(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    gemini = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    tgi = {"inputs": "Hi", "parameters": {"details": True}}
    anthropic = {"model": "anthropic", "max_tokens": 16, "messages": [], "stream": True}
    requests = [
        ("/v1beta/models/gemini:streamGenerateContent?alt=sse", gemini),
        ("/tgi/tgi.generate-stream.sse/generate_stream", tgi),
        ("/v1/messages", anthropic),
    ]
    for path, body in requests:
        assert (await post(session, emulator, path, body))[0] == 200
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert [(e["method"], e["path"], e["query"], e["json"]) for e in log] == [
        ("POST", "/v1beta/models/gemini:streamGenerateContent", {"alt": "sse"}, gemini),
        ("POST", "/tgi/tgi.generate-stream.sse/generate_stream", {}, tgi),
        ("POST", "/v1/messages", {}, anthropic),
    ]


async def test_request_log_is_bounded(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    for index in range(REQUEST_LOG_SIZE + 2):
        async with session.get(emulator.make_url(f"/nowhere/{index}")) as resp:
            await resp.read()
    async with session.get(emulator.make_url("/_emulator/requests")) as resp:
        log = await resp.json()
    assert len(log) == REQUEST_LOG_SIZE
    assert (log[0]["path"], log[-1]["path"]) == ("/nowhere/2", f"/nowhere/{REQUEST_LOG_SIZE + 1}")


# Faults.


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        ("status=503", Fault("status", 503)),
        ("html=502", Fault("html", 502)),
        ("reset-after=0", Fault("reset-after", 0)),
        ("stall-after=10", Fault("stall-after", 10)),
        ("slow-first-byte=0.5", Fault("slow-first-byte", 0.5)),
        ("garbage", Fault("garbage", 4096)),
        ("garbage=3", Fault("garbage", 3)),
        ("hang", Fault("hang")),
        ("endless", Fault("endless")),
        ("no-newline", Fault("no-newline")),
        ("not-object", Fault("not-object")),
        ("wrong-type", Fault("wrong-type")),
    ],
)
def test_parse_fault(spec: str, fault: Fault) -> None:
    assert parse_fault(spec) == fault


@pytest.mark.parametrize(
    "spec",
    [
        "nope",
        "status",
        "status=200",
        "status=abc",
        "html=600",
        "reset-after=-1",
        "hang=1",
        "slow-first-byte=nan",
        "slow-first-byte=-1",
        "",
    ],
)
def test_parse_fault_rejects(spec: str) -> None:
    with pytest.raises(FaultError):
        parse_fault(spec)


def test_split_model() -> None:
    assert split_model("openai") == ("openai", None)
    assert split_model("openai@reset-after=200") == ("openai", "reset-after=200")
    assert split_model("openai@") == ("openai", "")


@pytest.mark.parametrize(
    ("code", "error_type", "retry_after"),
    [
        (429, "rate_limit_error", "1"),
        (503, "server_error", "1"),
        (500, "server_error", None),
        (401, "authentication_error", None),
        (400, "invalid_request_error", None),
    ],
)
async def test_fault_status(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    code: int,
    error_type: str,
    retry_after: str | None,
) -> None:
    body = {"model": f"openai@status={code}"}
    status, headers, served = await post(session, emulator, "/v1/chat/completions", body)
    assert status == code
    assert headers["Content-Type"] == "application/json"
    assert headers.get("Retry-After") == retry_after
    assert orjson.loads(served)["error"]["type"] == error_type


async def test_fault_html(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    body = {"model": "openai@html=502"}
    status, headers, served = await post(session, emulator, "/v1/chat/completions", body)
    assert status == 502
    assert headers["Content-Type"] == "text/html"
    assert b"<title>502 Bad Gateway</title>" in served


@pytest.mark.parametrize("stream", [True, False])
async def test_fault_reset_after(
    session: aiohttp.ClientSession, emulator: TestServer, stream: bool
) -> None:
    name = "openai.chat.stream.sse" if stream else "openai.chat.json"
    received = b""
    body = {"model": "openai@reset-after=100", "stream": stream}
    async with session.post(emulator.make_url("/v1/chat/completions"), json=body) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for data in resp.content.iter_any():
                received += data
    assert packaged(name).startswith(received)
    assert len(received) <= 100


async def test_fault_hang(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    timeout = aiohttp.ClientTimeout(total=0.3)
    with pytest.raises(TimeoutError):
        await post(session, emulator, "/v1/chat/completions", {"model": "x@hang"}, timeout=timeout)


async def test_fault_stall_after(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    body = {"model": "openai@stall-after=50", "stream": True}
    timeout = aiohttp.ClientTimeout(sock_read=0.3)
    url = emulator.make_url("/v1/chat/completions")
    async with session.post(url, json=body, timeout=timeout) as resp:
        assert resp.status == 200
        assert await resp.content.readexactly(50) == packaged("openai.chat.stream.sse")[:50]
        with pytest.raises(TimeoutError):
            await resp.content.read(1)


async def test_fault_slow_first_byte(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    started = time.monotonic()
    body = {"model": "openai@slow-first-byte=0.2"}
    status, _, served = await post(session, emulator, "/v1/chat/completions", body)
    assert time.monotonic() - started >= 0.2
    assert (status, served) == (200, packaged("openai.chat.json"))


@pytest.mark.parametrize(("spec", "size"), [("garbage", 4096), ("garbage=16", 16)])
async def test_fault_garbage(
    session: aiohttp.ClientSession, emulator: TestServer, spec: str, size: int
) -> None:
    body = {"model": f"x@{spec}", "stream": True}
    status, headers, served = await post(session, emulator, "/v1/chat/completions", body)
    assert (status, headers["Content-Type"], len(served)) == (200, "text/event-stream", size)
    with pytest.raises(UnicodeDecodeError):
        served.decode()


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/v1/chat/completions", lambda c: c["object"] == "chat.completion.chunk"),
        ("/v1/completions", lambda c: c["object"] == "text_completion"),
        ("/api/chat/inference", lambda c: c == {"text": "x "}),
    ],
)
async def test_fault_endless(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, check: Any
) -> None:
    body = {"model": "openai@endless", "stream": True}
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for _ in range(20):
            line = await resp.content.readline()
            assert line.startswith(b"data: ")
            assert check(orjson.loads(line[6:]))
            assert await resp.content.readline() == b"\n"


async def test_fault_no_newline(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    body = {"model": "x@no-newline", "stream": True}
    async with session.post(emulator.make_url("/v1/chat/completions"), json=body) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        start = await resp.content.readexactly(64 * 1024)
    assert start.startswith(b"data: ")
    assert b"\n" not in start
    assert b"\r" not in start


@pytest.mark.parametrize(
    ("spec", "content_type", "expected"),
    [
        ("not-object", "application/json", b"[1,2,3]"),
        ("wrong-type", "text/plain", b"hello"),
    ],
)
async def test_fault_wrong_body(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    spec: str,
    content_type: str,
    expected: bytes,
) -> None:
    body = {"model": f"x@{spec}"}
    status, headers, served = await post(session, emulator, "/v1/chat/completions", body)
    assert (status, headers["Content-Type"], served) == (200, content_type, expected)


async def test_fault_that_alters_a_recording_needs_one(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "nope@reset-after=10"}
    status, _, served = await post(session, emulator, "/v1/chat/completions", body)
    assert status == 404
    assert orjson.loads(served)["error"]["message"] == "no recording for model 'nope'"


async def test_unknown_fault_is_400(session: aiohttp.ClientSession, emulator: TestServer) -> None:
    body = {"model": "openai@explode"}
    status, _, served = await post(session, emulator, "/v1/chat/completions", body)
    error = orjson.loads(served)["error"]
    assert (status, error["param"], error["code"]) == (400, "model", "invalid_fault")
    assert "explode" in error["message"]


async def test_route_faults(session: aiohttp.ClientSession, aiohttp_server: AiohttpServer) -> None:
    app = build_emulator_app(faults={"chat": "status=503", "models": "html=502"})
    server = await aiohttp_server(app)
    status, headers, _ = await post(session, server, "/v1/chat/completions", {"model": "openai"})
    assert (status, headers["Retry-After"]) == (503, "1")
    # The model's own fault comes first.
    body = {"model": "openai@wrong-type"}
    assert (await post(session, server, "/v1/chat/completions", body))[2] == b"hello"
    # Other endpoints are untouched.
    status, _, served = await post(session, server, "/v1/completions", {"model": "openai"})
    assert (status, served) == (200, packaged("openai.completions.json"))
    async with session.get(server.make_url("/v1/models")) as resp:
        assert resp.status == 502


def fault_message(code: int) -> str:
    return f"emulated fault: status {code}"


@pytest.mark.parametrize(
    ("path", "body", "code", "error"),
    [
        (
            "/v1/messages",
            {"model": "anthropic@status=429"},
            429,
            anthropic_error("rate_limit_error", fault_message(429)),
        ),
        (
            "/v1/messages",
            {"model": "x@status=529", "stream": True},
            529,
            anthropic_error("overloaded_error", fault_message(529)),
        ),
        (
            "/v1/messages",
            {"model": "x@status=503"},
            503,
            anthropic_error("api_error", fault_message(503)),
        ),
        (
            "/v1/messages",
            {"model": "x@status=418"},
            418,
            anthropic_error("invalid_request_error", fault_message(418)),
        ),
        (
            "/v1beta/models/gemini@status=429:generateContent",
            {},
            429,
            google_error(429, "RESOURCE_EXHAUSTED", fault_message(429)),
        ),
        (
            "/v1beta/models/x@status=503:streamGenerateContent?alt=sse",
            {},
            503,
            google_error(503, "UNAVAILABLE", fault_message(503)),
        ),
        (
            "/v1beta/models/x@status=502:streamGenerateContent",
            {},
            502,
            google_error(502, "INTERNAL", fault_message(502)),
        ),
        ("/v2/chat", {"model": "cohere@status=500"}, 500, {"message": fault_message(500)}),
        ("/api/chat", {"model": "x@status=404"}, 404, {"error": fault_message(404)}),
        (
            "/tgi/x@status=429/generate_stream",
            {"inputs": "Hi"},
            429,
            tgi_error("overloaded", fault_message(429)),
        ),
        (
            "/tgi/x@status=500/generate",
            {"inputs": "Hi"},
            500,
            tgi_error("generation", fault_message(500)),
        ),
    ],
)
async def test_native_fault_status_in_the_providers_envelope(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: object,
    code: int,
    error: object,
) -> None:
    status, headers, served = await post(session, emulator, path, body)
    assert (status, headers["Content-Type"]) == (code, "application/json")
    assert headers.get("Retry-After") == ("1" if code in (429, 503) else None)
    assert orjson.loads(served) == error


@pytest.mark.parametrize(
    ("path", "body", "name"),
    [
        (
            "/v1/messages",
            {"model": "anthropic@reset-after=300", "stream": True},
            "anthropic.messages.stream.sse",
        ),
        (
            "/v1beta/models/gemini@reset-after=300:streamGenerateContent?alt=sse",
            {},
            "gemini.generate-content.stream.sse",
        ),
        (
            "/v1beta/models/gemini@reset-after=300:streamGenerateContent",
            {},
            "gemini.generate-content.stream.json-array.json",
        ),
        (
            "/v1beta/models/gemini@reset-after=300:generateContent",
            {},
            "gemini.generate-content.json",
        ),
        ("/api/chat", {"model": "ollama@reset-after=300"}, "ollama.api-chat.stream.ndjson"),
        ("/tgi/tgi@reset-after=300/generate_stream", {"inputs": "Hi"}, "tgi.generate-stream.sse"),
    ],
)
async def test_native_fault_reset_after(
    session: aiohttp.ClientSession, emulator: TestServer, path: str, body: object, name: str
) -> None:
    received = b""
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for data in resp.content.iter_any():
                received += data
    assert packaged(name).startswith(received)
    assert len(received) <= 300


async def test_native_fault_stall_after_and_others(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    url = emulator.make_url("/tgi/tgi@stall-after=50/generate_stream")
    async with session.post(url, json={}, timeout=aiohttp.ClientTimeout(sock_read=0.3)) as resp:
        assert await resp.content.readexactly(50) == packaged("tgi.generate-stream.sse")[:50]
        with pytest.raises(TimeoutError):
            await resp.content.read(1)
    status, headers, _ = await post(session, emulator, "/api/chat", {"model": "x@html=502"})
    assert (status, headers["Content-Type"]) == (502, "text/html")
    path = "/v1beta/models/x@wrong-type:generateContent"
    assert (await post(session, emulator, path, {}))[2] == b"hello"
    status, _, served = await post(
        session, emulator, "/v1beta/models/x@explode:generateContent", {}
    )
    assert status == 400
    assert orjson.loads(served)["error"]["status"] == "INVALID_ARGUMENT"
    assert "explode" in orjson.loads(served)["error"]["message"]


async def first_writes(resp: aiohttp.ClientResponse, count: int) -> list[bytes]:
    chunks, current = [], b""
    async for data, end_of_chunk in resp.content.iter_chunks():
        current += data
        if end_of_chunk:
            chunks.append(current)
            current = b""
            if len(chunks) == count:
                break
    return chunks


def decode_writes(content_type: str, chunks: list[bytes]) -> list[tuple[str | None, Any]]:
    """The events in an endless stream's first writes: each SSE event's name and data, each
    NDJSON line, or each element of the JSON array (closed here, as the stream never is)."""
    if content_type == "application/x-ndjson":
        assert all(chunk.count(b"\n") == 1 and chunk.endswith(b"\n") for chunk in chunks)
        return [(None, orjson.loads(chunk)) for chunk in chunks]
    if content_type == "application/json":
        assert chunks[0].startswith(b"[")
        assert all(chunk.startswith(b",") for chunk in chunks[1:])
        return [(None, element) for element in orjson.loads(b"".join(chunks) + b"]")]
    events: list[tuple[str | None, Any]] = []
    for event in (event for chunk in chunks for event in split_events(chunk)):
        fields = dict(line.split(": ", 1) for line in event.decode().splitlines() if line)
        events.append((fields.get("event"), orjson.loads(fields["data"])))
    return events


def anthropic_text(data: Any) -> str:
    return str(data["delta"]["text"])


def cohere_text(data: Any) -> str:
    return str(data["delta"]["message"]["content"]["text"])


def gemini_text(data: Any) -> str:
    return str(data["candidates"][0]["content"]["parts"][0]["text"])


@pytest.mark.parametrize(
    ("path", "body", "content_type", "names", "text"),
    [
        (
            "/v1/messages",
            {"model": "anthropic@endless", "stream": True},
            "text/event-stream",
            ["message_start", "content_block_start"] + ["content_block_delta"] * 4,
            anthropic_text,
        ),
        (
            "/v2/chat",
            {"model": "cohere@endless", "stream": True},
            "text/event-stream",
            ["message-start", "content-start"] + ["content-delta"] * 4,
            cohere_text,
        ),
        (
            "/v1beta/models/x@endless:streamGenerateContent?alt=sse",
            {},
            "text/event-stream",
            [None] * 4,
            gemini_text,
        ),
        (
            "/v1beta/models/x@endless:streamGenerateContent",
            {},
            "application/json",
            [None] * 4,
            gemini_text,
        ),
        (
            "/api/chat",
            {"model": "x@endless"},
            "application/x-ndjson",
            [None] * 4,
            lambda data: data["message"]["content"],
        ),
        (
            "/api/generate",
            {"model": "x@endless"},
            "application/x-ndjson",
            [None] * 4,
            lambda data: data["response"],
        ),
        (
            "/tgi/x@endless/generate_stream",
            {},
            "text/event-stream",
            [None] * 4,
            lambda data: data["token"]["text"],
        ),
    ],
)
async def test_native_fault_endless_speaks_the_dialect(
    session: aiohttp.ClientSession,
    emulator: TestServer,
    path: str,
    body: object,
    content_type: str,
    names: list[str | None],
    text: Callable[[Any], str],
) -> None:
    async with session.post(emulator.make_url(path), json=body) as resp:
        assert resp.headers["Content-Type"] == content_type
        chunks = await first_writes(resp, 4)
    events = decode_writes(content_type, chunks)
    assert [name for name, _ in events] == names
    # Named events carry their name as their type too, as Anthropic's and Cohere's do.
    assert all(data["type"] == name for name, data in events if name is not None)
    assert text(events[-1][1]) == "x "


async def test_route_faults_on_native_endpoints(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    faults = {"messages": "status=529", "chat": "status=503", "generate-content": "status=429"}
    server = await aiohttp_server(build_emulator_app(faults=faults))
    status, _, served = await post(session, server, "/v1/messages", {"model": "anthropic"})
    assert (status, served) == (
        529,
        orjson.dumps(anthropic_error("overloaded_error", fault_message(529))),
    )
    # "chat" is OpenAI's endpoint name and Cohere's.
    status, _, served = await post(session, server, "/v2/chat", {"model": "cohere"})
    assert (status, orjson.loads(served)) == (503, {"message": fault_message(503)})
    for method in ("generateContent", "streamGenerateContent?alt=sse"):
        status, _, _ = await post(session, server, f"/v1beta/models/gemini:{method}", {})
        assert status == 429
    status, _, served = await post(session, server, "/api/chat", {"model": "ollama"})
    assert (status, served) == (200, packaged("ollama.api-chat.stream.ndjson"))


# OpenAI's Responses API: created by POST, faulted as chat is, endless in its own events.

RESPONSE_OPENERS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]


async def test_stored_responses_are_not_kept(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    for method in ("GET", "DELETE"):
        async with session.request(method, emulator.make_url("/v1/responses/resp_1")) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "unknown_url"
    async with session.get(emulator.make_url("/v1/responses")) as resp:
        assert (resp.status, resp.headers["Allow"]) == (405, "POST")


async def test_responses_faults_as_chat_does(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai@status=429", "input": "Hi"}
    status, headers, served = await post(session, emulator, "/v1/responses", body)
    assert (status, headers["Retry-After"]) == (429, "1")
    assert orjson.loads(served)["error"]["type"] == "rate_limit_error"
    received = b""
    cut = {"model": "openai@reset-after=300", "input": "Hi", "stream": True}
    async with session.post(emulator.make_url("/v1/responses"), json=cut) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for data in resp.content.iter_any():
                received += data
    assert packaged("openai.responses.stream.sse").startswith(received)
    assert 0 < len(received) <= 300


async def test_route_faults_on_responses(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    server = await aiohttp_server(build_emulator_app(faults={"responses": "status=503"}))
    status, _, _ = await post(session, server, "/v1/responses", {"model": "openai", "input": "Hi"})
    assert status == 503
    status, _, served = await post(session, server, "/v1/chat/completions", {"model": "openai"})
    assert (status, served) == (200, packaged("openai.chat.json"))


async def test_fault_endless_on_responses_streams_responses_events(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai@endless", "input": "Hi", "stream": True}
    async with session.post(emulator.make_url("/v1/responses"), json=body) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        chunks = await first_writes(resp, 4)
    events = decode_writes("text/event-stream", chunks)
    assert [name for name, _ in events] == RESPONSE_OPENERS + ["response.output_text.delta"] * 4
    for name, data in events:
        validate(data, "ResponseStreamEvent")
        assert data["type"] == name
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert events[0][1]["response"]["model"] == "openai"
    assert events[-1][1]["delta"] == "x "


@pytest.mark.parametrize("faults", [{"moderations": "hang"}, {"chat": "explode"}])
def test_route_faults_are_checked(faults: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        build_emulator_app(faults=faults)


# Lifetime: nothing the emulator does outlives its server.


async def wait_for_requests(app: web.Application, count: int) -> None:
    for _ in range(500):
        if len(app[EMULATOR].requests) >= count:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"the emulator did not receive {count} requests")


async def test_shutdown_cuts_off_responses_in_progress(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    app = build_emulator_app(chunk_delay=30)
    server = await aiohttp_server(app)
    url = server.make_url("/v1/chat/completions")
    models = ["x@hang", "openai@stall-after=10", "x@endless", "openai", "openai@slow-first-byte=60"]

    async def read(model: str) -> bytes:
        async with session.post(url, json={"model": model, "stream": True}) as resp:
            return await resp.read()

    closed = asyncio.Event()

    async def stop_reading() -> bytes:
        # The emulator writes until the socket buffers fill, and then its write waits.
        async with session.post(url, json={"model": "x@no-newline"}) as resp:
            await resp.content.readexactly(10)
            await closed.wait()
            return await resp.read()

    requests = [asyncio.ensure_future(read(model)) for model in models]
    requests.append(asyncio.ensure_future(stop_reading()))
    await wait_for_requests(app, len(requests))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    await server.close()
    assert time.monotonic() - started < 5
    closed.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*requests, return_exceptions=True), 5)
    assert [
        type(outcome) for outcome in outcomes if not isinstance(outcome, aiohttp.ClientError)
    ] == []


async def test_run_emulator_serves_until_cancelled(
    session: aiohttp.ClientSession, unused_tcp_port: int
) -> None:
    serving = asyncio.ensure_future(run_emulator("127.0.0.1", unused_tcp_port))
    url = f"http://127.0.0.1:{unused_tcp_port}/v1/chat/completions"
    for _ in range(200):
        try:
            async with session.post(url, json={"model": "openai"}) as resp:
                assert await resp.read() == packaged("openai.chat.json")
                break
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.01)
    else:
        pytest.fail("the emulator did not start")
    hanging = asyncio.ensure_future(session.post(url, json={"model": "x@hang"}))
    await asyncio.sleep(0.05)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(serving, 5)
    with pytest.raises(aiohttp.ClientError):
        await hanging


def test_command_line() -> None:
    args = parse_args(["--port", "9", "--chunk-delay", "0.5", "--fault", "chat=status=503"])
    assert (args.host, args.port, args.chunk_delay) == ("127.0.0.1", 9, 0.5)
    assert (args.recordings, args.fault) == (None, {"chat": "status=503"})
    with pytest.raises(SystemExit):
        parse_args(["--port", "9", "--fault", "chat"])
