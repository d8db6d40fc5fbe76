"""The errors the emulator makes up (unknown model, bad body, unknown path, wrong method), in
OpenAI's envelope and in each native API's own."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.emulator.exchange import anthropic_error, google_error, post, tgi_error

NO_RECORDING = "no recording for model 'nope'"


NOT_JSON = "the request body is not valid JSON"


NO_MODEL = "the request body must be a JSON object with a string 'model'"


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
        # An escaped "/" stays inside the model's segment (Bedrock's ARNs need it), and
        # becomes "_" in a recording's name.
        ("/v1beta/models/..%2F..%2Fsecret.json:generateContent", "../../secret.json"),
        ("/v1beta/models/.openai.chat.json:generateContent", ".openai.chat.json"),
        ("/tgi/..%2F..%2Fsecret.json/generate", "../../secret.json"),
        ("/model/..%2F..%2Fsecret.json/converse", "../../secret.json"),
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
