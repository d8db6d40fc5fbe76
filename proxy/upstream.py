"""The one user of ``aiohttp.ClientSession``: requests to providers, and their failures mapped.

Every aiohttp and timeout exception that can come out of talking to a provider is translated
here into ``proxy.errors`` (the httpcore ``map_exceptions`` pattern), always ``from`` the cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from proxy.config import Provider
from proxy.errors import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from proxy.normalize import Endpoint
from proxy.normalize.fields import upstream_error

# An upstream's error body is read up to this size; the rest is of no use to anybody.
ERROR_BODY_LIMIT: Final = 64 * 1024
_PATHS: Final[Mapping[tuple[str, Endpoint], str]] = {
    ("openai", "chat"): "/chat/completions",
    ("openai", "completions"): "/completions",
    ("friendli-2024", "chat"): "/chat/completions",
    ("friendli-2024", "completions"): "/completions",
    # Maritaca's legacy endpoint: base_url is https://chat.maritaca.ai/api
    ("maritaca-inference", "chat"): "/chat/inference",
}
_AUTH_HEADERS: Final = frozenset({"authorization", "api-key", "x-api-key"})
_TAG: Final = re.compile(r"<[^>]*>")


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how one provider is called; computed once per configuration."""

    urls: Mapping[Endpoint, URL]  # the endpoints its dialect serves, with its query parameters
    headers: CIMultiDict[str]
    stream_headers: CIMultiDict[str]  # the same, asking for an event stream
    secrets: tuple[str, ...]  # values to scrub from anything an upstream says back
    timeout: aiohttp.ClientTimeout  # connecting; the rest is bounded by the caller's deadlines


def target_for(provider: Provider) -> Target:
    headers: CIMultiDict[str] = CIMultiDict({"Content-Type": "application/json"})
    headers.update(provider.headers)
    if provider.api_key and not any(name.lower() in _AUTH_HEADERS for name in provider.headers):
        headers["Authorization"] = f"Bearer {provider.api_key}"
    secrets = tuple(
        value for name, value in headers.items() if name.lower() in _AUTH_HEADERS and value
    )
    if provider.api_key:
        secrets += (provider.api_key,)
    stream_headers = headers.copy()
    stream_headers["Accept"] = "text/event-stream"
    connect = provider.timeouts.connect
    timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect)
    # Parsed once here: aiohttp would otherwise parse the string and merge the query per request.
    urls = {
        endpoint: URL(provider.base_url + path).extend_query(provider.query)
        for (dialect, endpoint), path in _PATHS.items()
        if dialect == provider.dialect
    }
    return Target(urls, headers, stream_headers, secrets, timeout)


# What can come out of talking to a provider, for callers that catch it themselves on a hot path.
TRANSPORT_ERRORS: Final = (aiohttp.ClientError, OSError, TimeoutError)


def upstream_error_for(exc: BaseException, phase: str) -> UpstreamError:
    """The error of this tree for what aiohttp or asyncio raised while talking to a provider:
    the one translation of foreign exceptions (``mapped_errors`` and the relay use it)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"The upstream did not answer in time ({phase})")
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ServerDisconnectedError):
        return UpstreamConnectError(f"Could not reach the upstream ({phase}): {type(exc).__name__}")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamConnectError(f"The upstream connection broke ({phase})")
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError | OSError):
        return UpstreamConnectError(f"The upstream connection failed ({phase})")
    if isinstance(exc, aiohttp.ClientResponseError):
        return UpstreamProtocolError(f"The upstream sent an invalid HTTP response ({phase})")
    return UpstreamProtocolError(f"Talking to the upstream failed ({phase}): {type(exc).__name__}")


@contextmanager
def mapped_errors(phase: str) -> Iterator[None]:
    """Translate what aiohttp and asyncio raise while talking to a provider."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise upstream_error_for(exc, phase) from exc


def _scrub(message: str, target: Target) -> str:
    for secret in target.secrets:
        message = message.replace(secret, "***")
    return message


def status_error(
    status: int,
    reason: str,
    content_type: str,
    body: bytes,
    target: Target,
    retry_after: str | None,
) -> UpstreamStatusError:
    """The error for an upstream's non-200 answer, in whatever envelope it came.

    OpenAI-style ``{"error": {...}}``, Anthropic's ``{"type": "error", "error": {...}}``,
    Gemini's ``{"error": {"code", "message", "status"}}``, a bare ``{"message"}`` or
    ``{"detail"}``, plain text, or a load balancer's HTML page.
    """
    message: str | None = None
    exc: UpstreamStatusError | None = None
    if "json" in content_type or body[:1] in (b"{", b"["):
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = None
        if isinstance(payload, dict):
            if "error" in payload:
                exc = upstream_error(payload["error"], status)
                exc.upstream_status = status  # the HTTP status wins over a code in the body
            else:
                found = payload.get("message") or payload.get("detail")
                message = found if isinstance(found, str) else None
    if exc is None:
        if message is None:
            text = body.decode("utf-8", "replace").strip()
            if "html" in content_type or text.startswith("<"):
                text = ""  # an HTML page says nothing a client can use
            text = " ".join(_TAG.sub(" ", text).split())[:500]
            message = text or f"The upstream answered {status} {reason}".rstrip()
        exc = UpstreamStatusError(message, upstream_status=status)
    exc.message = _scrub(exc.message, target)
    if retry_after is not None:
        try:
            exc.retry_after = max(0.0, float(retry_after))
        except ValueError:
            exc.retry_after = None
    return exc


class UpstreamClient:
    """Sends requests to providers over one pooled, keep-alive session per process."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def send(
        self, url: URL, target: Target, body: bytes, *, stream: bool
    ) -> aiohttp.ClientResponse:
        """Send the request and wait for the response headers.

        Callers bound the wait with their own first-byte deadline; a non-200 answer raises
        ``UpstreamStatusError`` with the upstream's message.
        """
        with mapped_errors("connect"):
            response = await self.session.post(
                url,
                data=body,
                headers=target.stream_headers if stream else target.headers,
                timeout=target.timeout,
                allow_redirects=False,
                auto_decompress=True,
            )
        if response.status != 200:
            try:
                with mapped_errors("error body"):
                    error_bytes = await response.content.read(ERROR_BODY_LIMIT)
            finally:
                response.close()
            raise status_error(
                response.status,
                response.reason or "",
                response.headers.get("Content-Type", ""),
                error_bytes,
                target,
                response.headers.get("Retry-After"),
            )
        return response


async def read_whole(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """A whole (non-streamed) body, refusing more than ``limit`` bytes."""
    chunks = []
    size = 0
    with mapped_errors("body"):
        while True:
            chunk = await response.content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise UpstreamProtocolError(f"The upstream's response is larger than {limit} bytes")
            chunks.append(chunk)
    return b"".join(chunks)
