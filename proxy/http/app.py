"""``Gateway``: the proxy's requests, dispatched and answered, and its lifetime; no globals.

aiohttp's low-level server calls ``Gateway.handle`` for every request. It picks the handler by
path and method itself, gives each API request its Exchange, and is the one place that turns
an exception into an HTTP answer (docs/canonical-output.md section 4). There is no
``web.Application`` in the way: its router, middleware chain, ``Request`` objects and
response-prepare signal cost a measurable share of throughput (docs/performance.md), for a handful
of fixed paths and three prefixes (a model, a stored response, Azure's deployments).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from time import perf_counter
from typing import Final, Literal

import orjson
from aiohttp import web

from proxy.core.config import Config
from proxy.core.errors import (
    AuthenticationFailed,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    ProxyError,
    ServiceUnavailable,
    UpstreamError,
    handled,
    to_openai_error,
)
from proxy.core.exchange import Exchange
from proxy.http.admin import handle_admin
from proxy.http.batch import REPORT_DELAY, Batch
from proxy.http.cache.service import ResponseCache
from proxy.http.cache.stores import store_for as cache_store
from proxy.http.cloud import warm
from proxy.http.completion import authorization, handle_completion
from proxy.http.deadline import Deadlines
from proxy.http.faces import rate_limit_headers
from proxy.http.limits.limiter import Limiter, Shown, store_for
from proxy.http.messages import (
    MESSAGES_ENDPOINTS,
    PREFLIGHT,
    anthropic_error,
    asks_anthropic,
    handle_count_tokens,
    model_object,
    models_list,
)
from proxy.http.pipe import Relays
from proxy.http.pool import Pool
from proxy.http.reply import JsonReply
from proxy.http.state import Observer, Runtime, State, Tracing
from proxy.http.upstream import UpstreamClient

__all__ = ["Gateway", "Handler", "Observer", "Runtime", "State", "error_response"]

log = logging.getLogger("proxy")

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

_REQUEST_ID: Final = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
# The API: path after an optional /v1 → (method, endpoint). A client whose base_url has no /v1
# calls the paths without it (LiteLLM and vLLM serve both forms): one table answers both, as the
# same endpoint. Any other path under /v1/ is an API request too (metered, logged) that ends
# in 404.
ApiEndpoint = Literal[
    "chat", "completions", "embeddings", "responses", "messages", "count_tokens", "models"
]
_API: Final[Mapping[str, tuple[str, ApiEndpoint]]] = {
    "/chat/completions": ("POST", "chat"),
    "/completions": ("POST", "completions"),
    "/embeddings": ("POST", "embeddings"),
    "/responses": ("POST", "responses"),
    "/messages": ("POST", "messages"),  # Anthropic's Messages API (docs/anthropic-face.md)
    "/messages/count_tokens": ("POST", "count_tokens"),
    "/models": ("GET", "models"),
}
_MODEL_PREFIX: Final = "/models/"  # GET /v1/models/{model}, as client.models.retrieve calls
_RESPONSES_PREFIX: Final = "/responses/"  # GET/DELETE /v1/responses/{id}, .../input_items
# Apps written for AzureOpenAI: the deployment in the path is the model (docs/endpoints.md).
# The openai SDK puts it in the path as it is, so a model named like "meta-llama/Llama-3.1-8B"
# spans segments: the shortest that leaves an endpoint after it.
_AZURE: Final = re.compile(r"/openai/deployments/(.+?)/(chat/completions|completions|embeddings)")
_AZURE_ENDPOINTS: Final[Mapping[str, ApiEndpoint]] = {
    "chat/completions": "chat",
    "completions": "completions",
    "embeddings": "embeddings",
}
_GET: Final = ("GET", "HEAD")  # a GET route answers HEAD too (aiohttp drops the body)
# After the drain, how long requests that were cancelled get to end (their finally blocks).
_CANCELLED_WAIT: Final = 1.0


def error_response(exc: ProxyError, headers: Mapping[str, str] | None = None) -> JsonReply:
    status, body = to_openai_error(exc)
    return JsonReply(orjson.dumps(body), status=status, headers=headers)


def _error_headers(exc: ProxyError) -> dict[str, str] | None:
    if isinstance(exc, MethodNotAllowed):
        return {"Allow": ",".join(exc.allowed)}
    retry_after = getattr(exc, "retry_after", None)
    if exc.http_status == 429 and retry_after is not None:
        return {"Retry-After": str(max(1, round(retry_after)))}
    return None


def _unknown_path() -> NotFound:
    return NotFound("Unknown path: no route for this URL (404)", code="unknown_url")


def _not_stored() -> NotFound:
    return NotFound(
        "The proxy keeps no responses (it is stateless): a stored response cannot be retrieved,"
        " listed, cancelled or deleted. Send the whole conversation as input instead.",
        code="response_not_found",
    )


def _allow(method: str, expected: str) -> None:
    if method == expected or (expected == "GET" and method == "HEAD"):
        return
    raise MethodNotAllowed(_GET if expected == "GET" else (expected,))


def _identify(request: web.BaseRequest, runtime: Runtime, exchange: Exchange) -> None:
    """The team of a request to a path the proxy does not serve, if its key is one: the access
    log tells an operator which team's SDK calls what is missing. Its answer is 404 either way,
    as before: the path is unknown whoever asks."""
    with contextlib.suppress(AuthenticationFailed):
        exchange.team = runtime.keyring.identify(request.headers.get("Authorization")).name


def _model_object(runtime: Runtime, name: str) -> dict[str, object]:
    return {
        "id": name,
        "object": "model",
        "created": runtime.loaded_at,
        "owned_by": runtime.config.models[name].deployments[0].provider,
    }


def _request_id(request: web.BaseRequest, runtime: Runtime) -> str:
    given = request.headers.get("X-Request-Id")
    if given is not None and _REQUEST_ID.match(given):
        return given
    # Unique, not secret: the runtime's PRNG spares a getrandom() system call per request.
    return runtime.rng.getrandbits(128).to_bytes(16).hex()  # quicker than f"{:032x}"


class _Events:
    """The limiter's events, told to every observer."""

    def __init__(self, state: State) -> None:
        self.state = state

    def state_changed(self, up: bool) -> None:
        for observer in self.state.observers:
            observer.state_changed(up)

    def state_failed(self, operation: str) -> None:
        for observer in self.state.observers:
            observer.state_failed(operation)

    def settlements_dropped(self, count: int) -> None:
        for observer in self.state.observers:
            observer.settlements_dropped(count)

    def limits_seen(self, shown: Shown) -> None:
        for observer in self.state.observers:
            observer.limits_seen(shown)


class Gateway:
    """The proxy for one configuration (reloadable through ``state``), with its observers."""

    def __init__(
        self,
        config: Config,
        *,
        observers: Sequence[Observer] = (),
        extra_routes: Mapping[str, Handler] | None = None,
        worker_socket: str | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.state = State(Runtime.from_config(config), observers=observers, tracing=tracing)
        # The supervisor's state store, when this is one of several workers (docs/limits.md).
        self._worker_socket = worker_socket
        # Paths outside the API, GET (and HEAD) only: probes and /metrics, neither metered nor
        # logged.
        self._routes: dict[str, Handler] = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            **(extra_routes or {}),
        }
        self._pool: Pool | None = None
        self._ended: list[Exchange] = []  # finished, not yet told to the observers
        self._reports = Batch(self._report, REPORT_DELAY)
        # The tasks handling API requests now (``drain``), and who waits for them to end.
        self._in_flight: set[asyncio.Task[object]] = set()
        self._drained: asyncio.Event | None = None

    async def start(self) -> None:
        """Open the upstream connection pool (one per process, keep-alive) and be ready."""
        # No cookie jar either (proxy.http.upstream sends requests without ClientSession): a cookie
        # one upstream sets while answering one team must never ride along on another team's
        # request.
        self._pool = Pool()
        self.state.client = UpstreamClient(self._pool)
        loop = asyncio.get_running_loop()
        self.state.deadlines = Deadlines(loop)
        self.state.relays = Relays(loop)
        # Its store is the one of the configuration it starts with: ``state`` changes only
        # with a restart.
        settings = self.state.runtime.config.state
        limiter = Limiter(store_for(settings, self._worker_socket), settings, _Events(self.state))
        limiter.start(lambda: self.state.runtime.config.teams.values())
        self.state.limiter = limiter
        # Likewise the cache's store: its backend is the one the gateway starts with.
        cache = self.state.runtime.config.cache
        if cache is not None:
            self.state.cache = ResponseCache(cache_store(cache, settings.shared))
        await warm(target.signer for target in self.state.runtime.targets.values())
        self.state.ready = True

    async def close(self) -> None:
        """Not ready any more; report the requests that have ended (all of them, once they have
        drained); close the upstream connections."""
        self._reports.flush_now()
        self.state.ready = False
        self.state.client = None
        if self.state.deadlines is not None:
            self.state.deadlines.close()
            self.state.deadlines = None
        # Pipes still relaying keep their own reference; their queued steps still run.
        self.state.relays = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self.state.limiter is not None:
            # Every request has ended (drained): their settlements are all queued.
            limiter, self.state.limiter = self.state.limiter, None
            await limiter.close()
        if self.state.cache is not None:
            cache, self.state.cache = self.state.cache, None
            await cache.close()

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every request: an API request (under /v1/ or not), else a probe or /metrics."""
        path = request.path
        if request.method == "HEAD" and path in PREFLIGHT:
            return web.Response()  # Claude Code's check that the base URL answers
        versioned = path.startswith("/v1/")
        route = path[3:] if versioned else path  # the path without its /v1
        api = _API.get(route)
        deployment: str | None = None  # the model an Azure path names
        if api is None:
            azure = _AZURE.fullmatch(path)
            if azure is not None:
                deployment = azure[1]
                api = ("POST", _AZURE_ENDPOINTS[azure[2]])
            elif route.startswith(_MODEL_PREFIX) and len(route) > len(_MODEL_PREFIX):
                api = ("GET", "models")
            elif route.startswith(_RESPONSES_PREFIX):
                api = ("", "responses")  # a stored response: the proxy keeps none
            elif path.startswith("/admin/"):
                return await self._admin(request)
            elif not versioned:
                return await self._other(request, path)
        state = self.state
        observers = state.observers
        task = asyncio.current_task(state.deadlines.loop if state.deadlines else None)
        if task is not None:
            self._in_flight.add(task)
        exchange = Exchange(
            _request_id(request, state.runtime),
            api[1] if api else "other",
            perf_counter(),
            path=path,
        )
        anthropic = exchange.endpoint in MESSAGES_ENDPOINTS
        if anthropic:
            # Anthropic's SDKs read the request's id from request-id, on every answer.
            exchange.headers = {"request-id": exchange.request_id}
        if state.tracing is not None:
            exchange.trace = state.tracing.start(request.method, request.headers, exchange)
        for observer in observers:
            observer.started(exchange)
        response: web.StreamResponse
        try:
            if api is None:
                _identify(request, state.runtime, exchange)
                raise _unknown_path()
            method, endpoint = api
            if not method:
                raise _not_stored()
            _allow(request.method, method)
            if endpoint == "models":
                if route.startswith(_MODEL_PREFIX):
                    response = self._model(request, exchange, route[len(_MODEL_PREFIX) :])
                else:
                    response = self._models(request, exchange)
            elif endpoint == "count_tokens":
                response = await handle_count_tokens(request, state, exchange)
            else:
                response = await handle_completion(
                    request, state, exchange, endpoint, azure_deployment=deployment
                )
        except ProxyError as exc:
            response = self._failed(exchange, exc, anthropic=anthropic)
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client disconnects (handler_cancellation).
            exchange.client_disconnected = True
            raise
        except Exception:
            log.exception("request %s failed", exchange.request_id)
            if exchange.first_token_at is not None and request.transport is not None:
                # A stream had begun: a second answer would land inside its body. Cut instead.
                request.transport.abort()
            failed = ProxyError("The proxy failed to handle the request")
            response = self._failed(exchange, failed, anthropic=anthropic)
        else:
            # Before the observers run: they count the request under the status it was answered
            # with.
            if not exchange.status and not exchange.client_disconnected:
                exchange.status = response.status
        finally:
            exchange.ended = perf_counter()
            if task is not None:
                self._in_flight.discard(task)
            if self._drained is not None and not self._in_flight:
                self._drained.set()
            # Told later (REPORT_DELAY), after the response has gone out (aiohttp writes it as
            # soon as this returns): the client does not wait for metrics and the access log.
            self._ended.append(exchange)
            self._reports.touch()
        if not response.prepared:
            response.headers["X-Request-Id"] = exchange.request_id
            if exchange.headers:
                headers = rate_limit_headers(exchange.headers) if anthropic else exchange.headers
                response.headers.update(headers)
        return response

    async def drain(self, seconds: float) -> None:
        """Give the API requests in flight ``seconds`` to end, then cancel those left (each
        still reports itself, metered as far as it got), and wait a moment for them to."""
        self._drained = asyncio.Event()
        for wait in (seconds, _CANCELLED_WAIT):
            if not self._in_flight:
                return
            self._drained.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._drained.wait()
            for task in self._in_flight:
                task.cancel()

    def _report(self) -> None:
        """Tell the observers about the requests that have ended, observer by observer."""
        ended, self._ended = self._ended, []
        for observer in self.state.observers:
            for exchange in ended:
                try:
                    observer.finished(exchange)
                except Exception:
                    # One observer's bug must not cost the other requests their reports.
                    log.exception("observer %s failed on request %s", observer, exchange.request_id)

    async def _admin(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            _allow(request.method, "GET")
            return await handle_admin(request, self.state)
        except ProxyError as exc:
            return error_response(exc, _error_headers(exc))

    async def _other(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        handler = self._routes.get(path)
        try:
            if handler is None:
                raise _unknown_path()
            _allow(request.method, "GET")
        except ProxyError as exc:
            return error_response(exc, _error_headers(exc))
        # A scrape of /metrics on this listener counts every request that has ended here.
        self._reports.flush_now()
        for observer in self.state.observers:
            observer.flush()
        return await handler(request)

    @staticmethod
    def _failed(exchange: Exchange, exc: ProxyError, *, anthropic: bool = False) -> JsonReply:
        exchange.failure = handled(exc)
        if isinstance(exc, UpstreamError):
            exchange.upstream_error = exc.kind
        if anthropic:
            reply = anthropic_error(exc, _error_headers(exc))
            exchange.status = reply.status  # an unavailable upstream is Anthropic's 529
            return reply
        exchange.status = exc.http_status
        return error_response(exc, _error_headers(exc))

    def _models(self, request: web.BaseRequest, exchange: Exchange) -> JsonReply:
        runtime = self.state.runtime
        anthropic = asks_anthropic(request)
        team = runtime.keyring.identify(authorization(request, azure=False, anthropic=anthropic))
        exchange.team = team.name
        if anthropic:
            return models_list(runtime, runtime.models.allowed(team))
        data = [_model_object(runtime, name) for name in runtime.models.allowed(team)]
        return JsonReply(orjson.dumps({"object": "list", "data": data}))

    def _model(self, request: web.BaseRequest, exchange: Exchange, name: str) -> JsonReply:
        """One of the team's models. Another team's is as unknown as a model nobody configured:
        the team's listing does not show it either."""
        runtime = self.state.runtime
        anthropic = asks_anthropic(request)
        team = runtime.keyring.identify(authorization(request, azure=False, anthropic=anthropic))
        exchange.team = team.name
        if name not in runtime.models.allowed(team):
            raise ModelNotFound(name)
        exchange.model = name
        shown = model_object(runtime, name) if anthropic else _model_object(runtime, name)
        return JsonReply(orjson.dumps(shown))

    async def _healthz(self, request: web.BaseRequest) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.BaseRequest) -> web.StreamResponse:
        if not self.state.ready:
            return error_response(
                ServiceUnavailable("The proxy is not ready (starting or shutting down)")
            )
        return web.json_response({"status": "ready"})
