"""What a hostile upstream cannot make the proxy do (docs/security.md), through the running proxy.

The upstream here is raw asyncio (tests/support/hostile.py): it echoes the request it got (the head
with every credential header, the query with its key, the body) in each form an error can take,
sends unsolicited answers on idle connections, and the like.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp
import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers, free_port
from tests.support.hostile import EVENT_STREAM_HEAD, HostileUpstream, chunk, proxied, text_event
from tests.support.replay import MADE_ID, parse_frames
from tests.support.schema import validate

AUTH = {"Authorization": f"Bearer {TEAM_KEY}"}
CHAT = [{"role": "user", "content": "Hello"}]

API_KEY = "sk-hostile-api-key-0001"
GOOG_KEY = "goog-header-secret-0002"
GATEWAY_TOKEN = "gateway/token+value=0003"  # changed by URL-encoding
QUERY_KEY = "query/key+secret=0004"
SECRETS = (API_KEY, GOOG_KEY, GATEWAY_TOKEN, QUERY_KEY, TEAM_KEY, SUPPORT_KEY)


def _forms(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote_plus(secret, safe="")}


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        for form in _forms(secret):
            assert form not in text, f"{form!r} leaked"


def _echo(request: bytes) -> str:
    """What a careless upstream quotes back: the request it got, head and body."""
    return request.decode("utf-8", "replace")


def _json(status: int, payload: object, *, close: bool = True) -> bytes:
    """An answer with a JSON body; ``close``: the script closes the connection after it, and
    says so (Connection: close), as an honest server does."""
    body = orjson.dumps(payload)
    connection = "Connection: close\r\n" if close else ""
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{connection}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _status_json(request: bytes, writer: asyncio.StreamWriter) -> None:
    message = f"Incorrect API key provided: {_echo(request)}"
    writer.write(_json(401, {"error": {"message": message, "type": "invalid_request_error"}}))


async def _status_text(request: bytes, writer: asyncio.StreamWriter) -> None:
    body = _echo(request).encode()
    writer.write(
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


async def _ok_json_error(request: bytes, writer: asyncio.StreamWriter) -> None:
    error = {"message": _echo(request), "type": "server_error", "param": API_KEY, "code": GOOG_KEY}
    writer.write(_json(200, {"error": error}))


def _error_event(request: bytes) -> bytes:
    return b"data: " + orjson.dumps({"error": {"message": _echo(request)}}) + b"\n\n"


async def _event_first(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + chunk(_error_event(request)) + b"0\r\n\r\n")


async def _event_after(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + chunk(text_event("Hi")))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(chunk(_error_event(request)) + b"0\r\n\r\n")


async def _event_split(request: bytes, writer: asyncio.StreamWriter) -> None:
    """The error event in two reads, cut in the middle of the key it quotes."""
    writer.write(EVENT_STREAM_HEAD + chunk(text_event("Hi")))
    event = _error_event(request)
    cut = event.index(API_KEY.encode()) + len(API_KEY) // 2
    for piece in (event[:cut], event[cut:]):
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(piece))
    writer.write(b"0\r\n\r\n")


async def _rate_limited(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_json(429, {"error": {"message": _echo(request), "type": "rate_limit"}}))


SCRIPTS = {
    "status-json": _status_json,
    "status-text": _status_text,
    "ok-json-error": _ok_json_error,
    "event-first": _event_first,
    "event-after": _event_after,
    "event-split": _event_split,
    "rate-limited": _rate_limited,
}


@pytest.fixture(scope="module")
def echoing(servers: Servers) -> Iterator[tuple[HostileUpstream, str]]:
    with proxied(
        servers,
        SCRIPTS,
        provider={
            "api_key": API_KEY,
            "headers": {"x-goog-api-key": GOOG_KEY, "X-Gateway-Token": GATEWAY_TOKEN},
            "query": {"key": QUERY_KEY, "api-version": "preview"},
        },
        metrics=True,
        routing={"attempts": 2, "backoff": {"base": 0.01, "max": 0.02}},
    ) as (upstream, url, _):
        yield upstream, url


async def _ask(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/chat/completions", json=body, headers=AUTH) as response,
    ):
        return response.status, await response.read()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_no_credential_reaches_the_client_or_the_log(
    echoing: tuple[HostileUpstream, str],
    script: str,
    stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream, url = echoing
    caplog.set_level(logging.DEBUG)
    status, raw = await _ask(url, {"model": script, "messages": CHAT, "stream": stream})
    assert upstream.received[script] > 0
    text = raw.decode()
    assert "***" in text, text  # the upstream's message is kept, less the secrets
    assert_no_secret(text)
    if status != 200:
        validate(orjson.loads(raw), "ErrorResponse")
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.removesuffix("/v1") + "/metrics") as response,
    ):
        assert_no_secret(await response.text())
    assert_no_secret(caplog.text)


# --- finding 2: an answer nobody asked for, on a pooled connection ----------------------------

ANSWERS = {"count": 0}


def _answer(text: str, *, close: bool = True) -> bytes:
    body = {
        "id": "chatcmpl-pooled",
        "object": "chat.completion",
        "created": 1764600000,
        "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip
    return _json(200, body, close=close)


def _next_answer(*, close: bool = True) -> bytes:
    ANSWERS["count"] += 1
    return _answer(f"answer-{ANSWERS['count']}", close=close)


async def _unsolicited_later(request: bytes, writer: asyncio.StreamWriter) -> bool:
    """Its answer, then, while the connection sits idle in the pool, another one."""
    writer.write(_next_answer(close=False))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(_answer("LEAKED", close=False))
    return True


async def _unsolicited_with(request: bytes, writer: asyncio.StreamWriter) -> bool:
    """Its answer and another one in the same write (read with it, held by the parser)."""
    writer.write(_next_answer(close=False) + _answer("LEAKED", close=False))
    return True


async def _unsolicited_partial(request: bytes, writer: asyncio.StreamWriter) -> bool:
    """Its answer, then the first bytes of another while idle."""
    writer.write(_next_answer(close=False))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Len")
    return True


POOLED = {
    "llama-later": _unsolicited_later,
    "llama-with": _unsolicited_with,
    "llama-partial": _unsolicited_partial,
}


@pytest.fixture(scope="module")
def pooled(servers: Servers) -> Iterator[tuple[HostileUpstream, str]]:
    with proxied(servers, POOLED, provider={"api_key": API_KEY}) as (upstream, url, _):
        yield upstream, url


@pytest.mark.parametrize("script", sorted(POOLED))
async def test_an_answer_nobody_asked_for_reaches_nobody(
    pooled: tuple[HostileUpstream, str], script: str
) -> None:
    """Research asks, the upstream answers twice; support asks next (same provider, so the
    same pooled connection if it were kept): it gets an answer of its own, and so does every
    request after it."""
    _, url = pooled
    contents = []
    async with aiohttp.ClientSession() as session:
        for key in (TEAM_KEY, SUPPORT_KEY, TEAM_KEY, SUPPORT_KEY):
            body = {"model": script, "messages": CHAT}
            headers = {"Authorization": f"Bearer {key}"}
            async with session.post(url + "/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200, await r.text()
                contents.append((await r.json())["choices"][0]["message"]["content"])
            await asyncio.sleep(0.15)  # the unsolicited answer arrives while it is idle
    assert "LEAKED" not in contents
    assert all(c.startswith("answer-") for c in contents) and len(set(contents)) == 4


# --- finding 3: one team's failing requests do not open the circuit for all -----------------


async def _by_prompt(request: bytes, writer: asyncio.StreamWriter) -> None:
    """500 for a poisoned prompt, a whole answer slower than first_byte for a slow one, an
    endless stream for an endless one; the usual answer otherwise."""
    body = orjson.loads(request.partition(b"\r\n\r\n")[2])
    prompt = body["messages"][0]["content"]
    if prompt == "poison":
        writer.write(_json(500, {"error": {"message": "this prompt breaks me"}}))
    elif prompt == "slow":
        await asyncio.sleep(0.6)
        writer.write(_next_answer())
    elif prompt == "endless":
        writer.write(EVENT_STREAM_HEAD)
        for _ in range(1000):
            writer.write(chunk(text_event("more ")))
            await writer.drain()
            await asyncio.sleep(0.01)
    elif body.get("stream"):
        writer.write(EVENT_STREAM_HEAD + chunk(text_event("fine")) + chunk(b"data: [DONE]\n\n"))
        writer.write(b"0\r\n\r\n")
    else:
        writer.write(_next_answer())


async def _status(url: str, key: str, model: str, prompt: str, stream: bool = False) -> int:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": prompt}]}
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/chat/completions", json=body, headers=headers) as response,
    ):
        await response.read()
        return response.status


async def test_one_team_cannot_open_the_circuit_for_every_team(servers: Servers) -> None:
    upstream = HostileUpstream({"shared": _by_prompt})
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(upstream.start(), servers.loop.loop))
    try:
        provider = {
            "base_url": upstream.url("shared"),
            "api_key": API_KEY,
            "timeouts": {"connect": 2, "first_byte": 0.3, "idle": 0.3, "total": 0.5},
        }
        url, _ = servers.start_proxy(
            {"llama-shared": {"provider": "shared", "model": "up"}},
            providers={"shared": provider},
            routing={"attempts": 1, "circuit": {"failures": 5, "cooldown": 30}},
        )

        def ask(key: str, prompt: str, stream: bool = False) -> Awaitable[int]:
            return _status(url, key, "llama-shared", prompt, stream)

        # Support has been answered all along; then research's requests fail by design, five
        # in a row of each kind (the circuit's failures): support is still answered after each.
        for _ in range(6):
            assert await ask(SUPPORT_KEY, "hello") == 200
            assert await ask(SUPPORT_KEY, "hello", stream=True) == 200
        attacks = [("slow", False), ("endless", True), ("endless", False), ("poison", False)]
        for prompt, stream in attacks:
            for _ in range(5):
                assert await ask(TEAM_KEY, prompt, stream) in (200, 502, 504)
            assert await ask(SUPPORT_KEY, "hello") == 200, prompt
            assert await ask(SUPPORT_KEY, "hello", stream=True) == 200, prompt
    finally:
        await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(upstream.stop(), servers.loop.loop)
        )


async def test_a_handful_of_failing_prompts_at_a_quiet_time_opens_no_circuit(
    servers: Servers,
) -> None:
    """Nobody else has been answered yet: the window holds only one team's failing prompts."""
    with proxied(
        servers, {"llama-quiet": _by_prompt}, routing={"attempts": 1, "circuit": {"cooldown": 30}}
    ) as (upstream, url, _):
        for _ in range(10):  # twice the default routing.circuit.failures
            assert await _status(url, TEAM_KEY, "llama-quiet", "poison") == 502
        assert await _status(url, SUPPORT_KEY, "llama-quiet", "hello") == 200
        assert upstream.received["llama-quiet"] == 11


# --- finding 4: one provider's connections, not every provider's --------------------------


async def _slow_stream(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    for _ in range(15):
        writer.write(chunk(text_event("slow ")))
        await writer.drain()
        await asyncio.sleep(0.1)
    writer.write(chunk(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'))
    writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def _quick(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_next_answer())


async def test_streams_held_on_one_provider_leave_the_others_their_connections(
    servers: Servers,
) -> None:
    upstream = HostileUpstream({"busy": _slow_stream, "other": _quick})
    loop = servers.loop.loop
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(upstream.start(), loop))
    try:
        timeouts = {"connect": 2, "first_byte": 0.5, "idle": 2, "total": 10}
        providers = {
            "busy": {"base_url": upstream.url("busy"), "max_connections": 2, "timeouts": timeouts},
            "other": {"base_url": upstream.url("other"), "timeouts": timeouts},
        }
        models = {name: {"provider": name, "model": "up"} for name in providers}
        url, _, gateway = servers.start_app(models, providers=providers)

        async def ask(model: str, stream: bool) -> tuple[int, bytes]:
            body = {"model": model, "messages": CHAT, "stream": stream}
            async with (
                aiohttp.ClientSession() as session,
                session.post(url + "/chat/completions", json=body, headers=AUTH) as r,
            ):
                return r.status, await r.read()

        # One team holds both of busy's connections with streams that take 1.5 s.
        held = [asyncio.ensure_future(ask("busy", True)) for _ in range(2)]
        await asyncio.sleep(0.3)
        # Every other provider's requests go through at once...
        status, _ = await ask("other", False)
        assert status == 200
        # ...while a third to busy waits its first-byte limit for a connection, and says so.
        status, raw = await ask("busy", False)
        assert status == 504, raw
        assert "max_connections" in orjson.loads(raw)["error"]["message"]
        assert [status for status, _ in await asyncio.gather(*held)] == [200, 200]
        # The streams' connections came back: busy serves again, and holds none.
        status, _ = await ask("busy", True)
        assert status == 200
        assert gateway.state.runtime.targets["busy"].slots.used == 0
    finally:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(upstream.stop(), loop))


# --- findings 7-10: what an upstream sends that must not break the proxy ----------------------

HUGE = "x" * 500_000


def _sse_answer(events: list[bytes]) -> bytes:
    return EVENT_STREAM_HEAD + b"".join(chunk(e) for e in events) + b"0\r\n\r\n"


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _text_chunk(text: str, **envelope: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-ok",
        "object": "chat.completion.chunk",
        "created": 1764600000,
        **envelope,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


def _finish() -> bytes:
    stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
    return _event({"id": "chatcmpl-ok", "choices": [stop]}) + b"data: [DONE]\n\n"


async def _huge_id(request: bytes, writer: asyncio.StreamWriter) -> None:
    if orjson.loads(request.partition(b"\r\n\r\n")[2]).get("stream"):
        first = _event(_text_chunk("a", id=HUGE, system_fingerprint=HUGE))
        writer.write(_sse_answer([first] + [_event(_text_chunk("b"))] * 200 + [_finish()]))
    else:
        answer = orjson.loads(_next_answer().partition(b"\r\n\r\n")[2])
        answer["id"], answer["system_fingerprint"] = HUGE, HUGE
        writer.write(_json(200, answer))


async def _retry_field(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + chunk(_event(_text_chunk("one "))))
    for event in (b"retry: " + b"9" * 5000 + b"\n" + _event(_text_chunk("two ")), _finish()):
        await writer.drain()
        await asyncio.sleep(0.02)  # in reads of their own: the relay's pipe takes them
        writer.write(chunk(event))
    writer.write(b"0\r\n\r\n")


def _retry_after(value: str) -> Any:
    async def script(request: bytes, writer: asyncio.StreamWriter) -> None:
        body = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit"}})
        writer.write(
            f"HTTP/1.1 429 Too Many\r\nContent-Type: application/json\r\nConnection: close"
            f"\r\nRetry-After: {value}"
            f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return script


# 300 levels: more than orjson writes, less than it reads.
DEEP = b"[" * 300 + b'"x"' + b"]" * 300


async def _deep_whole(request: bytes, writer: asyncio.StreamWriter) -> None:
    answer = _next_answer()
    body = answer.partition(b"\r\n\r\n")[2]
    body = body.replace(b'"finish_reason"', b'"logprobs":{"content":' + DEEP + b'},"finish_reason"')
    writer.write(_ok_bytes(body))


async def _deep_stream(request: bytes, writer: asyncio.StreamWriter) -> None:
    deep = _event(_text_chunk("a")).replace(
        b'"finish_reason"', b'"logprobs":{"content":' + DEEP + b'},"finish_reason"'
    )
    writer.write(_sse_answer([_event(_text_chunk("a")), deep, _finish()]))


def _ok_bytes(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    return head + b"Content-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


async def _echo_body(request: bytes, writer: asyncio.StreamWriter) -> None:
    """Answers with the request body it got as the content, to see what reached it."""
    writer.write(_answer(request.partition(b"\r\n\r\n")[2].decode()))


HOSTILE = {
    "huge-id": _huge_id,
    "retry-field": _retry_field,
    "retry-after-inf": _retry_after("inf"),
    "retry-after-1e999": _retry_after("1e999"),
    "retry-after-1e300": _retry_after("1e300"),
    "retry-after-nan": _retry_after("nan"),
    "retry-after-date": _retry_after("Wed, 21 Oct 2099 07:28:00 GMT"),
    "deep-whole": _deep_whole,
    "deep-stream": _deep_stream,
    "echo-body": _echo_body,
}


@pytest.fixture(scope="module")
def hostile(servers: Servers) -> Iterator[tuple[HostileUpstream, str]]:
    with proxied(servers, HOSTILE, provider={"api_key": API_KEY}) as (upstream, url, _):
        yield upstream, url


async def _post(url: str, body: dict[str, Any] | bytes) -> tuple[int, Any, bytes]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    headers = {**AUTH, "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/chat/completions", data=data, headers=headers) as response,
    ):
        return response.status, response.headers, await response.read()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_huge_id_or_fingerprint_is_not_repeated(
    hostile: tuple[HostileUpstream, str], stream: bool
) -> None:
    _, url = hostile
    status, _, raw = await _post(url, {"model": "huge-id", "messages": CHAT, "stream": stream})
    assert status == 200
    assert len(raw) < 100_000 and HUGE[:1000] not in raw.decode()
    objects = parse_frames(raw)[:-1] if stream else [orjson.loads(raw)]
    assert all(MADE_ID["chat"].match(o["id"]) for o in objects)
    assert all("system_fingerprint" not in o for o in objects)


async def test_a_retry_field_of_5000_digits_is_ignored(
    hostile: tuple[HostileUpstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, url = hostile
    status, _, raw = await _post(url, {"model": "retry-field", "messages": CHAT, "stream": True})
    assert status == 200 and b"HTTP/1.1" not in raw
    frames = parse_frames(raw)
    assert frames[-1] == "[DONE]"
    text = "".join(f["choices"][0]["delta"].get("content", "") for f in frames[:-1] if f["choices"])
    assert text == "one two "
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("retry-after-inf", "86400"),
        ("retry-after-1e999", "86400"),
        ("retry-after-1e300", "86400"),
        ("retry-after-nan", None),
        ("retry-after-date", "86400"),
    ],
)
async def test_retry_after_is_finite_and_bounded(
    hostile: tuple[HostileUpstream, str], script: str, expected: str | None
) -> None:
    _, url = hostile
    status, headers, raw = await _post(url, {"model": script, "messages": CHAT})
    assert status == 429, raw
    validate(orjson.loads(raw), "ErrorResponse")
    assert headers.get("Retry-After") == expected


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_answer_nested_too_deeply_is_the_upstream_s_failure(
    hostile: tuple[HostileUpstream, str], stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = hostile
    model = "deep-stream" if stream else "deep-whole"
    status, _, raw = await _post(url, {"model": model, "messages": CHAT, "stream": stream})
    if stream:  # the first event went out: the failure is the stream's last
        assert status == 200
        last = parse_frames(raw)[-1]
        assert last["error"]["type"] == "upstream_error" and "deep" in last["error"]["message"]
    else:
        assert status == 502, raw
        assert "deep" in orjson.loads(raw)["error"]["message"]
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"model": "echo-body", "messages": [{"role": "user", "content": "hi"}], "extra": '
         + DEEP + b"}", 400),
        (b'{"model": "echo-body", "messages": [], "seed": 123456789012345678901234567890}', 400),
        (b'{"model": "echo-body", "messages": [{"role": "user", "content": "hi"}],'
         b' "seed": -9223372036854775809}', 400),
    ],
)  # fmt: skip
async def test_what_cannot_be_passed_on_exactly_is_refused(
    hostile: tuple[HostileUpstream, str], body: bytes, status: int
) -> None:
    _, url = hostile
    got, _, raw = await _post(url, body)
    assert got == status, raw
    validate(orjson.loads(raw), "ErrorResponse")


async def test_integers_within_64_bits_pass_on_exactly(
    hostile: tuple[HostileUpstream, str],
) -> None:
    _, url = hostile
    body = (
        b'{"model": "echo-body", "seed": 18446744073709551615, "user": "-9223372036854775808",'
        b' "messages": [{"role": "user", "content": "1234567890123456789012"}]}'
    )
    status, _, raw = await _post(url, body)
    assert status == 200, raw
    received = orjson.loads(orjson.loads(raw)["choices"][0]["message"]["content"])
    assert received["seed"] == 18446744073709551615


# --- finding 11: malformed HTTP is answered and logged without echoing what came ---------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TEAM_KEY.encode()
        + b"\x01\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TEAM_KEY.encode()
        + b"\r\nContent-Length: nope\r\n\r\n{}",
        b"POST /v1/" + TEAM_KEY.encode() + b" HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-"
        + TEAM_KEY.encode()
        + b"\x00: 1\r\n\r\n",
    ],
)
async def test_malformed_http_echoes_no_credential(
    hostile: tuple[HostileUpstream, str], request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = hostile
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1].startswith(b"4"), answer[:200]
    validate(orjson.loads(body), "ErrorResponse")
    assert TEAM_KEY.encode() not in answer
    assert TEAM_KEY not in caplog.text and "Traceback" not in caplog.text
    assert "malformed HTTP request" in caplog.text


# --- finding 14 ----------------------------------------------------------------------------


async def _comments_only(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    for _ in range(100):
        writer.write(chunk(b": keep-alive\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)


async def _empty_events(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    for _ in range(100):
        writer.write(chunk(b"data: \n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)


def _nameless_call(arguments: str) -> bytes:
    call = {"index": 0, "function": {"arguments": arguments}}
    payload = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
    return _event({"id": "chatcmpl-ok", **payload})


async def _nameless_flood(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + chunk(_event(_text_chunk("calling"))))
    for _ in range(300):  # 300 x 4 KiB of arguments for a call that never says its name
        writer.write(chunk(_nameless_call("a" * 4096)))
        await writer.drain()
    writer.write(chunk(_finish()) + b"0\r\n\r\n")


async def _nameless_end(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(
        _sse_answer([_event(_text_chunk("calling")), _nameless_call('{"x": 1}'), _finish()])
    )


async def _auth_event(request: bytes, writer: asyncio.StreamWriter) -> None:
    error = {"error": {"message": "Invalid API key", "code": 401, "type": "auth"}}
    writer.write(_sse_answer([_event(error)]))


async def _auth_status(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_json(401, {"error": {"message": "Incorrect API key provided"}}))


FOURTEEN = {
    "comments-only": _comments_only,
    "empty-events": _empty_events,
    "nameless-flood": _nameless_flood,
    "auth-event": _auth_event,
    "auth-status": _auth_status,
}


@pytest.fixture(scope="module")
def fourteen(servers: Servers) -> Iterator[str]:
    timeouts = {"connect": 2, "first_byte": 0.5, "idle": 1, "total": 8}
    provider = {"api_key": API_KEY, "timeouts": timeouts}
    with proxied(servers, FOURTEEN, provider=provider) as (_, url, _gateway):
        yield url


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("script", ["comments-only", "empty-events"])
async def test_a_stream_of_nothing_meets_the_first_byte_limit(
    fourteen: str, script: str, stream: bool
) -> None:
    started = time.monotonic()
    status, _, raw = await _post(fourteen, {"model": script, "messages": CHAT, "stream": stream})
    assert status == 504, raw
    assert "(first byte)" in orjson.loads(raw)["error"]["message"]
    assert time.monotonic() - started < 2  # not the idle limit after each comment, nor total


async def test_nameless_tool_call_arguments_are_bounded(fourteen: str) -> None:
    body = {"model": "nameless-flood", "messages": CHAT, "stream": True}
    status, _, raw = await _post(fourteen, body)
    assert status == 200
    last = parse_frames(raw)[-1]
    assert last != "[DONE]" and last["error"]["type"] == "upstream_error"
    assert "without a function name" in last["error"]["message"]
    assert len(raw) < 100_000  # nothing of it buffered out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("script", ["auth-event", "auth-status"])
async def test_the_upstream_refusing_the_proxy_s_key_is_a_502(
    fourteen: str, script: str, stream: bool
) -> None:
    status, _, raw = await _post(fourteen, {"model": script, "messages": CHAT, "stream": stream})
    assert status == 502, raw
    error = orjson.loads(raw)["error"]
    assert error["type"] == "upstream_error" and "API key" in error["message"]


async def test_an_unknown_expectation_is_refused_though_the_body_came(fourteen: str) -> None:
    body = orjson.dumps({"model": "auth-status", "messages": CHAT})
    headers = {**AUTH, "Content-Type": "application/json", "Expect": "200-ok"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(fourteen + "/chat/completions", data=body, headers=headers) as r,
    ):
        assert r.status == 417
        validate(await r.json(), "ErrorResponse")


# --- finding 6: a whole answer collected from a stream is bounded in size -------------------


async def _flood_stream(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    text = "y" * (512 * 1024)  # under the bound of one event (1 MiB)
    for _ in range(20):  # 10 MiB of text, past the test's bound of a whole answer (8 MiB)
        writer.write(chunk(_event(_text_chunk(text))))
        await writer.drain()


async def test_a_stream_collected_for_a_whole_answer_is_bounded_in_size(servers: Servers) -> None:
    limit = {"max_response_bytes": 8 << 20}
    with proxied(servers, {"flood": _flood_stream}, server=limit) as (_, url, _gateway):
        status, _, raw = await _post(url, {"model": "flood", "messages": CHAT})
    assert status == 502, raw[:300]
    assert f"larger than the limit of {8 << 20} bytes" in orjson.loads(raw)["error"]["message"]


# --- every client input is answered in section 4's shape, without a traceback ----------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_FIELDS = st.sampled_from(
    ["model", "messages", "stream", "stream_options", "n", "max_tokens", "prompt", "seed", "tools"]
)
_BODIES = st.one_of(
    st.dictionaries(_FIELDS | st.text(max_size=8), _VALUES, max_size=6),
    st.fixed_dictionaries(
        {"model": st.just("echo-body"), "messages": _VALUES},
        optional={"stream": _VALUES, "n": _VALUES, "max_tokens": _VALUES, "extra": _VALUES},
    ),
    st.builds(lambda depth: {"model": "echo-body", "messages": CHAT, "x": _nest(depth)},
              st.integers(min_value=250, max_value=1100)),
)  # fmt: skip


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _raw(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except (TypeError, orjson.JSONEncodeError):  # deeper than orjson writes: by hand
        return json.dumps(body).encode()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_BODIES | st.binary(max_size=64).map(lambda b: b"\x00" + b))
def test_any_body_gets_a_canonical_answer(
    hostile: tuple[HostileUpstream, str], caplog: pytest.LogCaptureFixture, body: Any
) -> None:
    _, url = hostile
    data = body if isinstance(body, bytes) else _raw(body)
    request = urllib.request.Request(
        url + "/chat/completions", data=data, method="POST",
        headers={**AUTH, "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
            streamed = response.headers["Content-Type"].startswith("text/event-stream")
    except urllib.error.HTTPError as error:
        status, raw, streamed = error.code, error.read(), False
    if status >= 400:
        validate(orjson.loads(raw), "ErrorResponse")
        assert status in (400, 404, 413, 502), raw
    elif streamed:
        for frame in parse_frames(raw)[:-1]:
            validate(
                frame, "ErrorResponse" if "error" in frame else "CreateChatCompletionStreamResponse"
            )
    else:
        validate(orjson.loads(raw), "CreateChatCompletionResponse")
    assert "Traceback" not in caplog.text


# --- finding 14: choices beyond what was asked ------------------------------------------------


def _many_choices_stream(count: int) -> bytes:
    delta = {"role": "assistant", "content": "c"}
    events = [
        _event(
            {
                "id": "chatcmpl-many",
                "choices": [{"index": i, "delta": delta, "finish_reason": "stop"}],
            }
        )
        for i in range(count)
    ]
    return _sse_answer([*events, b"data: [DONE]\n\n"])


async def _many_choices(request: bytes, writer: asyncio.StreamWriter) -> None:
    if orjson.loads(request.partition(b"\r\n\r\n")[2]).get("stream"):
        writer.write(_many_choices_stream(5000))
        return
    answer = orjson.loads(_next_answer().partition(b"\r\n\r\n")[2])
    choice = answer["choices"][0]
    answer["choices"] = [{**choice, "index": i} for i in range(5000)]
    writer.write(_json(200, answer))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("n", "relayed"), [(1, 1), (2, 2), (None, 128)])
async def test_choices_beyond_what_was_asked_are_dropped(
    servers: Servers, stream: bool, n: int | None, relayed: int
) -> None:
    body: dict[str, Any] = {"model": "many", "messages": CHAT, "stream": stream}
    if n is not None:
        body["n"] = n
    with proxied(servers, {"many": _many_choices}) as (_, url, _gateway):
        status, _, raw = await _post(url, body)
    assert status == 200, raw[:300]
    if stream:
        frames = parse_frames(raw)
        assert frames[-1] == "[DONE]"
        indices = {c["index"] for f in frames[:-1] for c in f["choices"]}
    else:
        indices = {c["index"] for c in orjson.loads(raw)["choices"]}
    assert indices == set(range(relayed))


# --- the same through a real server of two workers: its stderr too ---------------------------


def test_no_credential_in_two_workers_answers_stderr_or_metrics(
    echoing: tuple[HostileUpstream, str], tmp_path: Path
) -> None:
    upstream, _ = echoing
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "workers": 2},
        "metrics": {"token": "metrics-token-0005"},
        # Every answer here is a failure: no circuit may open on them before the last request.
        "routing": {
            "attempts": 2,
            "backoff": {"base": 0.01, "max": 0.02},
            "circuit": {"failures": 1000},
        },
        "providers": {
            name: {
                "base_url": upstream.url(name),
                "api_key": API_KEY,
                "headers": {"x-goog-api-key": GOOG_KEY, "X-Gateway-Token": GATEWAY_TOKEN},
                "query": {"key": QUERY_KEY},
            }
            for name in SCRIPTS
        },
        "models": {name: {"provider": name, "model": "up"} for name in SCRIPTS},
        "teams": {"research": {"keys": [TEAM_KEY], "models": ["*"]}},
    }
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "stderr.log"
    root = Path(__file__).resolve().parents[2]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--config", str(path)],
            cwd=root, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while log.read_text().count(" listening on ") < 2:
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            time.sleep(0.1)
        received = []
        for script in sorted(SCRIPTS) * 2:  # twice: each worker is likely to take some
            for stream in (False, True):
                body = orjson.dumps({"model": script, "messages": CHAT, "stream": stream})
                request = urllib.request.Request(
                    base + "/v1/chat/completions", data=body, method="POST",
                    headers={**AUTH, "Content-Type": "application/json"},
                )  # fmt: skip
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        received.append(response.read().decode())
                except urllib.error.HTTPError as error:
                    received.append(error.read().decode())
        metrics = urllib.request.Request(
            base + "/metrics", headers={"Authorization": "Bearer metrics-token-0005"}
        )
        with urllib.request.urlopen(metrics, timeout=10) as response:
            received.append(response.read().decode())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
    for text in received[:-1]:
        assert "***" in text, text
    for text in [*received, log.read_text()]:
        assert_no_secret(text)
        assert "metrics-token-0005" not in text
    assert "Traceback" not in log.read_text()
