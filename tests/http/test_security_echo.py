"""No configured secret in anything the proxy answers (docs/security.md), through the running
proxy.

A hostile upstream of the tests' own (tests/support/hostile.py) quotes the request it got (the
head with every credential header, the query with its key, the body) in each error form its API
has: a non-200 status with its JSON envelope, plain text, a 200 whole body carrying its error,
and an error in its stream (first, after some content, and split across two reads in the middle
of a key). Each is asked for on every endpoint, every upstream API, and the Responses
pass-through; the client's bytes, /metrics and the log must hold no form of any configured secret.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import aiohttp
import orjson
import pytest
from yarl import URL

from proxy.http.upstream import TEXT_MAX
from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers
from tests.support.hostile import HostileUpstream, Script, chunk
from tests.support.metrics import scrape, serve, write_config
from tests.support.schema import validate

API_KEY = "sk-hostile-api-key-0001"
GOOG_KEY = "goog-header-secret-0002"
GATEWAY_TOKEN = "gateway/token+value=0003"  # changed by URL-encoding
QUERY_KEY = "query/key+secret=0004"
AZURE_KEY = "az-5f0c9e1d7b3a-0005"
ADMIN_KEY = "adm-8c1e4b7f2d90-0006"
SECRETS = (API_KEY, GOOG_KEY, GATEWAY_TOKEN, QUERY_KEY, AZURE_KEY, ADMIN_KEY, TEAM_KEY, SUPPORT_KEY)


def _query(secret: str) -> str:
    """``secret`` as a query value in the request line the proxy sends (yarl quotes it)."""
    return URL("http://upstream/").with_query({"k": secret}).raw_query_string[2:]


# Every secret's forms (as it is, percent-encoded, form-encoded, in a query), longest first.
FORMS = sorted(
    {form for s in SECRETS for form in (s, quote(s, safe=""), quote_plus(s, safe=""), _query(s))},
    key=len,
    reverse=True,
)
# A fragment this long of a secret is a leak too: a text cut short before it was redacted.
FRAGMENT = 10
QUOTED = f"key {API_KEY} refused"  # for the envelope's other strings: type, param, code
CHAT = [{"role": "user", "content": "Hello"}]


def assert_no_secret(text: str, where: str) -> None:
    for form in FORMS:
        assert form not in text, f"{form!r} leaked in {where}: {text}"
    for form in FORMS:
        for start in range(len(form) - FRAGMENT + 1):
            piece = form[start : start + FRAGMENT]
            assert piece not in text, f"{piece!r} of {form!r} leaked in {where}: {text}"


def _echo(request: bytes) -> str:
    """What a careless upstream quotes back: the request it got, head and body."""
    return request.decode("utf-8", "replace")


def _answer(status: int, content_type: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _stream_head(content_type: str) -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


def _sse(payload: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _chat(request: bytes) -> bool:
    return b"/chat/completions" in request.split(b"\r\n", 1)[0]


# --- each upstream API's error forms and one event of content, framed as it frames them --------


def _openai_envelope(echo: str) -> object:
    message = f"Incorrect API key provided: {echo}"
    return {"error": {"message": message, "type": QUOTED, "param": QUOTED, "code": QUOTED}}


def _openai_content(request: bytes) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": None}
    choice.update({"delta": {"content": "Hi"}} if _chat(request) else {"text": "Hi"})
    return _sse({"id": "x-hostile", "created": 1764600000, "model": "up", "choices": [choice]})


def _anthropic_envelope(echo: str) -> object:
    return {"type": "error", "error": {"type": QUOTED, "message": echo}}


def _anthropic_content(request: bytes) -> bytes:
    message = {"id": "msg_hostile", "type": "message", "role": "assistant", "content": []}
    delta = {"type": "text_delta", "text": "Hi"}
    return (
        _sse({"type": "message_start", "message": message}, "message_start")
        + _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
        + _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
    )


def _gemini_envelope(echo: str) -> object:
    return {"error": {"code": 400, "message": echo, "status": QUOTED}}


def _gemini_content(request: bytes) -> bytes:
    content = {"parts": [{"text": "Hi"}], "role": "model"}
    return _sse({"candidates": [{"content": content, "index": 0}]})


def _cohere_envelope(echo: str) -> object:
    return {"id": "hostile", "message": echo}


def _cohere_event(echo: str) -> bytes:
    # Cohere says a failed generation in message-end: its finish_reason, and the error's text.
    delta = {"finish_reason": "ERROR", "error": echo}
    return _sse({"type": "message-end", "delta": delta}, "message-end")


def _cohere_content(request: bytes) -> bytes:
    text = {"message": {"content": {"type": "text", "text": "Hi"}}}
    return _sse({"id": "hostile", "type": "message-start", "delta": {}}, "message-start") + _sse(
        {"type": "content-delta", "index": 0, "delta": text}, "content-delta"
    )


def _ollama_event(echo: str) -> bytes:
    return orjson.dumps({"error": echo}) + b"\n"


def _ollama_content(request: bytes) -> bytes:
    message = {"role": "assistant", "content": "Hi"}
    line = {"model": "up", "created_at": "2025-01-22T11:22:42Z", "message": message, "done": False}
    return orjson.dumps(line) + b"\n"


def _tgi_envelope(echo: str) -> object:
    return {"error": echo, "error_type": QUOTED}


def _tgi_content(request: bytes) -> bytes:
    token = {"id": 1, "text": "Hi", "logprob": -0.5, "special": False}
    return b"data:" + orjson.dumps({"token": token, "generated_text": None}) + b"\n\n"


@dataclass(frozen=True)
class Api:
    """An upstream API: its error envelope (status and 200 alike), its stream's error event,
    one event of content, and how its streams are framed."""

    status: int
    envelope: Callable[[str], object]
    event: Callable[[str], bytes]
    content: Callable[[bytes], bytes]
    stream_type: str = "text/event-stream"
    # The client's endpoint it serves besides the Responses API translated over chat.
    endpoint: str = "chat"


APIS = {
    "openai": Api(400, _openai_envelope, lambda e: _sse(_openai_envelope(e)), _openai_content),
    "anthropic": Api(
        400,
        _anthropic_envelope,
        lambda e: _sse(_anthropic_envelope(e), "error"),
        _anthropic_content,
    ),
    "gemini": Api(400, _gemini_envelope, lambda e: _sse(_gemini_envelope(e)), _gemini_content),
    "cohere": Api(401, _cohere_envelope, _cohere_event, _cohere_content),
    "ollama": Api(
        400,
        lambda e: {"error": e},
        _ollama_event,
        _ollama_content,
        stream_type="application/x-ndjson",
    ),
    "tgi": Api(
        422,
        _tgi_envelope,
        lambda e: b"data:" + orjson.dumps(_tgi_envelope(e)) + b"\n\n",
        _tgi_content,
        endpoint="completions",
    ),
}
# Where the proxy says a failure in words of its own, not the upstream's: Cohere's stream ends
# with a finish_reason ERROR, and its 200 envelope is no answer at all; a text cut short ends
# before the word it would have cut.
OWN_WORDS = {("cohere", form) for form in ("ok-error", "event-first", "event-after", "event-split")}
OWN_WORDS.add(("openai", "status-text-cut"))


def _cut(event: bytes) -> int:
    """Where to cut ``event`` in two: in the middle of the first secret it quotes."""
    found = [(event.find(form.encode()), form) for form in FORMS if form.encode() in event]
    at, form = min(found)
    return at + len(form) // 2


def _scripts(api: Api) -> dict[str, Script]:
    async def status_json(request: bytes, writer: asyncio.StreamWriter) -> None:
        body = orjson.dumps(api.envelope(_echo(request)))
        writer.write(_answer(api.status, "application/json", body))

    async def status_text(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(400, "text/plain", request))

    async def status_text_cut(request: bytes, writer: asyncio.StreamWriter) -> None:
        # Padded so that the first secret it quotes straddles where a long text is cut short.
        echo = " ".join(_echo(request).split())
        at = min(echo.find(form) for form in FORMS if form in echo)
        padding = "x" * (TEXT_MAX - FRAGMENT - 2 - at - 1)
        writer.write(_answer(400, "text/plain", f"{padding} {echo}".encode()))

    async def ok_error(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(200, "application/json", orjson.dumps(api.envelope(_echo(request)))))

    async def event_first(request: bytes, writer: asyncio.StreamWriter) -> None:
        event = api.event(_echo(request))
        writer.write(_stream_head(api.stream_type) + chunk(event) + b"0\r\n\r\n")

    async def event_after(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_stream_head(api.stream_type) + chunk(api.content(request)))
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(chunk(api.event(_echo(request))) + b"0\r\n\r\n")

    async def event_split(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_stream_head(api.stream_type) + chunk(api.content(request)))
        event = api.event(_echo(request))
        cut = _cut(event)
        for piece in (event[:cut], event[cut:]):
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(chunk(piece))
        writer.write(b"0\r\n\r\n")

    return {
        "status-json": status_json,
        "status-text": status_text,
        "status-text-cut": status_text_cut,
        "ok-error": ok_error,
        "event-first": event_first,
        "event-after": event_after,
        "event-split": event_split,
    }


FORMS_OF_ERROR = (
    "status-json",
    "status-text",
    "ok-error",
    "event-first",
    "event-after",
    "event-split",
)
WHOLE_FORMS = ("status-json", "status-text", "ok-error")  # an endpoint that never streams


# --- the Responses pass-through: a provider serving /v1/responses itself ---------------------


def _response(status: str, **more: Any) -> dict[str, Any]:
    return {
        "id": "resp_hostile",
        "object": "response",
        "created_at": 1764600000,
        "status": status,
        "model": "up",
        "output": [],
        **more,
    }


def _message_item(text: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"id": "msg_hostile", "type": "message", "status": "completed", "role": "assistant",
            "content": content}  # fmt: skip


def _failed(echo: str) -> dict[str, Any]:
    return {"code": QUOTED, "message": f"The model failed: {echo}"}


def _responses_stream(events: list[bytes]) -> Script:
    async def script(request: bytes, writer: asyncio.StreamWriter) -> None:
        created = _sse({"type": "response.created", "response": _response("in_progress")},
                       "response.created")  # fmt: skip
        writer.write(_stream_head("text/event-stream") + chunk(created))
        for event in events:
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(chunk(event))
        writer.write(b"0\r\n\r\n")

    return script


async def _pt_error_event(request: bytes, writer: asyncio.StreamWriter) -> None:
    error = {"type": "error", "code": QUOTED, "message": _echo(request), "param": QUOTED}
    await _responses_stream([_sse(error, "error")])(request, writer)


async def _pt_failed(request: bytes, writer: asyncio.StreamWriter) -> None:
    response = _response("failed", error=_failed(_echo(request)))
    event = _sse({"type": "response.failed", "response": response}, "response.failed")
    await _responses_stream([event])(request, writer)


async def _pt_failed_split(request: bytes, writer: asyncio.StreamWriter) -> None:
    response = _response("failed", error=_failed(_echo(request)))
    event = _sse({"type": "response.failed", "response": response}, "response.failed")
    cut = _cut(event)
    await _responses_stream([event[:cut], event[cut:]])(request, writer)


async def _pt_whole_failed(request: bytes, writer: asyncio.StreamWriter) -> None:
    output = [_message_item("Hi")]
    error = {**_failed(_echo(request)), "code": "server_error"}  # one the schema has
    body = _response("failed", error=error, output=output)
    writer.write(_answer(200, "application/json", orjson.dumps(body)))


async def _pt_whole_failed_empty(request: bytes, writer: asyncio.StreamWriter) -> None:
    body = _response("failed", error=_failed(_echo(request)))
    writer.write(_answer(200, "application/json", orjson.dumps(body)))


async def _error_chunk(request: bytes, writer: asyncio.StreamWriter) -> None:
    """OpenRouter's mid-stream failure: a chunk with an ``error`` and a choice ending in error."""
    error = {"code": 502, "message": _echo(request), "metadata": {"error_type": QUOTED}}
    choice = {"index": 0, "delta": {"content": ""}, "finish_reason": "error"}
    event = _sse({"id": "x-hostile", "model": "up", "error": error, "choices": [choice]})
    writer.write(_stream_head("text/event-stream") + chunk(_openai_content(request)))
    await writer.drain()
    await asyncio.sleep(0.02)
    writer.write(chunk(event) + b"0\r\n\r\n")


OPENAI = {**_scripts(APIS["openai"]), "error-chunk": _error_chunk}
PASSTHROUGH: dict[str, Script] = {
    "error-event": _pt_error_event,
    "failed-event": _pt_failed,
    "failed-split": _pt_failed_split,
    "whole-failed": _pt_whole_failed,
    "whole-failed-empty": _pt_whole_failed_empty,
    "ok-error": OPENAI["ok-error"],
    "status-json": OPENAI["status-json"],
    "status-text": OPENAI["status-text"],
}


# --- the proxy in front of them ---------------------------------------------------------------

# Named "<provider kind>.<form>"; "azure" is an OpenAI API with Azure's api-key header.
_KINDS = {**{name: _scripts(api) for name, api in APIS.items()}, "openai": OPENAI}
_KINDS |= {"azure": OPENAI, "responses": PASSTHROUGH}
SCRIPTS = {f"{kind}.{form}": s for kind, scripts in _KINDS.items() for form, s in scripts.items()}


def _providers(upstream: HostileUpstream) -> dict[str, Any]:
    """A provider per script, named after it, each with every kind of credential."""
    providers: dict[str, Any] = {}
    for name in SCRIPTS:
        kind = name.partition(".")[0]
        provider: dict[str, Any] = {
            "base_url": upstream.url(name),
            # The api_key goes as the API sends it; a header named as Azure's replaces it.
            "api_key": API_KEY,
            "headers": {"X-Gateway-Token": GATEWAY_TOKEN, "X-Project": GOOG_KEY},
            "query": {"key": QUERY_KEY, "api-version": "preview"},
        }
        if kind == "azure":
            provider["headers"]["api-key"] = AZURE_KEY
        elif kind == "responses":
            provider["responses"] = True
        elif kind != "openai":
            provider["api"] = kind
        providers[name] = provider
    return providers


# The configuration's sections besides its models (a model per script, named after it).
SECTIONS: dict[str, Any] = {
    "admin": {"keys": [ADMIN_KEY]},
    "routing": {"attempts": 2, "backoff": {"base": 0.01, "max": 0.02}},
}
MODELS = {name: {"provider": name, "model": "up"} for name in SCRIPTS}


@pytest.fixture(scope="module")
def upstream(servers: Servers) -> Iterator[HostileUpstream]:
    hostile = HostileUpstream(SCRIPTS)
    servers.loop.call(hostile.start)
    try:
        yield hostile
    finally:
        servers.loop.call(hostile.stop)


@pytest.fixture(scope="module")
def echoing(servers: Servers, upstream: HostileUpstream) -> str:
    """The base URL of a proxy in front of the hostile upstream, with its metrics."""
    url, _, _ = servers.start_app(MODELS, metrics=True, providers=_providers(upstream), **SECTIONS)
    return url.removesuffix("/v1")


def _ask(endpoint: str, model: str, stream: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The path, body and headers of a request to ``endpoint`` for ``model``."""
    auth = {"Authorization": f"Bearer {TEAM_KEY}"}
    if endpoint.startswith("azure-"):
        # As AzureOpenAI sends it: the deployment in the path, the key in api-key.
        route = endpoint.removeprefix("azure-").replace("chat", "chat/completions")
        path = f"/openai/deployments/{model}/{route}?api-version=2024-10-21"
        _, body, _ = _ask(endpoint.removeprefix("azure-"), model, stream)
        return path, body, {"api-key": TEAM_KEY}
    if endpoint == "chat":
        return "/v1/chat/completions", {"model": model, "messages": CHAT, "stream": stream}, auth
    if endpoint == "completions":
        return "/v1/completions", {"model": model, "prompt": "Hello", "stream": stream}, auth
    if endpoint == "embeddings":
        return "/v1/embeddings", {"model": model, "input": "Hello"}, auth
    return "/v1/responses", {"model": model, "input": "Hello", "stream": stream}, auth


async def _exchange(
    base: str, endpoint: str, model: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> tuple[int, bytes]:
    """Ask, and check that no secret is in the answer (head and body) or the log."""
    caplog.set_level(logging.DEBUG)
    path, body, headers = _ask(endpoint, model, stream)
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + path, json=body, headers=headers) as response,
    ):
        status, raw = response.status, await response.read()
        head = b"".join(name + b": " + value + b"\n" for name, value in response.raw_headers)
    assert_no_secret((head + raw).decode(), "the answer")
    assert_no_secret(caplog.text, "the log")
    if status != 200:
        validate(orjson.loads(raw), "ErrorResponse")
    return status, raw


# --- the cases ---------------------------------------------------------------------------------


def _dialect_cases() -> Iterator[Any]:
    """Each API's forms on its own endpoint, asked whole and streamed (an upstream may stream
    what was asked whole, or answer a stream with a whole body); on /v1/responses translated
    to chat, streamed (the translation is the same for every API)."""
    for name, api in APIS.items():
        for form in FORMS_OF_ERROR:
            for stream in (False, True):
                kind = "stream" if stream else "whole"
                yield pytest.param(name, api.endpoint, form, stream, id=f"{name}-{form}-{kind}")
            if api.endpoint == "chat" and (name == "openai" or form.startswith("event")):
                for stream in (False, True) if name == "openai" else (True,):
                    kind = "stream" if stream else "whole"
                    case = f"{name}-responses-{form}-{kind}"
                    yield pytest.param(name, "responses", form, stream, id=case)


@pytest.mark.parametrize(("api", "endpoint", "form", "stream"), list(_dialect_cases()))
async def test_every_api_s_error_forms_reach_the_client_without_a_secret(
    echoing: str, api: str, endpoint: str, form: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Each upstream API's own error forms; the upstream's message is kept, less the secrets."""
    _, raw = await _exchange(echoing, endpoint, f"{api}.{form}", stream, caplog)
    if (api, form) not in OWN_WORDS:
        assert "***" in raw.decode(), raw


def _endpoint_cases() -> Iterator[Any]:
    for api, endpoint in (("openai", "completions"), ("azure", "azure-chat")):
        for form in FORMS_OF_ERROR:
            for stream in (False, True):
                yield pytest.param(api, endpoint, form, stream)
    for form in FORMS_OF_ERROR:
        yield pytest.param("azure", "azure-completions", form, True)
    yield pytest.param("openai", "chat", "status-text-cut", False)
    for stream in (False, True):
        yield pytest.param("openai", "chat", "error-chunk", stream)
    for api, endpoint in (("openai", "embeddings"), ("azure", "azure-embeddings")):
        for form in WHOLE_FORMS:
            yield pytest.param(api, endpoint, form, False)
    for api in ("gemini", "cohere", "ollama"):  # the native APIs that embed
        for form in WHOLE_FORMS:
            yield pytest.param(api, "embeddings", form, False)


@pytest.mark.parametrize(("api", "endpoint", "form", "stream"), list(_endpoint_cases()))
async def test_every_endpoint_s_answer_holds_no_secret(
    echoing: str, api: str, endpoint: str, form: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    _, raw = await _exchange(echoing, endpoint, f"{api}.{form}", stream, caplog)
    if (api, form) not in OWN_WORDS:
        assert "***" in raw.decode(), raw


# Each form as it comes: a stream for a stream request, a whole Response for a whole one (a
# pass-through takes no other: a mismatch is refused in the proxy's own words).
PASSTHROUGH_CASES = [
    *((form, True) for form in ("error-event", "failed-event", "failed-split")),
    *((form, False) for form in ("whole-failed", "whole-failed-empty", "ok-error")),
    *((form, stream) for form in ("status-json", "status-text") for stream in (False, True)),
]


@pytest.mark.parametrize(("form", "stream"), PASSTHROUGH_CASES)
async def test_the_responses_pass_through_holds_no_secret(
    echoing: str, form: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A provider's own Responses answers: its error events, a response.failed quoting the key,
    a whole Response with an error, a 200 {"error": ...} (an upstream error, not a 200)."""
    status, raw = await _exchange(echoing, "responses", f"responses.{form}", stream, caplog)
    assert "***" in raw.decode(), raw
    if form in ("ok-error", "whole-failed-empty"):
        assert status == 502
    if form == "whole-failed":  # the Response and its output, its error less the secrets
        assert status == 200
        validate(orjson.loads(raw), "Response")


async def test_metrics_hold_no_secret_after_every_case(echoing: str) -> None:
    """Last in the module: /metrics after all of the above (its labels are bounded; this makes
    sure no upstream's words became one)."""
    async with aiohttp.ClientSession() as session, session.get(echoing + "/metrics") as scraped:
        assert scraped.status == 200
        metrics = await scraped.text()
    assert "llm_proxy_upstream_errors_total" in metrics
    assert_no_secret(metrics, "/metrics")


async def test_two_workers_answer_and_log_no_secret(
    upstream: HostileUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``llm-proxy serve --workers 2``: each worker's answers, the metrics both share, and what
    the workers write to stderr (their log and access log)."""
    teams = {
        "research": {"keys": [TEAM_KEY], "models": ["*"]},
        "support": {"keys": [SUPPORT_KEY], "models": ["llama-*"]},
    }
    config = write_config(
        tmp_path / "proxy.yaml", "", MODELS, providers=_providers(upstream), teams=teams,
        access_log=True, **SECTIONS,
    )  # fmt: skip
    with serve(config, 2, tmp_path / "tmp") as served:
        # A connection of its own for each: the kernel spreads them over both workers.
        for form in FORMS_OF_ERROR:
            for stream in (False, True):
                await _exchange(served.root, "chat", f"openai.{form}", stream, caplog)
        for form, stream in PASSTHROUGH_CASES:
            await _exchange(served.root, "responses", f"responses.{form}", stream, caplog)
        assert_no_secret(scrape(served.root + "/metrics"), "/metrics")
    said = "".join(served.lines)
    assert '"request_id"' in said, said  # the access log is there
    assert_no_secret(said, "the workers' stderr")
