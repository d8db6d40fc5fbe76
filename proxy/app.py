"""``build_app(config)``: the proxy's handlers, middleware and lifetimes, wired; no globals.

Everything a request needs hangs off the application (``proxy.state.STATE``); the one place
that turns an exception into an HTTP answer is ``exchange_middleware``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from time import perf_counter
from typing import Final

import aiohttp
import orjson
from aiohttp import web

from proxy.completion import handle_completion
from proxy.config import Config
from proxy.errors import (
    BodyTooLarge,
    InvalidRequest,
    NotFound,
    ProxyError,
    ServiceUnavailable,
    UpstreamError,
    to_openai_error,
)
from proxy.exchange import Exchange
from proxy.routing import allowed_models
from proxy.state import EXCHANGE, STATE, Observer, Runtime, State
from proxy.upstream import UpstreamClient

__all__ = ["EXCHANGE", "STATE", "Observer", "Runtime", "State", "build_app", "error_response"]

log = logging.getLogger("proxy")

_REQUEST_ID: Final = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
_ENDPOINTS: Final = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/models": "models",
}


def error_response(exc: ProxyError, headers: Mapping[str, str] | None = None) -> web.Response:
    status, body = to_openai_error(exc)
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


def _request_id(request: web.Request, runtime: Runtime) -> str:
    given = request.headers.get("X-Request-Id")
    if given is not None and _REQUEST_ID.match(given):
        return given
    # Unique, not secret: the runtime's PRNG spares a getrandom() system call per request.
    return f"{runtime.rng.getrandbits(128):032x}"


def _http_error(exc: web.HTTPException) -> ProxyError:
    if exc.status == 404:
        return NotFound(f"Unknown path: no route for this URL ({exc.status})", code="unknown_url")
    if exc.status == 405:
        return InvalidRequest("Method not allowed for this URL", code="method_not_allowed")
    if exc.status == 413:
        return BodyTooLarge("The request body is too large")
    return InvalidRequest(exc.reason or "Bad request")


@web.middleware
async def exchange_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Give each API request its Exchange and turn every failure into CANONICAL.md 4's shape."""
    state = request.app[STATE]
    endpoint = _ENDPOINTS.get(request.path)
    if endpoint is None and not request.path.startswith("/v1/"):
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(_http_error(exc))
    loop = asyncio.get_running_loop()
    exchange = Exchange(_request_id(request, state.runtime), endpoint or "other", perf_counter())
    request[EXCHANGE] = exchange
    for observer in state.observers:
        observer.started(exchange)
    response: web.StreamResponse
    try:
        response = await handler(request)
    except ProxyError as exc:
        response = _failed(exchange, exc)
    except web.HTTPException as exc:
        response = _failed(exchange, _http_error(exc))
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the client disconnects (handler_cancellation).
        exchange.client_disconnected = True
        raise
    except Exception:
        log.exception("request %s failed", exchange.request_id)
        response = _failed(exchange, ProxyError("The proxy failed to handle the request"))
    else:
        # Before the observers run: they count the request under the status it was answered with.
        if not exchange.status and not exchange.client_disconnected:
            exchange.status = response.status
    finally:
        exchange.ended = perf_counter()
        # After the response has gone out (aiohttp writes it as soon as this returns): the
        # client does not wait for metrics and the access log.
        loop.call_soon(_finished, state.observers, exchange)
    if not response.prepared:
        response.headers["X-Request-Id"] = exchange.request_id
    return response


def _finished(observers: Sequence[Observer], exchange: Exchange) -> None:
    for observer in observers:
        observer.finished(exchange)


def _failed(exchange: Exchange, exc: ProxyError) -> web.Response:
    exchange.failure = exc
    exchange.status = exc.http_status
    if isinstance(exc, UpstreamError):
        exchange.upstream_error = exc.kind
    headers = None
    retry_after = getattr(exc, "retry_after", None)
    if exchange.status == 429 and retry_after is not None:
        headers = {"Retry-After": str(max(1, round(retry_after)))}
    return error_response(exc, headers)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await handle_completion(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await handle_completion(request, "completions")


async def list_models(request: web.Request) -> web.Response:
    runtime = request.app[STATE].runtime
    team = runtime.keyring.identify(request.headers.get("Authorization"))
    exchange = request[EXCHANGE]
    exchange.team = team.name
    config = runtime.config
    data = [
        {
            "id": name,
            "object": "model",
            "created": runtime.loaded_at,
            "owned_by": config.models[name].deployments[0].provider,
        }
        for name in allowed_models(config, team)
    ]
    return web.Response(
        body=orjson.dumps({"object": "list", "data": data}), content_type="application/json"
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    if not request.app[STATE].ready:
        return error_response(
            ServiceUnavailable("The proxy is not ready (starting or shutting down)")
        )
    return web.json_response({"status": "ready"})


async def _announce_stream(request: web.Request, response: web.StreamResponse) -> None:
    # A stream's response is prepared inside its handler (the relay's first write); every other
    # response only after the middleware has seen the request finish. So this is the moment a
    # stream starts, seen without a hook in the relay.
    exchange: Exchange | None = request.get(EXCHANGE)
    if exchange is None or not exchange.stream or exchange.ended:
        return
    for observer in request.app[STATE].observers:
        observer.stream_started(exchange)


async def _upstream_session(app: web.Application) -> AsyncIterator[None]:
    # One pooled keep-alive session per process (per worker); its lifetime is the app's.
    connector = aiohttp.TCPConnector(
        limit=1024, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True
    )
    # No cookie jar: a cookie one upstream sets while answering one team must never ride along
    # on another team's request (nor is a gateway a browser session).
    session = aiohttp.ClientSession(
        connector=connector,
        auto_decompress=True,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    state = app[STATE]
    state.client = UpstreamClient(session)
    state.ready = True
    try:
        yield
    finally:
        state.ready = False
        state.client = None
        await session.close()


def build_app(
    config: Config,
    *,
    observers: Sequence[Observer] = (),
    extra_routes: Sequence[web.RouteDef] = (),
) -> web.Application:
    """The proxy as an aiohttp application for ``config``."""
    # The body limit is enforced by read_body with a proper error; aiohttp's own stays out of it.
    app = web.Application(
        middlewares=[exchange_middleware], client_max_size=config.server.max_body_bytes + 1
    )
    app[STATE] = State(Runtime.from_config(config), observers=observers)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_routes(extra_routes)
    app.on_response_prepare.append(_announce_stream)
    app.cleanup_ctx.append(_upstream_session)
    return app
