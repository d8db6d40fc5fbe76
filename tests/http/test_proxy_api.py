"""The proxy's HTTP surface: endpoints, teams, bad input, upstream failures, what goes upstream.

Each case makes one real request to the running proxy (in front of the emulator) and asserts the
status and the exact error body of docs/canonical-output.md section 4.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import openai
import orjson
import pytest

from tests.support.harness import SUPPORT_KEY, TEAM_KEY, UPSTREAM_SECRET, Servers, upstream_requests
from tests.support.replay import goldens, parse_frames
from tests.support.schema import validate

CHAT = [{"role": "user", "content": "Hello"}]


async def post(
    url: str, body: bytes | dict[str, Any], key: str | None = TEAM_KEY, **headers: str
) -> tuple[int, Any, Any]:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=data, headers=headers) as response,
    ):
        raw = await response.read()
        return response.status, response.headers, raw


def error_of(raw: bytes) -> dict[str, Any]:
    body = orjson.loads(raw)
    validate(body, "ErrorResponse")
    return dict(body["error"])


# (description, path, body, key, status, type, code, param)
BAD_REQUESTS = [
    (
        "no key",
        "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT},
        None,
        401,
        "authentication_error",
        None,
        None,
    ),
    (
        "unknown key",
        "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT},
        "sk-nope",
        401,
        "authentication_error",
        "invalid_api_key",
        None,
    ),
    (
        "forbidden model",
        "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT},
        SUPPORT_KEY,
        404,
        "invalid_request_error",
        "model_not_found",
        "model",
    ),
    (
        "unknown model",
        "/chat/completions",
        {"model": "gpt-9", "messages": CHAT},
        TEAM_KEY,
        404,
        "invalid_request_error",
        "model_not_found",
        "model",
    ),
    (
        "not JSON",
        "/chat/completions",
        b"{nope",
        TEAM_KEY,
        400,
        "invalid_request_error",
        "invalid_json",
        None,
    ),
    (
        "not an object",
        "/chat/completions",
        b"[1, 2]",
        TEAM_KEY,
        400,
        "invalid_request_error",
        "invalid_json",
        None,
    ),
    (
        "no model",
        "/chat/completions",
        {"messages": CHAT},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "missing_required_parameter",
        "model",
    ),
    (
        "model not a string",
        "/chat/completions",
        {"model": 4, "messages": CHAT},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "invalid_type",
        "model",
    ),
    (
        "no messages",
        "/chat/completions",
        {"model": "gpt-4o"},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "missing_required_parameter",
        "messages",
    ),
    (
        "messages not a list",
        "/chat/completions",
        {"model": "gpt-4o", "messages": "hi"},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "invalid_type",
        "messages",
    ),
    (
        "stream not a bool",
        "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT, "stream": "yes"},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "invalid_type",
        "stream",
    ),
    (
        "n below 1",
        "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT, "n": 0},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "invalid_value",
        "n",
    ),
    (
        "no prompt",
        "/completions",
        {"model": "gpt-4o"},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "missing_required_parameter",
        "prompt",
    ),
    (
        "unknown path",
        "/moderations",
        {"model": "gpt-4o"},
        TEAM_KEY,
        404,
        "invalid_request_error",
        "unknown_url",
        None,
    ),
    (
        "embeddings without input",
        "/embeddings",
        {"model": "gpt-4o"},
        TEAM_KEY,
        400,
        "invalid_request_error",
        "missing_required_parameter",
        "input",
    ),
    (
        "upstream down",
        "/chat/completions",
        {"model": "down-model", "messages": CHAT},
        TEAM_KEY,
        502,
        "upstream_error",
        None,
        None,
    ),
    (
        "upstream hangs",
        "/chat/completions",
        {"model": "hang-model", "messages": CHAT},
        TEAM_KEY,
        504,
        "timeout_error",
        None,
        None,
    ),
    (
        "upstream 500",
        "/chat/completions",
        {"model": "status-500", "messages": CHAT},
        TEAM_KEY,
        502,
        "upstream_error",
        None,
        None,
    ),
    (
        "upstream 429",
        "/chat/completions",
        {"model": "status-429", "messages": CHAT},
        TEAM_KEY,
        429,
        "rate_limit_error",
        None,
        None,
    ),
    (
        "upstream HTML page",
        "/chat/completions",
        {"model": "html-502", "messages": CHAT},
        TEAM_KEY,
        502,
        "upstream_error",
        None,
        None,
    ),
    (
        "upstream garbage",
        "/chat/completions",
        {"model": "garbage-model", "messages": CHAT, "stream": True},
        TEAM_KEY,
        502,
        "upstream_error",
        None,
        None,
    ),
    (
        "upstream JSON not an object",
        "/chat/completions",
        {"model": "not-object", "messages": CHAT},
        TEAM_KEY,
        502,
        "upstream_error",
        None,
        None,
    ),
    (
        "upstream wrong content type",
        "/chat/completions",
        {"model": "wrong-type", "messages": CHAT, "stream": True},
        TEAM_KEY,
        502,
        "upstream_error",
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "key", "status", "kind", "code", "param"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
async def test_bad_requests_get_their_documented_error(
    proxy_url: str,
    path: str,
    body: Any,
    key: str | None,
    status: int,
    kind: str,
    code: str | None,
    param: str | None,
) -> None:
    got_status, headers, raw = await post(proxy_url + path, body, key)
    assert got_status == status, raw
    assert headers["Content-Type"].startswith("application/json")
    assert headers.get("X-Request-Id")
    error = error_of(raw)
    assert error["type"] == kind
    assert error["code"] == code
    assert error["param"] == param
    assert error["message"]
    assert "Traceback" not in error["message"] and UPSTREAM_SECRET not in raw.decode()


async def test_upstream_400_keeps_its_status_and_message(proxy_url: str) -> None:
    status, _, raw = await post(
        proxy_url + "/chat/completions", {"model": "upstream-400", "messages": CHAT}
    )
    assert status == 400
    assert error_of(raw)["message"].startswith("Unsupported parameter: 'max_tokens'")


async def test_upstream_429_passes_retry_after(proxy_url: str) -> None:
    status, headers, _ = await post(
        proxy_url + "/chat/completions", {"model": "status-429", "messages": CHAT}
    )
    assert status == 429 and headers["Retry-After"] == "1"


async def test_body_over_the_limit_is_413(servers: Servers) -> None:
    url, _ = servers.start_proxy(
        {"gpt-4o": {"provider": "emu", "model": "openai"}}, server={"max_body_bytes": 1000}
    )
    big = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 2000}]}
    status, _, raw = await post(url + "/chat/completions", big)
    assert status == 413
    assert error_of(raw)["type"] == "invalid_request_error"
    status, _, _ = await post(url + "/chat/completions", {"model": "gpt-4o", "messages": CHAT})
    assert status == 200


@pytest.mark.parametrize("model", ["stall-model", "reset-model"])
async def test_failure_after_the_first_byte_is_one_error_event(proxy_url: str, model: str) -> None:
    status, _, raw = await post(
        proxy_url + "/chat/completions", {"model": model, "messages": CHAT, "stream": True}
    )
    assert status == 200
    frames = raw.split(b"\n\n")
    assert frames[-1] == b""
    last = orjson.loads(frames[-2].removeprefix(b"data: "))
    validate(last, "ErrorResponse")
    assert last["error"]["type"] == (
        "timeout_error" if model == "stall-model" else "upstream_error"
    )
    assert b"[DONE]" not in raw
    assert b'"content"' in raw  # some of the answer arrived before the failure


async def test_models_lists_what_the_team_may_use(proxy_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(proxy_url + "/models", headers={"Authorization": f"Bearer {SUPPORT_KEY}"}) as r,
    ):
        body = await r.json()
    validate(body, "ListModelsResponse")
    assert [m["id"] for m in body["data"]] == ["llama-3.1-8b"]
    client = openai.OpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0)
    with client:
        names = {m.id for m in client.models.list()}
    assert {"gpt-4o", "llama-3.1-8b", "groq.chat.stream.sse"} <= names


async def test_health_and_readiness(proxy_url: str) -> None:
    root = proxy_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz"):
            async with session.get(root + path) as response:
                assert response.status == 200


# (method, path, status, Allow header, error code): the proxy dispatches by itself (no aiohttp
# router), so every path and method it does not serve is told here, in the shape of
# docs/canonical-output.md section 4.
METHODS_AND_PATHS = [
    ("GET", "/v1/chat/completions", 405, "POST", "method_not_allowed"),
    ("PUT", "/v1/completions", 405, "POST", "method_not_allowed"),
    ("DELETE", "/v1/models", 405, "GET,HEAD", "method_not_allowed"),
    ("POST", "/healthz", 405, "GET,HEAD", "method_not_allowed"),
    ("POST", "/readyz", 405, "GET,HEAD", "method_not_allowed"),
    ("GET", "/v1/embeddings", 405, "POST", "method_not_allowed"),
    ("GET", "/v1/moderations", 404, None, "unknown_url"),
    ("DELETE", "/v1/models/gpt-4o", 405, "GET,HEAD", "method_not_allowed"),
    ("POST", "/v1/chat/completions/", 404, None, "unknown_url"),
    ("GET", "/nowhere", 404, None, "unknown_url"),
    ("GET", "/", 404, None, "unknown_url"),
    ("HEAD", "/healthz", 200, None, None),
    ("HEAD", "/readyz", 200, None, None),
    ("HEAD", "/v1/models", 200, None, None),
]


@pytest.mark.parametrize(
    ("method", "path", "status", "allow", "code"),
    METHODS_AND_PATHS,
    ids=[f"{method} {path}" for method, path, *_ in METHODS_AND_PATHS],
)
async def test_methods_and_paths(
    proxy_url: str, method: str, path: str, status: int, allow: str | None, code: str | None
) -> None:
    root = proxy_url.removesuffix("/v1")
    headers = {"Authorization": f"Bearer {TEAM_KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, root + path, headers=headers) as response,
    ):
        raw = await response.read()
    assert response.status == status
    assert response.headers.get("Allow") == allow
    if method == "HEAD":
        assert raw == b"" and int(response.headers["Content-Length"]) > 0
    elif code is not None:
        error = error_of(raw)
        assert (error["type"], error["code"]) == ("invalid_request_error", code)


def _exchange(port: int, head: bytes, body: bytes | None, wait: float = 2.0) -> tuple[bytes, bytes]:
    """Send ``head``, read what comes back within ``wait`` s; then send ``body`` (if any) and
    read the rest until the server is done."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(head)
        try:
            first = sock.recv(65536)
        except TimeoutError:
            first = b""
        rest = b""
        if body is not None:
            sock.sendall(body)
            sock.settimeout(5)
            while b"}" not in rest and (chunk := sock.recv(65536)):
                rest += chunk
        return first, rest


def _asks_to_continue(version: str) -> tuple[bytes, bytes]:
    """The head and body of a chat request that asks for ``100 Continue`` before its body."""
    body = orjson.dumps({"model": "gpt-4o", "messages": CHAT})
    head = (
        f"POST /v1/chat/completions HTTP/{version}\r\nHost: x\r\n"
        f"Authorization: Bearer {TEAM_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\n\r\n"
    ).encode()
    return head, body


async def test_expect_100_continue_is_answered_before_the_body(proxy_url: str) -> None:
    """curl sends ``Expect: 100-continue`` before a large body, and waits for the 100."""
    port = urlsplit(proxy_url).port
    assert port is not None
    head, body = _asks_to_continue("1.1")
    first, rest = await asyncio.to_thread(_exchange, port, head, body)
    assert first == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
    answer = orjson.loads(rest.split(b"\r\n\r\n", 1)[1])
    validate(answer, "CreateChatCompletionResponse")


async def test_an_http_1_0_client_is_not_told_to_continue(proxy_url: str) -> None:
    """HTTP/1.0 has no 100 Continue (RFC 9110 10.1.1): the proxy waits for the body."""
    port = urlsplit(proxy_url).port
    assert port is not None
    head, body = _asks_to_continue("1.0")
    first, rest = await asyncio.to_thread(_exchange, port, head, body, 0.5)
    assert first == b""
    assert rest.startswith(b"HTTP/1.0 200 OK\r\n"), rest[:200]


async def test_unknown_expectation_is_417(proxy_url: str) -> None:
    port = urlsplit(proxy_url).port
    assert port is not None
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TEAM_KEY}\r\n"
        "Content-Length: 40\r\nExpect: a-pony\r\n\r\n"
    ).encode()
    first, _ = await asyncio.to_thread(_exchange, port, head, None)
    assert first.startswith(b"HTTP/1.1 417 ")
    error = error_of(first.split(b"\r\n\r\n", 1)[1])
    assert error["code"] == "expectation_failed" and "a-pony" in error["message"]


async def test_request_id_is_taken_or_made(proxy_url: str) -> None:
    _, headers, _ = await post(
        proxy_url + "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT},
        **{"X-Request-Id": "req-abc.123"},
    )
    assert headers["X-Request-Id"] == "req-abc.123"
    _, headers, _ = await post(
        proxy_url + "/chat/completions",
        {"model": "gpt-4o", "messages": CHAT},
        **{"X-Request-Id": "bad id\t!"},
    )
    assert headers["X-Request-Id"] != "bad id\t!" and len(headers["X-Request-Id"]) == 32


async def test_what_goes_upstream(proxy_url: str, servers: Servers) -> None:
    body = {
        "model": "gpt-4o",
        "messages": CHAT,
        "stream": True,
        "temperature": 0.25,
        "x_unknown_field": {"kept": [1, 2]},
        "stream_options": {"include_usage": False},
    }
    status, _, raw = await post(
        proxy_url + "/chat/completions",
        body,
        **{"Cookie": "session=abc", "Connection": "keep-alive"},
    )
    assert status == 200 and b'"usage"' not in raw
    sent = (await upstream_requests(servers))[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["json"]["model"] == "openai"  # the upstream model name
    assert sent["json"]["temperature"] == 0.25 and sent["json"]["x_unknown_field"] == {
        "kept": [1, 2]
    }
    assert sent["json"]["stream_options"] == {"include_usage": True}  # usage is always learned
    assert sent["headers"]["authorization"] == f"Bearer {UPSTREAM_SECRET}"
    assert "cookie" not in sent["headers"] and TEAM_KEY not in orjson.dumps(sent).decode()


async def test_upstream_cookies_are_never_sent_back(servers: Servers) -> None:
    # The emulator sets a cookie on every answer, as OpenAI's Cloudflare does; by host name, so
    # that a cookie jar would keep it (aiohttp's refuses cookies from IP addresses).
    local = servers.emulator_url.replace("127.0.0.1", "localhost")
    url, _ = servers.start_proxy(
        {"gpt-4o": {"deployments": [{"provider": "local", "model": "openai"}]}},
        providers={"local": {"base_url": f"{local}/v1", "api_key": UPSTREAM_SECRET}},
    )
    for _ in range(2):
        status, headers, _ = await post(
            url + "/chat/completions", {"model": "gpt-4o", "messages": CHAT}
        )
        assert status == 200 and "Set-Cookie" not in headers  # nor passed on to the client
    first, second = (await upstream_requests(servers))[-2:]
    assert "cookie" not in first["headers"] and "cookie" not in second["headers"]


async def test_azure_style_key_header_and_query(proxy_url: str, servers: Servers) -> None:
    status, _, _ = await post(
        proxy_url + "/chat/completions", {"model": "azure-gpt", "messages": CHAT, "stream": True}
    )
    assert status == 200
    sent = (await upstream_requests(servers))[-1]
    assert sent["path"] == "/openai/v1/chat/completions"
    assert sent["query"] == {"api-version": "preview"}
    assert sent["headers"]["api-key"] == UPSTREAM_SECRET
    assert "authorization" not in sent["headers"]


async def test_sdk_sync_and_async_seed_dialects(proxy_url: str) -> None:
    """FriendliAI, Maritaca and OpenAI, streamed and not, through the official SDK."""
    client = openai.OpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0)
    with client:
        chat = client.chat.completions.create(model="sabia-4", messages=CHAT)
        assert chat.object == "chat.completion" and chat.model == "sabia-4"
        assert chat.choices[0].message.content.startswith("Certainly! Bahia")  # type: ignore[union-attr]
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="llama-3.1-8b", messages=CHAT, stream=True
            )
        )
        assert text == "This is"
    aclient = openai.AsyncOpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0)
    async with aclient:
        completion = await aclient.completions.create(model="llama-3.1-8b", prompt="Say")
        assert completion.object == "text_completion" and completion.model == "llama-3.1-8b"
        stream = await aclient.completions.create(model="gpt-4o", prompt="Say", stream=True)
        pieces = [c.choices[0].text async for c in stream if c.choices]
        assert "".join(pieces).startswith("The holiday is called")
        with pytest.raises(openai.NotFoundError) as info:
            await aclient.chat.completions.create(model="gpt-9", messages=CHAT)  # type: ignore[arg-type]
        assert info.value.code == "model_not_found"


async def test_upstream_that_ignores_stream_false_is_collected(proxy_url: str) -> None:
    golden = next(g for g in goldens() if g.name == "azure.chat.stream.model-router.sse")
    status, _, raw = await post(
        proxy_url + "/chat/completions", {"model": "azure-gpt", "messages": CHAT}
    )
    assert status == 200, raw
    body = orjson.loads(raw)
    validate(body, "CreateChatCompletionResponse")
    want = golden.data["choices"]["0"]
    assert body["choices"][0]["message"]["content"] == want["content"]
    assert body["choices"][0]["finish_reason"] == want["finish_reason"]
    assert body["id"] == golden.data["id"] and body["model"] == "azure-gpt"
    assert body["usage"]["total_tokens"] == golden.data["usage"]["total_tokens"]


async def test_upstream_that_ignores_stream_true_is_streamed(proxy_url: str) -> None:
    body = {
        "model": "sabia-4",
        "messages": CHAT,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, headers, raw = await post(proxy_url + "/chat/completions", body)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    payloads = parse_frames(raw)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    for chunk in chunks:
        validate(chunk, "CreateChatCompletionStreamResponse")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.startswith("Certainly! Bahia") and text.endswith("tranquility.")
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 54,
        "completion_tokens": 538,
        "total_tokens": 592,
    }
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


# Every path that names a model: (path with {model} where it goes, the body, ditto).
MODEL_PATHS = [
    ("/v1/chat/completions", {"model": "{model}", "messages": CHAT}),
    ("/v1/chat/completions", {"model": "{model}", "messages": CHAT, "stream": True}),
    ("/v1/completions", {"model": "{model}", "prompt": "Hi"}),
    ("/v1/embeddings", {"model": "{model}", "input": "Hi"}),
    ("/v1/responses", {"model": "{model}", "input": "Hi"}),
    ("/openai/deployments/{model}/chat/completions?api-version=2024-10-21", {"messages": CHAT}),
    ("/openai/deployments/{model}/completions?api-version=2024-10-21", {"prompt": "Hi"}),
    ("/openai/deployments/{model}/embeddings?api-version=2024-10-21", {"input": "Hi"}),
    ("/v1/models/{model}", None),
]


@pytest.mark.parametrize(("path", "body"), MODEL_PATHS)
async def test_another_team_s_model_is_as_unknown_as_a_model_nobody_has(
    proxy_url: str, path: str, body: dict[str, Any] | None
) -> None:
    """docs/canonical-output.md section 4: the same 404 for both, so that a team cannot learn
    which model names exist (gpt-4o exists; the support team may not use it)."""
    answers = []
    for model in ("gpt-4o", "gpt-4p"):
        url = proxy_url.removesuffix("/v1") + path.replace("{model}", model)
        headers = {"Authorization": f"Bearer {SUPPORT_KEY}"}
        async with aiohttp.ClientSession() as session:
            if body is None:
                response = await session.get(url, headers=headers)
            else:
                sent = orjson.loads(orjson.dumps(body).replace(b"{model}", model.encode()))
                response = await session.post(url, json=sent, headers=headers)
            async with response:
                error = error_of(await response.read())
                answers.append((response.status, error))
        assert answers[-1][0] == 404, answers
        assert error["code"] == "model_not_found" and error["param"] == "model"
    (first_status, first), (second_status, second) = answers
    assert first_status == second_status
    assert first["message"].replace("gpt-4o", "M") == second["message"].replace("gpt-4p", "M")
    assert {**first, "message": ""} == {**second, "message": ""}
