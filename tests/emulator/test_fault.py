"""Faults on OpenAI's endpoints (chat, completions, responses): the spec in the model name, what
each fault does, and faults set for a whole endpoint."""

from __future__ import annotations

import time

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import build_emulator_app
from proxy.emulator.fault import Fault, FaultError, parse_fault, split_model
from tests.emulator.exchange import packaged, post, read_until_reset


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
    # Vertex's Claude versions are part of the name; a fault follows them.
    assert split_model("claude-sonnet-4@20250514") == ("claude-sonnet-4@20250514", None)
    assert split_model("claude-sonnet-4@20250514@hang") == ("claude-sonnet-4@20250514", "hang")


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
    body = {"model": "openai@reset-after=100", "stream": stream}
    received = await read_until_reset(session, emulator, "/v1/chat/completions", body)
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


@pytest.mark.parametrize("faults", [{"moderations": "hang"}, {"chat": "explode"}])
def test_route_faults_are_checked(faults: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        build_emulator_app(faults=faults)


async def test_responses_faults_as_chat_does(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    body = {"model": "openai@status=429", "input": "Hi"}
    status, headers, served = await post(session, emulator, "/v1/responses", body)
    assert (status, headers["Retry-After"]) == (429, "1")
    assert orjson.loads(served)["error"]["type"] == "rate_limit_error"
    cut = {"model": "openai@reset-after=300", "input": "Hi", "stream": True}
    received = await read_until_reset(session, emulator, "/v1/responses", cut)
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
