"""OAuth2 bearer tokens for Vertex AI, through google-auth (the ``gcp`` extra).

google-auth reads the identity (a service-account or external-account JSON file, else
Application Default Credentials) and exchanges it for an access token of scope
``cloud-platform`` (for a service account: a JWT signed with its key, posted to the file's
``token_uri``). Both block, so they run in a thread (``Refreshing``), which also keeps the token
until shortly before it expires.
"""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any, Final

import google.auth
import orjson
from google.auth import aws, identity_pool, pluggable
from google.auth.credentials import Credentials
from google.auth.transport import Request
from google.auth.transport.requests import Request as RequestsRequest
from google.oauth2 import service_account
from yarl import URL

from proxy.core.cloud_config import GoogleAuth
from proxy.http.cloud.refresh import Refreshing, read_identity

SCOPES: Final = ("https://www.googleapis.com/auth/cloud-platform",)
_TOKEN: Final = re.compile(r"[\x21-\x7e]{1,8192}")


class _Bounded(Request):
    """google-auth's requests transport, with a timeout on each call to the token endpoint
    (its own default is two minutes)."""

    def __init__(self, timeout: float) -> None:
        self._inner = RequestsRequest()
        self._timeout = timeout

    def __call__(self, url: str, method: str = "GET", body: Any = None,
                 headers: Any = None, timeout: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        return self._inner(url, method, body, headers, timeout or self._timeout, **kwargs)


class GoogleSigner:
    """Adds ``Authorization: Bearer <token>`` to each request of one Vertex provider."""

    def __init__(self, name: str, auth: GoogleAuth, timeout: float) -> None:
        self._auth = auth
        self._credentials: Credentials | None = None
        self._transport = _Bounded(timeout)
        self._what = f"Google credentials of provider '{name}'"
        self._header = Refreshing(self._fetch, self._what, timeout)

    async def warm(self) -> None:
        await read_identity(self._load, self._what)

    def _load(self) -> None:
        if self._credentials is None:
            self._credentials = load(self._auth)

    async def sign(self, url: URL, body: bytes) -> bytes:
        return await self._header.get()

    def _fetch(self) -> tuple[bytes, float | None]:
        self._load()
        credentials = self._credentials
        assert credentials is not None
        credentials.refresh(self._transport)
        token = credentials.token
        # It goes into a header line as it is: a token endpoint's odd answer must not add one.
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise LookupError("the token endpoint gave no usable access token")
        expiry = credentials.expiry  # naive UTC, as google-auth keeps it
        expires = None if expiry is None else expiry.replace(tzinfo=UTC).timestamp()
        return f"Authorization: Bearer {token}\r\n".encode("latin-1"), expires


def load(auth: GoogleAuth) -> Credentials:
    """The identity ``auth`` names, scoped for Vertex AI (blocking: reads files, and ADC may
    ask the metadata server)."""
    if auth.credentials is None:
        found: Credentials
        found, _ = google.auth.default(scopes=list(SCOPES))
        return found
    return _from_file(auth.credentials)


def _from_file(path: str) -> Credentials:
    """The file's credentials, by the loader of its own type: google-auth's generic loader
    takes any configuration it is given, which Google advises against (externally sourced
    credentials), so only the types a Vertex provider is documented to take are read."""
    with open(path, "rb") as file:
        info = orjson.loads(file.read())
    kind = info.get("type") if isinstance(info, dict) else None
    scopes = list(SCOPES)
    if kind == "service_account":
        return service_account.Credentials.from_service_account_info(info, scopes=scopes)
    if kind == "external_account":
        source = info.get("credential_source")
        source = source if isinstance(source, dict) else {}
        if str(source.get("environment_id", "")).startswith("aws"):
            return aws.Credentials.from_info(info, scopes=scopes)
        if "executable" in source:
            return pluggable.Credentials.from_info(info, scopes=scopes)
        return identity_pool.Credentials.from_info(info, scopes=scopes)
    raise ValueError(
        f"{path} is not a service_account or external_account credentials file "
        f"(its type is {kind!r})"
    )
