"""POST /v1/chat/completions, /v1/completions, /v1/embeddings and /v1/responses (and Azure's
paths for the first three): team → request → model → attempts → relay.

A request is tried on its model's deployments in the order ``balancer.AttemptPlan`` gives,
until one answers or the plan says stop. Everything before the client's first byte can be
tried again; ``relay`` raises a ``ProxyError`` only while nothing has been sent, so every error
that reaches the loop below is still retryable in principle (``balancer.retryable`` decides).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from time import perf_counter
from typing import Final

from aiohttp import HttpVersion11, web

from proxy.core.balancer import AttemptPlan
from proxy.core.cache.entry import Entry
from proxy.core.config import Deployment, Model, Provider, Team, dialect_of
from proxy.core.errors import (
    BodyTooLarge,
    ExpectationFailed,
    InvalidRequest,
    ProxyError,
    ServiceUnavailable,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    handled,
)
from proxy.core.exchange import Exchange
from proxy.core.limits.admission import Reservation, prompt_estimate
from proxy.core.request import ClientRequest, Endpoint, upstream_body
from proxy.http.cache.service import Caching, answer_hit
from proxy.http.deadline import Deadline
from proxy.http.faces import (
    PATHS,
    Call,
    body_as_it_came,
    passes_through,
    presentation,
    rate_limit_headers,
    read_call,
    refusal_of,
    upstream_endpoint,
)
from proxy.http.limits.limiter import Limiter
from proxy.http.pool import Slots
from proxy.http.relay import (
    SENT_AT_ONCE,
    Answer,
    relay_stream,
    relay_whole,
    send_large,
    whole_arrived,
)
from proxy.http.reply import JsonReply
from proxy.http.state import Runtime, State
from proxy.http.upstream import Destination, Target
from proxy.normalize import RequestContext
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request
from proxy.normalize.faces.anthropic.request import MessagesCall, clamp_max_tokens
from proxy.normalize.keep import Kept

log = logging.getLogger("proxy.routing")

# A body larger than this is read and translated on a thread of the loop's executor: a large
# body of many small items takes seconds of the interpreter, which on the loop every other
# request of the worker would wait for; on a thread, the loop has its turn every few
# milliseconds. (A smaller one is done at once: the hop to a thread would cost more.)
READ_APART: Final = 256 * 1024


def _upstream_body(
    model: Model,
    provider: Provider,
    deployment: Deployment,
    client_request: ClientRequest,
    call: Call | None,
    passthrough: bool,
) -> bytes:
    """The body for one deployment: the client's passed through, or translated."""
    if passthrough:
        assert call is not None
        return body_as_it_came(call, deployment.model, dialect_of(provider, deployment))
    dialect = DIALECTS[dialect_of(provider, deployment)]
    embeddings = client_request.endpoint == "embeddings"
    if (dialect.embed_request if embeddings else dialect.request) is None:
        # The client's body, as it came but for the model: upstream_request's own first case,
        # without the RequestOptions it would be made for, on the path every chat request takes.
        return upstream_body(client_request, deployment.model, ask_usage=provider.stream_usage)
    options = RequestOptions(
        deployment.model, provider.stream_usage, model.max_tokens, model.thinking_budgets
    )
    try:
        return upstream_request(dialect, client_request, options)
    except InvalidRequest as exc:
        raise _Unservable(refusal_of(call, exc)) from None


async def read_body(request: web.BaseRequest, limit: int, seconds: float) -> bytes:
    """The request body, refusing more than ``limit`` bytes and clients slower than ``seconds``."""
    content = request.content
    if content.is_eof() and content.total_bytes <= limit:
        # The whole body came with the headers (the usual case): no waiting, no timer, and no
        # Content-Length to parse (aiohttp's parser held the body to it). An expectation other
        # than 100-continue is refused all the same (RFC 9110 10.1.1).
        expect = request.headers.get("Expect")
        if expect is not None and expect.lower() != "100-continue":
            raise ExpectationFailed(expect)
        return content.read_nowait()
    length = request.content_length
    if length is not None and length > limit:
        raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes")
    expect = request.headers.get("Expect")
    if expect is not None:
        await _continue(request, expect)
    chunks = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(
                        f"The request body is larger than the limit of {limit} bytes"
                    )
                chunks.append(chunk)
    except TimeoutError as exc:
        raise InvalidRequest(
            f"The request body did not arrive within {seconds:g} s", code="request_timeout"
        ) from exc
    return b"".join(chunks)


async def _continue(request: web.BaseRequest, expect: str) -> None:
    """Answer ``Expect: 100-continue`` (curl sends it before a large body, and waits for it)."""
    if expect.lower() != "100-continue":
        raise ExpectationFailed(expect)
    if request.version != HttpVersion11:
        return  # an HTTP/1.0 client cannot be told to go on (RFC 9110 10.1.1)
    writer = request.writer
    await writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    writer.output_size = 0  # the response proper starts after it
    await writer.drain()


def authorization(request: web.BaseRequest, *, azure: bool, anthropic: bool = False) -> str | None:
    """The request's credentials as an Authorization value. AzureOpenAI sends its key in
    ``api-key``, which Azure's own paths accept like a bearer key; Anthropic's SDKs and Claude
    Code send theirs in ``x-api-key`` (or as a bearer key)."""
    given = request.headers.get("Authorization")
    if given is None and (azure or anthropic):
        key = request.headers.get("api-key" if azure else "x-api-key")
        if key is not None:
            return f"Bearer {key}"
    return given


async def handle_completion(
    request: web.BaseRequest,
    state: State,
    exchange: Exchange,
    endpoint: str,
    *,
    azure_deployment: str | None = None,
) -> web.StreamResponse:
    """The request's team, body and model, then its attempts until one answers (one coroutine
    for both: every level of coroutine is paid again when the upstream's answer resumes it).

    ``azure_deployment``: the model an Azure path names
    (``/openai/deployments/{deployment}/...``), which wins over the body's."""
    runtime = state.runtime  # one configuration for the whole request, even across a reload
    config = runtime.config

    given = authorization(
        request, azure=azure_deployment is not None, anthropic=endpoint == "messages"
    )
    team = runtime.keyring.identify(given)
    exchange.team = team.name
    raw = await read_body(request, config.server.max_body_bytes, config.server.read_timeout)
    if len(raw) > READ_APART:
        read = await asyncio.to_thread(read_call, raw, endpoint, azure_deployment)
    else:
        read = read_call(raw, endpoint, azure_deployment)
    client_request, call = read
    exchange.stream = client_request.stream
    model = runtime.models.resolve(team, client_request.model)
    exchange.model = model.name
    if isinstance(call, MessagesCall):
        # Claude Code asks for 32,000 whatever the model: above a model's limit, its limit.
        asked = client_request.max_tokens
        clamp_max_tokens(client_request, model.max_tokens)
        providers = config.providers
        if any(passes_through(call, providers[d.provider], dialect_of(providers[d.provider], d),
                              d.model) for d in model.deployments):  # fmt: skip
            # An Anthropic deployment gets the body as it came: its reservation covers that.
            client_request.max_tokens = asked

    caching: Caching | None = None
    cache = state.cache
    if cache is not None:
        cache_control = request.headers.get("Cache-Control")
        caching = cache.consider(config, team, model, client_request, call, cache_control, exchange)
        # Before limits (docs/cache.md): a hit spends no tokens, so a spent budget serves it.
        entry = None if caching is None else await cache.look_up(caching, exchange)
        if entry is not None:
            return await _hit(request, state, runtime, team, model, client_request, call,
                              exchange, entry)  # fmt: skip

    assert state.deadlines is not None  # from the gateway's start to its close
    loop = state.deadlines.loop  # not asyncio.get_running_loop() (see Deadlines.loop)
    limiter = state.limiter
    reservation = None
    if limiter is not None and team.limits.checked:
        reservation = await _admit(limiter, runtime, team, model, client_request, exchange)
    try:
        breakers = runtime.breakers[model.name]
        plan = AttemptPlan(model, breakers, config.routing.policy, runtime.rng.random)
        last_error: ProxyError | None = None
        trace = exchange.trace
        while (attempt := plan.next(loop.time())) is not None:
            deployment = attempt.deployment
            if attempt.probe:
                _circuit(state, model, deployment, "half_open")
            provider = config.providers[deployment.provider]
            exchange.provider = provider.name
            exchange.price = config.prices.get((model.name, provider.name, deployment.model))
            extra = b""
            if trace is not None:
                extra = trace.attempt(exchange, provider, deployment, client_request)
            try:
                response = await _attempt(
                    request,
                    state,
                    runtime,
                    exchange,
                    model,
                    provider,
                    deployment,
                    client_request,
                    call,
                    None if caching is None else caching.kept,
                    extra,
                )
            except _Unservable as unservable:
                # This deployment's API cannot say what the request asks; another's may.
                last_error = handled(unservable.refusal)
                if trace is not None:
                    trace.attempt_failed(last_error)
                if plan.pass_over(loop.time()):
                    continue
                raise last_error from None
            except ProxyError as exc:
                # Whatever the upstream said, before it is logged or answered (docs/security.md).
                last_error = runtime.redact.error(handled(exc))
                if trace is not None:
                    trace.attempt_failed(last_error)
                _circuit(state, model, deployment, plan.report(loop.time(), exc))
                delay = plan.retry_delay(loop.time(), exc)
                if delay is None or not isinstance(exc, UpstreamError):
                    raise
                exchange.retried.append((provider.name, exc.kind))
                log.info(
                    # %r: the upstream's words, quoted, so that a newline in them forges no line.
                    "request %s: %s/%s failed (%s: %r); retrying in %.2f s",
                    exchange.request_id, provider.name, deployment.model, exc.kind, exc.message,
                    delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                continue
            except BaseException:
                plan.release()  # cancelled (the client left): the attempt tells nothing
                raise
            # A stream that broke after its first byte is the deployment's failure all the same.
            _circuit(state, model, deployment, plan.report(loop.time(), exchange.failure))
            if isinstance(response, JsonReply) and len(response.raw) > SENT_AT_ONCE:
                response.headers["X-Request-Id"] = exchange.request_id
                if exchange.headers:
                    response.headers.update(exchange.headers)
                await send_large(request, response, exchange, provider.timeouts.idle)
            if caching is not None and cache is not None:
                cache.keep(config, caching, exchange)
            return response
        if last_error is not None:
            raise last_error
        raise ServiceUnavailable(
            f"No upstream is available for model '{model.name}': all its deployments are failing",
            code="no_upstream_available",
        )
    finally:
        # Whatever the outcome, a client that left included: what it spent is settled.
        if limiter is not None:
            limiter.finish(exchange, reservation)


async def _hit(
    request: web.BaseRequest,
    state: State,
    runtime: Runtime,
    team: Team,
    model: Model,
    client_request: ClientRequest,
    call: Call | None,
    exchange: Exchange,
    entry: Entry,
) -> web.StreamResponse:
    """A request answered from the cache: admitted by requests per minute and concurrency
    alone, since it spends no tokens (docs/cache.md)."""
    limiter = state.limiter
    reservation = None
    if limiter is not None and team.limits.checked:
        plan = runtime.plans[model.name]
        reservation = await limiter.admit(
            team, exchange, prompt_tokens=0, max_tokens=0, price=None,
            lease_seconds=plan.lease_seconds, spends=False,
        )  # fmt: skip
    try:
        response = await answer_hit(
            request, entry, exchange, client_request, call, state.observers, runtime.config
        )
        if isinstance(response, JsonReply) and len(response.raw) > SENT_AT_ONCE:
            response.headers["X-Request-Id"] = exchange.request_id
            response.headers.update(exchange.headers or {})
            await send_large(request, response, exchange, runtime.config.server.read_timeout)
        return response
    finally:
        if limiter is not None:
            limiter.finish(exchange, reservation)


def _admit(
    limiter: Limiter,
    runtime: Runtime,
    team: Team,
    model: Model,
    client_request: ClientRequest,
    exchange: Exchange,
) -> Coroutine[None, None, Reservation]:
    """The team's reservation for the request (docs/limits.md): its prompt, estimated from its
    whole body, and its ceiling of completion tokens, the client's ``max_tokens`` or else the
    model's. Not a coroutine of its own: the limiter's is awaited, one frame fewer to resume."""
    limits = team.limits
    plan = runtime.plans[model.name]
    ceiling = client_request.max_tokens
    endpoint = client_request.endpoint
    if endpoint == "embeddings":
        ceiling = 0
    elif not ceiling:
        # 0 as well as none: an upstream may take 0 for "no limit" (legacy completions let a
        # client send it), and the reservation must bound what it then writes.
        ceiling = model.max_tokens
    prompt = 0
    if limits.tokens_per_minute is not None or limits.budget is not None:
        # Chat's messages hold no token ids: not walked, on every request.
        ids = None if endpoint == "chat" else client_request.prompt
        prompt = prompt_estimate(client_request.size, ids)
    return limiter.admit(
        team,
        exchange,
        prompt_tokens=prompt,
        max_tokens=ceiling * max(1, client_request.n),
        price=plan.price,
        lease_seconds=plan.lease_seconds,
    )


class _Unservable(Exception):
    """The refusal of a deployment whose API cannot take the request (an unsupported endpoint
    or field), which another deployment of the model may take."""

    def __init__(self, refusal: InvalidRequest) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


async def _wait_for_slot(slots: Slots, timer: Deadline, provider: Provider) -> None:
    """A connection slot of ``provider``'s, within the attempt's first-byte deadline."""
    try:
        await slots.wait()
    except asyncio.CancelledError:
        if not timer.expired():
            raise
        seconds = provider.timeouts.first_byte
        error = UpstreamTimeout(
            f"No connection to the upstream came free within {seconds:g} s: provider"
            f" '{provider.name}' has {slots.limit} in use (its max_connections)"
        )
        error.blames_deployment = False  # busy, not unhealthy
        raise error from None


def _circuit(state: State, model: Model, deployment: Deployment, transition: str | None) -> None:
    if transition is None:
        return
    log.warning(
        "circuit of model %s deployment %s/%s is now %s",
        model.name, deployment.provider, deployment.model, transition,
    )  # fmt: skip
    for observer in state.observers:
        observer.circuit_changed(model.name, deployment, transition)


async def _attempt(
    request: web.BaseRequest,
    state: State,
    runtime: Runtime,
    exchange: Exchange,
    model: Model,
    provider: Provider,
    deployment: Deployment,
    client_request: ClientRequest,
    call: Call | None,
    kept: Kept | None,
    extra: bytes,
) -> web.StreamResponse:
    """One try at one deployment: send, wait for the answer's headers, relay it.

    ``call``: a request in another API's shape (the Responses API, Anthropic's Messages), made
    the chat request ``client_request``; passed through as it came to a provider that speaks
    that API itself. ``extra``: header lines of this attempt's own (its trace context)."""
    dialect = dialect_of(provider, deployment)
    passthrough = passes_through(call, provider, dialect, deployment.model)
    endpoint = upstream_endpoint(call, client_request, passthrough)
    target = runtime.targets[provider.name]
    destination = _destination(target, endpoint, model, deployment, exchange.endpoint)
    if passthrough and isinstance(call, MessagesCall):
        invoked = target.through.get(deployment.model)
        if invoked is not None:
            # InvokeModel: the version is in the body, and betas, which Bedrock takes only in
            # the body and only some of, are not passed on (docs/providers/bedrock.md).
            destination = invoked
        else:
            given = anthropic_headers(request, provider)
            if provider.api == "vertex":
                given.pop("anthropic-version", None)  # rawPredict's body carries Vertex's own
            destination = destination.with_headers(given)
    ctx = _request_context(runtime, model, dialect, client_request, endpoint)
    if kept is not None:
        kept.body = None  # an earlier attempt's answer, if any, was not this one
        if passthrough:
            kept = None  # the provider's own answer, not a canonical one: not stored
    try:
        family, presenter = presentation(
            call, provider, passthrough, client_request.model, ctx.keeps
        )
    except InvalidRequest as refusal:
        raise _Unservable(refusal) from None  # only a provider speaking the API can take it
    made = (model, provider, deployment, client_request, call, passthrough)
    if client_request.size > READ_APART:
        body = await asyncio.to_thread(_upstream_body, *made)
    else:
        body = _upstream_body(*made)
    if target.signer is not None:
        # Signed over the final body and URL; bounded by the signer's own timeout, before the
        # first-byte deadline starts (a token fetch is not the upstream's slowness).
        stream_url = destination.stream_url if client_request.stream else None
        extra += await target.signer.sign(stream_url or destination.url, body)
    timeouts = provider.timeouts
    limit = runtime.config.server.max_response_bytes
    assert state.client is not None and state.deadlines is not None
    loop = state.deadlines.loop
    started = loop.time()  # the deadlines' clock (the loop's); waits are measured on perf_counter
    waited = perf_counter()
    deadline = started + timeouts.total
    timer = Deadline(state.deadlines)
    try:
        timer.move(min(started + timeouts.first_byte, deadline))
        if not target.slots.take():
            await _wait_for_slot(target.slots, timer, provider)
        try:
            response = await state.client.send(
                destination, target, body, stream=client_request.stream, extra=extra
            )
        except UpstreamStatusError as refused:
            if target.signer is not None and refused.upstream_status in _CLOUD_REFUSALS:
                # The cloud refused the proxy's own identity or its permissions: the
                # operator's to fix, never the client's key (docs/providers/vertex.md).
                refused.client_status = 502
                log.warning(
                    "provider %s refused the proxy's credentials (%d%s): %s",
                    provider.name,
                    refused.upstream_status,
                    f" {refused.code}" if refused.code else "",
                    runtime.redact(refused.message),
                )
            raise
        except asyncio.CancelledError:
            if not timer.expired():
                raise  # cancelled from outside: the client left
            error = UpstreamTimeout(f"The upstream did not answer within {timeouts.first_byte:g} s")
            # A whole answer comes once it is all generated: a long one may take longer.
            error.blames_deployment = client_request.stream
            raise error from None
        finally:
            exchange.upstream_wait += perf_counter() - waited
        if not client_request.stream:
            whole = whole_arrived(response, family, ctx, exchange, limit, presenter, kept)
            if whole is not None:
                return whole
        assert state.relays is not None
        collected = min(runtime.config.server.max_collected_bytes, limit)
        answer = Answer(
            response, family, ctx, timeouts, deadline, timer, state.relays, presenter, limit,
            collected, state.collecting, kept,
        )  # fmt: skip
        if client_request.stream:
            headers = {"X-Request-Id": exchange.request_id, **(exchange.headers or {})}
            if isinstance(call, MessagesCall):
                headers = rate_limit_headers(headers)
            return await relay_stream(request, answer, exchange, headers, state.observers)
        return await relay_whole(answer, exchange)
    finally:
        timer.close()  # whatever happened: a retry's backoff must not be cut short by it


# A cloud's answers to credentials it refuses: 401 (a token it does not take) and 403 (a
# signature, or an identity without the permission).
_CLOUD_REFUSALS: Final = frozenset({401, 403})


def _destination(
    target: Target,
    endpoint: Endpoint,
    model: Model,
    deployment: Deployment,
    asked_at: str,
) -> Destination:
    """Where ``deployment`` serves ``endpoint``; ``_Unservable`` if it does not (``asked_at``:
    the client's endpoint, which the refusal names)."""
    destination = target.destination(endpoint, deployment.model)
    if destination is None:
        asked = PATHS.get(asked_at, PATHS[endpoint])
        raise _Unservable(
            InvalidRequest(
                f"The model '{model.name}' does not serve {asked}",
                param="model",
                code="unsupported_endpoint",
            )
        )
    return destination


def _request_context(
    runtime: Runtime,
    model: Model,
    dialect: str,
    client_request: ClientRequest,
    endpoint: Endpoint,
) -> RequestContext:
    """What the normalizer of this attempt's answer needs to know of the request."""
    return RequestContext(
        endpoint=endpoint,
        model=client_request.model,
        created=int(time.time()),
        include_usage=client_request.include_usage,
        max_tokens=client_request.max_tokens,
        reasoning=model.reasoning,
        dialect=dialect,
        n=client_request.n,
        prompt=client_request.prompt,
        redact=runtime.redact,
        choices=client_request.choices,
        encoding=client_request.encoding,
        keeps=runtime.config.server.max_response_bytes,
    )


# The headers of a Messages request passed on as they came: the API version and betas the client
# asked for (never its key: the provider's own is sent).
_ANTHROPIC_HEADERS: Final = ("anthropic-version", "anthropic-beta")


def anthropic_headers(request: web.BaseRequest, provider: Provider) -> dict[str, str]:
    """The client's ``anthropic-version`` and ``anthropic-beta`` for an Anthropic provider,
    less the betas it is configured to drop (``drop_betas``)."""
    given = {}
    version = request.headers.get("anthropic-version")
    if version:
        given["anthropic-version"] = version
    betas = [
        beta.strip()
        for value in request.headers.getall("anthropic-beta", ())
        for beta in value.split(",")
        if beta.strip() and beta.strip() not in provider.drop_betas
    ]
    if betas:
        given["anthropic-beta"] = ",".join(betas)
    return given
