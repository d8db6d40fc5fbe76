"""The admin endpoints (docs/limits.md), for ``admin.keys`` alone:

- ``GET /admin/usage?period=2026-12`` (or a day, ``2026-12-02``; none: this month, UTC): each
  team's requests, tokens by type and cost, by model, from the state store's ledger.
- ``GET /admin/limits``: each limited team's limits, what is used and what remains now.

A team key gets 403 (it is a key, not this one's), any other 401.
"""

from __future__ import annotations

import hmac
import time

import orjson
from aiohttp import web

from proxy.core.auth import INVALID_KEY, MISSING_KEY, parse_bearer
from proxy.core.config import key_digest
from proxy.core.errors import (
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
)
from proxy.core.limits.ledger import parse_period, total
from proxy.http.limits.limiter import Limiter
from proxy.http.limits.stores import StoreUnavailable
from proxy.http.reply import JsonReply
from proxy.http.state import Runtime, State

PATHS = ("/admin/usage", "/admin/limits")


def _authorize(request: web.BaseRequest, runtime: Runtime) -> None:
    key = parse_bearer(request.headers.get("Authorization"))
    if key is None:
        raise AuthenticationFailed(MISSING_KEY)
    digest = key_digest(key)
    # Every admin digest compared, so that the time taken says nothing about which matched.
    if any([hmac.compare_digest(digest, admin) for admin in runtime.config.admin_digests]):
        return
    try:
        runtime.keyring.identify(request.headers.get("Authorization"))
    except AuthenticationFailed:
        raise AuthenticationFailed(INVALID_KEY, code="invalid_api_key") from None
    raise PermissionDenied(
        "A team's key cannot use the admin endpoints: they take a key of admin.keys",
        code="admin_key_required",
    )


async def handle_admin(request: web.BaseRequest, state: State) -> JsonReply:
    runtime = state.runtime
    if request.path not in PATHS:
        raise NotFound("Unknown path: no route for this URL (404)", code="unknown_url")
    _authorize(request, runtime)
    limiter = state.limiter
    if limiter is None:
        raise ServiceUnavailable("The proxy is not ready (starting or shutting down)")
    try:
        if request.path == "/admin/usage":
            return await _usage(request, runtime, limiter)
        return await _limits(runtime, limiter)
    except StoreUnavailable as exc:
        raise ServiceUnavailable(
            f"The state store cannot be read now ({limiter.store.kind}): {exc}",
            code="state_unavailable",
        ) from None


async def _usage(request: web.BaseRequest, runtime: Runtime, limiter: Limiter) -> JsonReply:
    given = request.query.get("period")
    parsed = parse_period(given, time.time())
    if parsed is None:
        raise InvalidRequest(
            "Invalid value for 'period': give a UTC month (2026-12) or day (2026-12-02)",
            param="period",
            code="invalid_value",
        )
    kind, period = parsed
    teams = sorted(runtime.config.teams)
    found = await limiter.usage(teams, kind, period)
    data = [
        {"team": team, **total(models), "models": [{"model": m, **c} for m, c in models.items()]}
        for team, models in found.items()
    ]
    body = {"object": "usage", "period": period, "granularity": kind, "data": data}
    return JsonReply(orjson.dumps(body))


async def _limits(runtime: Runtime, limiter: Limiter) -> JsonReply:
    teams = [runtime.config.teams[name] for name in sorted(runtime.config.teams)]
    shown = await limiter.limits(teams)
    data = [{"team": team.name, "limits": shown.get(team.name, {})} for team in teams]
    body = {"object": "limits", "store": limiter.store.kind, "up": limiter.up, "data": data}
    return JsonReply(orjson.dumps(body))
