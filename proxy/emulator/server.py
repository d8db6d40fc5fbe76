"""The emulator's aiohttp application: routes, the request log, and serving it.

    request                                         answer: the model's recording, or its fault
    POST .../chat/completions, .../completions      OpenAI's ``chat`` and ``completions``
    POST .../embeddings, .../responses              OpenAI's ``embeddings`` and ``responses``
    POST .../api/chat/inference                     Maritaca's ``chat-inference``
    POST .../v1/messages                            Anthropic's ``messages``
    POST .../v1/messages/count_tokens               Anthropic's ``count-tokens``
    POST .../models/{model}:generateContent         Gemini's ``generate-content``; streamed
    POST .../models/{model}:streamGenerateContent   (SSE with ``alt=sse``, else a JSON array)
    POST .../models/{model}:batchEmbedContents      Gemini's ``batch-embed-contents``
    POST .../v2/chat, .../v2/embed                  Cohere's ``chat`` and ``embed``
    POST .../api/chat, .../api/generate             Ollama's ``api-chat`` and ``api-generate``
    POST .../api/embed                              Ollama's ``api-embed``
    POST .../{model}/generate_stream, /generate     TGI's ``generate-stream`` and ``generate``
    POST .../model/{id}/converse, /converse-stream  Bedrock's ``converse``, ``converse-stream``
    POST .../model/{id}/invoke                      Bedrock's ``invoke`` (InvokeModel)
    POST .../models/{model}:predict                 Vertex AI's ``predict`` (embeddings)
    POST .../models/{model}:rawPredict              Vertex AI's Claude: Anthropic's ``messages``
    POST .../models/{model}:streamRawPredict        (streamed: ``.stream.sse``)
    POST /token                                     OAuth tokens for Vertex AI (``cloud``)
    GET  .../models                                 every model a request can ask for
    GET  /_emulator/requests                        the requests received, newest last (1000)
    DELETE /_emulator/requests                      forget them
    a known path, another method                    405 with Allow
    anything else                                   404, OpenAI-style

A body that is not JSON gets 400, a body without a string ``model`` 400 (unless the path names
the model), an unknown fault 400 and a model with no recording 404, each with an error body in
the envelope of the endpoint's provider (see ``envelope``). Bedrock's and Vertex AI's paths
first check the request's credentials when the app is given some (see ``cloud``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import signal
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import orjson
from aiohttp import web

from proxy.emulator.cloud import (
    CloudAuth,
    answer_token,
    check_bedrock,
    check_vertex,
    is_vertex_path,
)
from proxy.emulator.endpoint import (
    ENDPOINTS,
    Endpoint,
    match_endpoint,
    model_list,
    path_model,
    recording_names,
    stream_ending,
    wants_stream,
)
from proxy.emulator.envelope import ErrorInfo
from proxy.emulator.fault import Fault, FaultError, parse_fault, split_model
from proxy.emulator.playback import Playback, error_response, play
from proxy.emulator.recording import parse_recording
from proxy.emulator.request_log import (
    NOT_JSON,
    REQUEST_LOG_SIZE,
    RecordedRequest,
    parse_json,
    record,
)
from proxy.emulator.sigv4 import AwsKey
from proxy.emulator.store import RECORDINGS_DIR, RecordingStore
from proxy.emulator.sts import answer_assume_role

# Large enough for any prompt a test sends; the proxy, not the emulator, enforces body limits.
_MAX_BODY: Final = 64 * 1024 * 1024

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Emulator:
    store: RecordingStore
    chunk_delay: float
    route_faults: Mapping[str, Fault]
    requests: deque[RecordedRequest]
    responding: dict[asyncio.Task[Any], web.Request]
    """The requests being answered, by the task answering each."""
    cloud: CloudAuth
    tokens: dict[str, float]
    """The access tokens ``/token`` issued, with when each expires (``time.monotonic``)."""
    roles: dict[str, AwsKey]
    """The temporary keys ``/sts`` issued for roles assumed, which Bedrock's paths take too."""


EMULATOR: Final = web.AppKey("emulator", Emulator)


def build_emulator_app(
    recordings: Path | None = None,
    *,
    chunk_delay: float = 0.0,
    faults: Mapping[str, str] | None = None,
    cloud: CloudAuth | None = None,
) -> web.Application:
    """The emulator, replaying ``recordings`` (None: the packaged ones).

    ``chunk_delay`` is the pause in seconds between a stream's events. ``faults`` maps an
    endpoint name (``chat``, ``completions``, ``messages``, ``models``, ...: ``ENDPOINTS``) to
    the fault every request to it gets unless its model names another; ValueError if one
    cannot be parsed. ``cloud``: the Bedrock and Vertex AI credentials it accepts (None:
    those paths take any request).
    """
    if not math.isfinite(chunk_delay) or chunk_delay < 0:
        raise ValueError(f"chunk_delay must be a number of seconds, not {chunk_delay!r}")
    route_faults = _parse_route_faults(faults or {})
    app = web.Application(client_max_size=_MAX_BODY)
    app[EMULATOR] = Emulator(
        store=RecordingStore(recordings if recordings is not None else RECORDINGS_DIR),
        chunk_delay=chunk_delay,
        route_faults=route_faults,
        requests=deque(maxlen=REQUEST_LOG_SIZE),
        responding={},
        cloud=cloud or CloudAuth(),
        tokens={},
        roles={},
    )
    app.on_shutdown.append(_cut_off_responses)
    app.on_response_prepare.append(_set_cookie)
    app.router.add_get("/_emulator/requests", _list_requests)
    app.router.add_delete("/_emulator/requests", _clear_requests)
    app.router.add_post("/token", _issue_token)
    app.router.add_post("/sts", _assume_role)
    app.router.add_route("*", "/{path:.*}", _answer)
    return app


async def run_emulator(
    host: str,
    port: int,
    recordings: Path | None = None,
    chunk_delay: float = 0.0,
    *,
    faults: Mapping[str, str] | None = None,
    cloud: CloudAuth | None = None,
    stop_signals: bool = False,
) -> None:
    """Serve the emulator on ``host``:``port`` until cancelled.

    ``stop_signals``: also stop on SIGTERM and SIGINT (as a process of its own, where it may
    be PID 1 in a container, which gets no default SIGTERM handling).
    """
    app = build_emulator_app(recordings, chunk_delay=chunk_delay, faults=faults, cloud=cloud)
    # Cancelling the handler of a client that went away ends its hang or stall at once; an
    # access log would only slow benchmarks down.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        for address in runner.addresses:
            # Logged after binding because port 0 asks the system to choose the port.
            url = _http_url(address[0], address[1])
            logger.info("emulator serving %s on %s", app[EMULATOR].store.directory, url)
        stop = asyncio.Event()
        if stop_signals:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def _http_url(host: str, port: int) -> str:
    # An IPv6 literal is bracketed in a URL (RFC 3986, 3.2.2).
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _parse_route_faults(faults: Mapping[str, str]) -> Mapping[str, Fault]:
    names = {endpoint.name for endpoint in ENDPOINTS}
    parsed: dict[str, Fault] = {}
    for name, spec in faults.items():
        if name not in names:
            raise ValueError(f"no endpoint {name!r} for fault {spec!r}; endpoints: {sorted(names)}")
        try:
            parsed[name] = parse_fault(spec)
        except FaultError as exc:
            raise ValueError(f"endpoint {name!r}: {exc}") from exc
    return MappingProxyType(parsed)


async def _cut_off_responses(app: web.Application) -> None:
    # on_shutdown runs before aiohttp waits for the handlers still running, which it would do
    # for shutdown_timeout (60 s) before cancelling them itself: hung, stalled and endless
    # responses end here instead. Aborting first also frees a write waiting for a client that
    # stopped reading, and leaves no half-written connection open.
    for task, request in list(app[EMULATOR].responding.items()):
        if request.transport is not None:
            request.transport.abort()
        task.cancel()


async def _set_cookie(request: web.Request, response: web.StreamResponse) -> None:
    # Like api.openai.com behind Cloudflare: every answer sets a bot-management cookie. A gateway
    # must never send it back (it would ride along on another team's request).
    response.headers["Set-Cookie"] = (
        f"__cf_bm={secrets.token_urlsafe(16)}; path=/; max-age=1800; HttpOnly; SameSite=None"
    )


async def _list_requests(request: web.Request) -> web.Response:
    log = list(request.app[EMULATOR].requests)
    return web.Response(body=orjson.dumps(log), headers={"Content-Type": "application/json"})


async def _clear_requests(request: web.Request) -> web.Response:
    request.app[EMULATOR].requests.clear()
    return web.Response(status=204)


async def _issue_token(request: web.Request) -> web.Response:
    emulator = request.app[EMULATOR]
    emulator.requests.append(record(request, None))
    return await answer_token(request, emulator.cloud, emulator.tokens)


async def _assume_role(request: web.Request) -> web.Response:
    emulator = request.app[EMULATOR]
    emulator.requests.append(record(request, None))
    keys = dict(emulator.cloud.aws_keys)
    return await answer_assume_role(request, keys, emulator.roles, emulator.cloud.role_lifetime)


async def _answer(request: web.Request) -> web.StreamResponse:
    emulator = request.app[EMULATOR]
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("aiohttp runs every handler in a task")
    emulator.responding[task] = request
    try:
        return await _answer_request(request, emulator)
    finally:
        del emulator.responding[task]


async def _answer_request(request: web.Request, emulator: Emulator) -> web.StreamResponse:
    body = await request.read()
    payload = parse_json(body)
    emulator.requests.append(record(request, payload))
    endpoint = match_endpoint(request.path)
    if endpoint is None:
        message = f"Invalid URL ({request.method} {request.path})"
        return error_response(ErrorInfo(404, message, code="unknown_url"))
    refused = (
        check_bedrock(request, body, emulator.cloud, emulator.roles)
        if endpoint.dialect == "bedrock"
        else check_vertex(request, emulator.cloud, emulator.tokens)
        if is_vertex_path(request.path)
        else None
    )
    if refused is not None:
        return refused
    if request.method != endpoint.method:
        message = f"{request.method} is not allowed on {request.path}; use {endpoint.method}"
        error = ErrorInfo(405, message)
        return error_response(error, dialect=endpoint.dialect, headers={"Allow": endpoint.method})
    if endpoint.method == "GET":
        listing = parse_recording("models.json", model_list(emulator.store.names()))
        playback = Playback(request, endpoint, "", listing, emulator.chunk_delay)
        return await play(playback, emulator.route_faults.get(endpoint.name))
    return await _answer_model(request, emulator, endpoint, payload)


async def _answer_model(
    request: web.Request, emulator: Emulator, endpoint: Endpoint, payload: object
) -> web.StreamResponse:
    asked = _requested_model(request, endpoint, payload)
    if isinstance(asked, ErrorInfo):
        return error_response(asked, dialect=endpoint.dialect)
    model, body = asked
    param = None if endpoint.model_in_path else "model"
    base, spec = split_model(model)
    try:
        fault = parse_fault(spec) if spec is not None else emulator.route_faults.get(endpoint.name)
    except FaultError as exc:
        error = ErrorInfo(400, str(exc), param=param, code="invalid_fault")
        return error_response(error, dialect=endpoint.dialect)
    ending = stream_ending(endpoint, request.query)
    recording = None
    if fault is None or fault.needs_recording:
        stream = wants_stream(endpoint, body)
        recording = emulator.store.find(
            recording_names(base, endpoint, stream=stream, ending=ending)
        )
        if recording is None:
            message = f"no recording for model '{base}'"
            error = ErrorInfo(404, message, param=param, code="model_not_found")
            return error_response(error, dialect=endpoint.dialect)
    playback = Playback(request, endpoint, base, recording, emulator.chunk_delay, ending=ending)
    return await play(playback, fault)


def _requested_model(
    request: web.Request, endpoint: Endpoint, payload: object
) -> tuple[str, dict[str, object]] | ErrorInfo:
    """The model the request names (see ``endpoint``) and its body, or the 400 it gets."""
    if payload is NOT_JSON:
        return ErrorInfo(400, "the request body is not valid JSON", code="invalid_json")
    if endpoint.model_in_path:
        if not isinstance(payload, dict):
            return ErrorInfo(400, "the request body must be a JSON object")
        in_path = path_model(endpoint, request.path, request.raw_path.partition("?")[0])
        if not in_path:
            return ErrorInfo(400, f"the path names no model before {endpoint.suffix}")
        return in_path, payload
    if not isinstance(payload, dict) or not isinstance(model := payload.get("model"), str):
        message = "the request body must be a JSON object with a string 'model'"
        return ErrorInfo(400, message, param="model")
    return model, payload
