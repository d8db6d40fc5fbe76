"""Vertex AI's paths and the OAuth token endpoint in front of them: google-auth's own service
account flow gets a token from ``POST /token``, which the Vertex paths then take; an expired,
unknown or missing token gets Google's 401, and a JWT signed by another key no token."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

# The gcp extra's (pyproject.toml): the lowest-versions pass runs without it.
pytest.importorskip("google.auth")

import google.auth.exceptions
import requests
from google.auth import crypt, jwt
from google.auth.transport.requests import Request
from google.oauth2 import service_account

from proxy.emulator import build_emulator_app
from proxy.emulator.cloud import CLOUD_PLATFORM, GOOGLE_TOKEN_URI, JWT_BEARER, CloudAuth
from tests.emulator.exchange import packaged
from tests.support.cloud import (
    PROJECT,
    REGION,
    ServiceAccount,
    cloud_servers,
    service_account_file,
    token_uri,
)
from tests.support.harness import free_port

BASE = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers"
GEMINI: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
CLAUDE = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 16, "messages": []}


async def start(
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    *,
    token_lifetime: float = 3600.0,
    token_delay: float = 0.0,
) -> tuple[TestServer, ServiceAccount]:
    """An emulator taking JWTs of a new service account whose token_uri is its /token."""
    port = free_port()
    account = service_account_file(tmp_path, token_uri(port))
    auth = CloudAuth(
        google_public_keys=(account.public_key,),
        token_lifetime=token_lifetime,
        token_delay=token_delay,
    )
    app = build_emulator_app(cloud=auth)
    return await aiohttp_server(app, port=port), account


def port_of(server: TestServer) -> int:
    assert server.port is not None
    return server.port


async def fetch_token(account: ServiceAccount, scopes: list[str] | None = None) -> str:
    """A token as google-auth gets one: its own JWT-bearer grant, run off the loop (it blocks)."""
    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        str(account.path), scopes=scopes or [CLOUD_PLATFORM]
    )
    await asyncio.to_thread(credentials.refresh, Request())
    return str(credentials.token)


async def vertex_post(
    session: aiohttp.ClientSession, server: TestServer, path: str, body: object, token: str | None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with session.post(server.make_url(BASE + path), json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def requests_log(
    session: aiohttp.ClientSession, server: TestServer
) -> list[dict[str, object]]:
    async with session.get(server.make_url("/_emulator/requests")) as resp:
        return list(await resp.json())


@pytest.mark.parametrize(
    ("path", "body", "name"),
    [
        ("/google/models/gemini:generateContent", GEMINI, "gemini.generate-content.json"),
        (
            "/google/models/gemini:streamGenerateContent?alt=sse",
            GEMINI,
            "gemini.generate-content.stream.sse",
        ),
        (
            "/google/models/vertex:predict",
            {"instances": [{"content": "Hi"}]},
            "vertex.predict.json",
        ),
        ("/anthropic/models/anthropic:rawPredict", CLAUDE, "anthropic.messages.json"),
        ("/anthropic/models/anthropic:streamRawPredict", CLAUDE, "anthropic.messages.stream.sse"),
    ],
)
async def test_a_token_from_the_token_endpoint_opens_the_vertex_paths(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    path: str,
    body: object,
    name: str,
) -> None:
    server, account = await start(aiohttp_server, tmp_path)
    token = await fetch_token(account)
    assert token.startswith("ya29.")
    status, _, served = await vertex_post(session, server, path, body, token)
    assert (status, served) == (200, packaged(name))
    log = await requests_log(session, server)
    assert [entry["path"] for entry in log].count("/token") == 1


async def test_token_answer_and_its_lifetime(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    server, account = await start(aiohttp_server, tmp_path, token_lifetime=1800)
    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        str(account.path), scopes=[CLOUD_PLATFORM]
    )
    await asyncio.to_thread(credentials.refresh, Request())
    assert credentials.expiry is not None
    assert credentials.valid
    (entry,) = await requests_log(session, server)
    assert (entry["method"], entry["path"]) == ("POST", "/token")
    assert entry["headers"]["content-type"] == "application/x-www-form-urlencoded"  # type: ignore[index]


async def test_an_expired_token_is_refused(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    server, account = await start(aiohttp_server, tmp_path, token_lifetime=0)
    token = await fetch_token(account)
    path = "/google/models/gemini:generateContent"
    status, headers, body = await vertex_post(session, server, path, GEMINI, token)
    assert status == 401
    error = orjson.loads(body)["error"]
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
    assert error["message"].startswith("Request had invalid authentication credentials.")
    assert error["details"][0]["reason"] == "ACCESS_TOKEN_EXPIRED"
    assert headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("token", "reason"),
    [(None, "CREDENTIALS_MISSING"), ("ya29.not-issued-here", "ACCESS_TOKEN_TYPE_UNSUPPORTED")],
)
async def test_a_token_not_issued_here_is_refused(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    token: str | None,
    reason: str,
) -> None:
    server, _ = await start(aiohttp_server, tmp_path)
    path = "/anthropic/models/anthropic:rawPredict"
    status, _, body = await vertex_post(session, server, path, CLAUDE, token)
    assert status == 401
    assert orjson.loads(body)["error"]["details"][0]["reason"] == reason


async def test_a_jwt_signed_by_another_key_gets_no_token(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    server, account = await start(aiohttp_server, tmp_path)
    other = service_account_file(tmp_path, token_uri(port_of(server)), name="other.json")
    with pytest.raises(google.auth.exceptions.RefreshError, match="invalid_grant"):
        await fetch_token(other)
    assert (await fetch_token(account)).startswith("ya29.")


@pytest.mark.parametrize(
    ("audience", "status"),
    [("own", 200), (GOOGLE_TOKEN_URI, 200), ("https://example.com/token", 400)],
)
async def test_the_jwt_must_be_addressed_to_this_endpoint_or_googles(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    audience: str,
    status: int,
) -> None:
    server, account = await start(aiohttp_server, tmp_path)
    signer = crypt.RSASigner.from_service_account_file(  # type: ignore[no-untyped-call]
        str(account.path)
    )
    now = int(time.time())
    claims = {
        "iss": account.email,
        "aud": token_uri(port_of(server)) if audience == "own" else audience,
        "scope": CLOUD_PLATFORM,
        "iat": now,
        "exp": now + 3600,
    }
    assertion = jwt.encode(signer, claims).decode()  # type: ignore[no-untyped-call]
    form = {"grant_type": JWT_BEARER, "assertion": assertion}
    async with session.post(server.make_url("/token"), data=form) as resp:
        answer = await resp.json()
    assert resp.status == status
    if status == 400:
        assert answer["error"] == "invalid_grant"
        assert "audience" in answer["error_description"]
    else:
        assert answer["token_type"] == "Bearer"
        assert answer["expires_in"] == 3600


async def test_a_token_needs_the_cloud_platform_scope(
    aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    _, account = await start(aiohttp_server, tmp_path)
    scope = "https://www.googleapis.com/auth/userinfo.email"
    with pytest.raises(google.auth.exceptions.RefreshError, match="invalid_scope"):
        await fetch_token(account, [scope])


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"grant_type": "client_credentials"}, "unsupported_grant_type"),
        ({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer"}, "invalid_request"),
        (
            {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "a.b.c"},
            "invalid_grant",
        ),
    ],
)
async def test_bad_grants_get_oauths_400(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    form: dict[str, str],
    error: str,
) -> None:
    server, _ = await start(aiohttp_server, tmp_path)
    async with session.post(server.make_url("/token"), data=form) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"] == error


async def test_the_token_endpoint_waits_without_holding_the_emulator(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    server, account = await start(aiohttp_server, tmp_path, token_delay=1.0)
    fetching = asyncio.ensure_future(fetch_token(account))
    try:
        # The emulator answers other requests while the token request waits.
        for _ in range(1000):
            if any(entry["path"] == "/token" for entry in await requests_log(session, server)):
                break
            await asyncio.sleep(0.01)
        assert not fetching.done()
        path = "/google/models/gemini:generateContent"
        assert (await vertex_post(session, server, path, GEMINI, None))[0] == 401
        assert (await fetching).startswith("ya29.")
    finally:
        fetching.cancel()


async def test_without_keys_vertex_is_not_checked_and_gives_no_tokens(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    path = "/google/models/gemini:generateContent"
    assert (await vertex_post(session, emulator, path, GEMINI, None))[0] == 200
    form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "a.b.c"}
    async with session.post(emulator.make_url("/token"), data=form) as resp:
        assert (resp.status, (await resp.json())["error"]) == (400, "invalid_grant")


async def test_gemini_api_paths_need_no_token(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    server, _ = await start(aiohttp_server, tmp_path)
    async with session.post(
        server.make_url("/v1beta/models/gemini:generateContent"), json=GEMINI
    ) as resp:
        assert resp.status == 200


async def test_claude_versions_are_model_names_not_faults(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    (tmp_path / "claude-sonnet-4@20250514.messages.json").write_bytes(
        packaged("anthropic.messages.json")
    )
    server = await aiohttp_server(build_emulator_app(tmp_path))
    path = "/anthropic/models/claude-sonnet-4@20250514:rawPredict"
    status, _, body = await vertex_post(session, server, path, CLAUDE, None)
    assert (status, body) == (200, packaged("anthropic.messages.json"))
    # A fault still follows the version.
    path = "/anthropic/models/claude-sonnet-4@20250514@status=429:rawPredict"
    status, _, body = await vertex_post(session, server, path, CLAUDE, None)
    assert status == 429
    assert orjson.loads(body)["error"]["status"] == "RESOURCE_EXHAUSTED"
    # Claude's own overload comes through in Anthropic's envelope.
    path = "/anthropic/models/x@status=529:streamRawPredict"
    status, _, body = await vertex_post(session, server, path, CLAUDE, None)
    assert status == 529
    assert orjson.loads(body)["error"]["type"] == "overloaded_error"


def test_cloud_servers_give_the_proxy_a_service_account_that_works(tmp_path: Path) -> None:
    # What the proxy's tests start: the harness's emulator, checking its own service account.
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    (recordings / "gemini.generate-content.json").write_bytes(
        packaged("gemini.generate-content.json")
    )
    with cloud_servers(tmp_path, recordings, token_lifetime=600) as cloud:
        credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            str(cloud.account.path), scopes=[CLOUD_PLATFORM]
        )
        credentials.refresh(Request())
        url = f"{cloud.servers.emulator_url}{BASE}/google/models/gemini:generateContent"
        headers = {"Authorization": f"Bearer {credentials.token}"}
        assert requests.post(url, json=GEMINI, headers=headers, timeout=10).status_code == 200
        assert requests.post(url, json=GEMINI, timeout=10).status_code == 401
