"""The response cache as a request meets it (docs/cache.md): whether its answer is cached, the
lookup, the hit's answer, and the miss's answer stored once it is complete."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from proxy.core.cache.control import Control, read_control
from proxy.core.cache.entry import Entry, entry_for
from proxy.core.cache.key import cache_key
from proxy.core.config import Config, Model, Team
from proxy.core.exchange import Exchange
from proxy.core.fix_names import FIX_FINISH_SYNTHESIZED
from proxy.core.request import ClientRequest
from proxy.http.cache.stores import CacheStore
from proxy.http.faces import Call, answerable, face_presenter
from proxy.http.relay import USAGE_SOURCE, stream_frames
from proxy.http.reply import JsonReply
from proxy.http.state import Observer
from proxy.normalize.convert import frames_from_response
from proxy.normalize.fields import RequestContext
from proxy.normalize.keep import Kept

X_CACHE = "X-Cache"


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class Caching:
    """One request's use of the cache: its entry's key, the client's controls, and its answer
    as it is relayed (``kept``), to store once complete."""

    key: str
    control: Control
    kept: Kept
    endpoint: str  # of the canonical answer: chat (for the Responses API too), completions ...
    n: int  # the chat choices asked for: an answer with fewer is not stored


class ResponseCache:
    """The worker's cache: its store, made at start (``cache.backend`` takes a restart); what is
    cached and for how long is read from the configuration of each request."""

    def __init__(self, store: CacheStore) -> None:
        self.store = store

    def consider(
        self,
        config: Config,
        team: Team,
        model: Model,
        client_request: ClientRequest,
        call: Call | None,
        cache_control: str | None,
        exchange: Exchange,
    ) -> Caching | None:
        """The request's use of the cache; None if its answer is not cached (the model is not,
        the team opted out, the client said ``no-store``, or only a provider speaking the
        face's API itself can answer it, in a shape the cache does not keep)."""
        cache = config.cache
        if cache is None or not team.cache or not cache.caches(model.name):
            return None
        control = read_control(cache_control)
        if not control.store:  # no-store: neither read nor written
            _mark(exchange, "bypass")
            return None
        if not answerable(call):
            return None
        body = client_request.body if call is None else call.body
        endpoint = exchange.endpoint  # the client's: chat, ..., responses, messages
        team_name = team.name if cache.scope == "team" else None
        _mark(exchange, "miss")
        key = cache_key(endpoint, model.name, body, team_name)
        return Caching(key, control, Kept(), client_request.endpoint, max(1, client_request.n))

    async def look_up(self, caching: Caching, exchange: Exchange) -> Entry | None:
        """The stored answer the request may be served, if any (the request is a hit from
        then on, even if limits refuse it)."""
        control = caching.control
        if not control.lookup:
            return None
        entry = await self.store.get(caching.key)
        if entry is None:
            return None
        if control.max_age is not None and time.time() - entry.stored > control.max_age:
            return None
        _mark(exchange, "hit")
        return entry

    def keep(self, config: Config, caching: Caching, exchange: Exchange) -> None:
        """Store the request's answer, if it came whole and may be stored."""
        cache = config.cache
        kept = caching.kept
        if (
            cache is None
            or kept.body is None
            or kept.usage is None
            or exchange.failure is not None
            or exchange.client_disconnected
            # A choice the upstream left without a finish: the proxy's guess is no answer to keep.
            or FIX_FINISH_SYNTHESIZED in exchange.fixes
        ):
            return
        entry = entry_for(
            kept.body, kept.usage, time.time(), caching.endpoint, caching.n, cache.max_entry_bytes
        )
        if entry is not None:
            self.store.put(caching.key, entry, cache.ttl_seconds)

    async def close(self) -> None:
        await self.store.close()


def _mark(exchange: Exchange, result: str) -> None:
    exchange.cache = result
    headers = exchange.headers
    if headers is None:
        exchange.headers = {X_CACHE: result}
    else:
        headers[X_CACHE] = result


async def answer_hit(
    request: web.BaseRequest,
    entry: Entry,
    exchange: Exchange,
    client_request: ClientRequest,
    call: Call | None,
    observers: Sequence[Observer],
    config: Config,
) -> web.StreamResponse:
    """The stored answer, whole or as a well-formed stream, as the client asked; metered as a
    request that spent nothing upstream (its original usage is what it saved)."""
    age = max(0, int(time.time() - entry.stored))
    assert exchange.headers is not None
    exchange.headers["Age"] = str(age)
    exchange.saved = entry.usage
    presenter = None
    if call is not None:  # ``consider`` keeps only one it can answer
        presenter = face_presenter(call, client_request.model, config.server.max_response_bytes)
    if not client_request.stream:
        body = entry.body if presenter is None else presenter.whole(entry.body)
        return JsonReply(body, headers={USAGE_SOURCE: entry.source})
    ctx = RequestContext(
        endpoint=client_request.endpoint,
        model=client_request.model,
        created=0,
        include_usage=client_request.include_usage,
    )
    frames = frames_from_response(entry.body, ctx)
    if presenter is not None:
        frames = presenter.frames(frames)
    headers = {"X-Request-Id": exchange.request_id, USAGE_SOURCE: entry.source, **exchange.headers}
    return await stream_frames(
        request, exchange, headers, observers, frames, config.server.read_timeout
    )
