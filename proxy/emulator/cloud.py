"""The clouds' identities in the emulator: Bedrock's signature check, Vertex AI's bearer tokens,
and the OAuth token endpoint that issues them.

    path                                         checked when              refused with
    .../model/{id}/converse[-stream], /invoke    ``CloudAuth.aws_keys``    403, Bedrock's
                                                 or ``bedrock_api_keys``   envelope (below)
    .../projects/{p}/locations/{r}/publishers/…  ``google_public_keys``    401, Google's envelope
    POST /token                                  always (none: 400)        400 invalid_grant

Bedrock takes a SigV4 signature by a configured access key (``sigv4``), or
``Authorization: Bearer <Bedrock API key>``. Its refusals name AWS's exception in
``x-amzn-ErrorType``: ``MissingAuthenticationTokenException``, ``UnrecognizedClientException``
(unknown key id; a session token with a long-term key), ``ExpiredTokenException`` (a session
token other than the key's), ``InvalidSignatureException`` (a signature that does not match, or
made more than five minutes off), ``IncompleteSignatureException``, ``AccessDeniedException``
(an unknown API key).

Vertex takes only ``Authorization: Bearer <token>`` issued by ``POST /token`` and unexpired.
That endpoint is Google's JWT-bearer grant (RFC 7523): the form's ``assertion`` is a JWT signed
by a service account's key, whose public half the emulator was given, with this endpoint's URL
(or Google's, as google-auth sends it) as its audience and the cloud-platform scope. Without
keys of a kind, that check is off.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Final

import orjson
from aiohttp import web

from proxy.emulator.envelope import ErrorInfo
from proxy.emulator.playback import error_response
from proxy.emulator.sigv4 import AwsKey, SignedRequest, verify_sigv4

CLOUD_PLATFORM: Final = "https://www.googleapis.com/auth/cloud-platform"
JWT_BEARER: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_TOKEN_URI: Final = "https://oauth2.googleapis.com/token"
VERTEX_PATH: Final = "/publishers/"
_EXPECTED: Final = (
    "Expected OAuth 2 access token, login cookie or other valid authentication credential. "
    "See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_UNAUTHENTICATED: Final = "Request had invalid authentication credentials. " + _EXPECTED
_MISSING: Final = "Request is missing required authentication credential. " + _EXPECTED
# Expired tokens are remembered this long, so that one is refused as expired, not unknown.
_EXPIRED_KEPT: Final = 3600.0


@dataclass(frozen=True)
class CloudAuth:
    """Which cloud credentials the emulator accepts (none: those paths are not checked)."""

    aws_keys: Mapping[str, AwsKey] = field(default_factory=lambda: MappingProxyType({}))
    """Access key id -> its secret (and the session token that must come with it)."""
    bedrock_api_keys: frozenset[str] = frozenset()
    google_public_keys: tuple[str, ...] = ()
    """PEM public keys (or certificates) of the service accounts whose JWTs ``/token`` takes."""
    token_lifetime: float = 3600.0
    """Seconds an issued token lives (``expires_in``); 0 issues tokens already expired."""
    token_delay: float = 0.0
    """Seconds ``/token`` waits before answering, as a slow identity provider would."""
    role_lifetime: float = 3600.0
    """Seconds the credentials of a role assumed at ``/sts`` live."""

    def __post_init__(self) -> None:
        for name in ("token_lifetime", "token_delay", "role_lifetime"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a number of seconds, not {value!r}")


def new_service_account(path: Path, token_uri: str, project: str, email: str) -> str:
    """Write a service-account JSON file with a new RSA key, whose ``token_uri`` is this
    emulator's (the demo's and the tests' Vertex identity); returns its public key, PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    info = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": secrets.token_hex(20),
        "private_key": private.decode(),
        "client_email": email,
        "client_id": str(secrets.randbelow(10**21)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    }
    path.write_bytes(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return public.decode()


def public_key_of(service_account: Path) -> str:
    """The PEM public key of the private key in a service-account JSON file."""
    from cryptography.hazmat.primitives import serialization

    info = orjson.loads(service_account.read_bytes())
    private = serialization.load_pem_private_key(info["private_key"].encode(), password=None)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return public.decode()


def check_bedrock(
    request: web.Request,
    body: bytes,
    auth: CloudAuth,
    roles: Mapping[str, AwsKey] | None = None,
    now: datetime | None = None,
) -> web.Response | None:
    """None when a Bedrock request may go on (or Bedrock is not checked); else its 403.
    ``roles``: temporary keys issued for roles assumed (``sts``), taken as well."""
    if not auth.aws_keys and not auth.bedrock_api_keys:
        return None
    authorization = request.headers.get("Authorization", "")
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() == "bearer" and auth.bedrock_api_keys:
        if credential.strip() in auth.bedrock_api_keys:
            return None
        message = "Authentication failed: Please make sure your API Key is valid."
        return _bedrock_refusal("AccessDeniedException", message)
    raw_path, _, query = request.raw_path.partition("?")
    signed = SignedRequest(request.method, raw_path, query, list(request.headers.items()), body)
    keys = {**auth.aws_keys, **(roles or {})}
    refusal = verify_sigv4(signed, keys, now or datetime.now(UTC))
    if refusal is None:
        return None
    return _bedrock_refusal(refusal.error_type, refusal.message)


def check_vertex(
    request: web.Request, auth: CloudAuth, tokens: Mapping[str, float]
) -> web.Response | None:
    """None when a Vertex request bears a live token of ours (or Vertex is not checked); else
    Google's 401, with the reason Google gives (``ACCESS_TOKEN_EXPIRED``, ...)."""
    if not auth.google_public_keys:
        return None
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return _google_refusal("CREDENTIALS_MISSING")
    expiry = tokens.get(token.strip())
    if expiry is None:
        return _google_refusal("ACCESS_TOKEN_TYPE_UNSUPPORTED")
    if time.monotonic() >= expiry:
        return _google_refusal("ACCESS_TOKEN_EXPIRED")
    return None


def is_vertex_path(path: str) -> bool:
    """Whether ``path`` is Vertex AI's (``.../projects/{p}/locations/{r}/publishers/...``)."""
    before, found, _ = path.partition(VERTEX_PATH)
    parts = before.rsplit("/", 4)
    return bool(found) and len(parts) == 5 and parts[1] == "projects" and parts[3] == "locations"


async def answer_token(
    request: web.Request, auth: CloudAuth, tokens: dict[str, float]
) -> web.Response:
    """``POST /token``: a JWT-bearer grant answered with a new access token, or 400."""
    form = await request.post()
    if auth.token_delay:
        await asyncio.sleep(auth.token_delay)
    grant_type = form.get("grant_type")
    if grant_type != JWT_BEARER:
        shown = grant_type if isinstance(grant_type, str) else ""
        return _oauth_error("unsupported_grant_type", f"Invalid grant_type: {shown}")
    assertion = form.get("assertion")
    if not isinstance(assertion, str) or not assertion:
        return _oauth_error("invalid_request", "Missing required parameter: assertion")
    # google-auth addresses its grant to Google's token URL whatever the file's token_uri
    # says, and Google's token server takes that; so does this one, and its own URL.
    audiences = [str(request.url.with_query(None)), GOOGLE_TOKEN_URI]
    claims = _verified_claims(assertion, auth.google_public_keys, audiences)
    if isinstance(claims, str):
        return _oauth_error("invalid_grant", claims)
    scopes = str(claims.get("scope", "")).split()
    if CLOUD_PLATFORM not in scopes:
        return _oauth_error("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
    _forget_expired(tokens)
    token = "ya29." + secrets.token_urlsafe(32)
    tokens[token] = time.monotonic() + auth.token_lifetime
    answer = {
        "access_token": token,
        "expires_in": math.ceil(auth.token_lifetime),
        "token_type": "Bearer",
    }
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


def _verified_claims(
    assertion: str, keys: Sequence[str], audiences: list[str]
) -> Mapping[str, object] | str:
    """The assertion's claims, or why it is refused (the ``error_description``)."""
    if not keys:
        return "No service account keys are configured for this token endpoint."
    # Lazily: google-auth is the optional extra `gcp`, which only Vertex tests need.
    from google.auth import exceptions, jwt

    try:
        # google-auth's decode has no annotations; it returns the payload's JSON object.
        claims: object = jwt.decode(  # type: ignore[no-untyped-call]
            assertion, certs=list(keys), audience=audiences
        )
    except (ValueError, exceptions.GoogleAuthError) as exc:
        # Google's own answer for a JWT signed by a key it does not know.
        return "Invalid JWT Signature." if "signature" in str(exc).lower() else str(exc)
    if not isinstance(claims, dict):
        return "The JWT's payload is not an object."
    return claims


def _forget_expired(tokens: dict[str, float]) -> None:
    now = time.monotonic()
    for token in [token for token, expiry in tokens.items() if expiry + _EXPIRED_KEPT <= now]:
        del tokens[token]


def _oauth_error(error: str, description: str) -> web.Response:
    body = {"error": error, "error_description": description}
    return web.Response(status=400, body=orjson.dumps(body), content_type="application/json")


def _bedrock_refusal(exception: str, message: str) -> web.Response:
    return error_response(ErrorInfo(403, message, code=exception), dialect="bedrock")


def _google_refusal(reason: str) -> web.Response:
    message = _UNAUTHENTICATED
    if reason == "CREDENTIALS_MISSING":
        message = _MISSING
    # google.rpc.ErrorInfo names the reason, as Google's APIs do for their 401s.
    detail = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": {"service": "aiplatform.googleapis.com"},
    }
    body = {
        "error": {
            "code": 401,
            "message": message,
            "status": "UNAUTHENTICATED",
            "details": [detail],
        }
    }
    return web.Response(
        status=401,
        body=orjson.dumps(body),
        headers={
            "Content-Type": "application/json",
            "WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"',
        },
    )
