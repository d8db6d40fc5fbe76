"""Requests to providers, and their failures mapped: with ``proxy.pool`` and
``proxy.connections`` (the connections), the only users of aiohttp's client.

Every aiohttp and timeout exception that can come out of talking to a provider is translated
here into ``proxy.errors`` (the httpcore ``map_exceptions`` pattern), always ``from`` the cause.

Requests go out on connections opened by aiohttp's connector (its DNS cache and TLS) and kept
between requests by ``proxy.connections``, and come back through aiohttp's response protocol
(its C parser, chunked and compressed bodies, flow control), without ``ClientSession`` in
between: every request to one endpoint of one provider is the same bytes but for its body and
length, so those are made once per configuration (``Destination``).
That takes measurably less CPU per request than ``ClientSession.post`` (docs/performance.md).
tests/test_upstream_wire.py holds it to what ClientSession did on the wire.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import orjson
from aiohttp import hdrs
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import SERVER_SOFTWARE, HttpProcessingError
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.config import MAX_CONNECTIONS, Provider
from proxy.connections import Connections, Shelf, Slots
from proxy.errors import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from proxy.normalize import Endpoint
from proxy.normalize.fields import upstream_error
from proxy.pool import PoolKey, UpstreamProtocol

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
# What aiohttp's ClientSession adds to every request unless told otherwise; Accept-Encoding
# lists exactly the codings its response parser can undo here (brotli and zstd if installed).
_DEFAULT_HEADERS: Final = (
    ("Accept", "*/*"),
    ("Accept-Encoding", aiohttp.ClientRequest.DEFAULT_HEADERS[hdrs.ACCEPT_ENCODING]),
    ("User-Agent", SERVER_SOFTWARE),
)
# A body up to this size goes out in one write with its head (one copy, one send); a larger
# one is handed over as it is, beside the head.
_COALESCE: Final = 16 * 1024
_TAG: Final = re.compile(r"<[^>]*>")


def request_head(url: URL, headers: Mapping[str, str]) -> bytes:
    """A POST to ``url`` with ``headers``, up to the Content-Length that ends every head here:
    the request line, Host (unless given), the headers, and aiohttp's defaults not given.

    Header names are tokens and values have no line breaks (the configuration refuses both).
    """
    given = {name.lower() for name in headers}
    lines = [f"POST {url.raw_path_qs} HTTP/1.1"]
    if "host" not in given:
        lines.append(f"Host: {url.host_port_subcomponent}")
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    lines.extend(
        f"{name}: {value}" for name, value in _DEFAULT_HEADERS if name.lower() not in given
    )
    lines.append("")
    return "\r\n".join(lines).encode("utf-8")


class Destination:
    """One endpoint of one provider: its URL, and the head of every request to it (for a
    whole answer and for a stream), made once per configuration."""

    __slots__ = ("_key", "_shelf", "head", "stream_head", "url")

    def __init__(self, url: URL, headers: CIMultiDict[str]) -> None:
        self.url = url
        self.head = request_head(url, headers)
        stream_headers = headers.copy()
        stream_headers["Accept"] = "text/event-stream"
        self.stream_head = request_head(url, stream_headers)
        self._key: aiohttp.ClientRequest | None = None
        self._shelf: Shelf | None = None

    def key(self) -> aiohttp.ClientRequest:
        """What aiohttp's connector opens new connections with (host, port, TLS), read off a
        request of its own; made on first use, as it needs the running loop."""
        if self._key is None:
            self._key = PoolKey("POST", self.url, loop=asyncio.get_running_loop())
        return self._key

    def shelf(self, connections: Connections) -> Shelf:
        """Where ``connections`` keeps the idle connections to this endpoint's place (shared
        by every endpoint at the same host, port and TLS settings); looked up once."""
        shelf = self._shelf
        if shelf is None or shelf.connections is not connections:
            shelf = self._shelf = connections.shelf(self.key().connection_key)
        return shelf


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how one provider is called; computed once per configuration."""

    destinations: Mapping[Endpoint, Destination]  # the endpoints its dialect serves
    timeout: aiohttp.ClientTimeout  # connecting; the rest is bounded by the caller's deadlines
    # Its requests holding a connection: taken before ``send``, given back by the response.
    slots: Slots = field(default_factory=lambda: Slots(MAX_CONNECTIONS))


def target_for(provider: Provider) -> Target:
    headers: CIMultiDict[str] = CIMultiDict({"Content-Type": "application/json"})
    headers.update(provider.headers)
    if provider.api_key and not any(name.lower() in _AUTH_HEADERS for name in provider.headers):
        headers["Authorization"] = f"Bearer {provider.api_key}"
    connect = provider.timeouts.connect
    timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect)
    destinations = {
        endpoint: Destination(URL(provider.base_url + path).extend_query(provider.query), headers)
        for (dialect, endpoint), path in _PATHS.items()
        if dialect == provider.dialect
    }
    return Target(destinations, timeout, Slots(provider.max_connections))


# What can come out of talking to a provider, for callers that catch it themselves on a hot path.
TRANSPORT_ERRORS: Final = (aiohttp.ClientError, HttpProcessingError, OSError, TimeoutError)


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
    if isinstance(exc, aiohttp.ClientResponseError | HttpProcessingError):
        return UpstreamProtocolError(f"The upstream sent an invalid HTTP response ({phase})")
    return UpstreamProtocolError(f"Talking to the upstream failed ({phase}): {type(exc).__name__}")


@contextmanager
def mapped_errors(phase: str) -> Iterator[None]:
    """Translate what aiohttp and asyncio raise while talking to a provider."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise upstream_error_for(exc, phase) from exc


def status_error(
    status: int,
    reason: str,
    content_type: str,
    body: bytes,
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
    if retry_after is not None:
        exc.retry_after = retry_after_seconds(retry_after)
    return exc


# The longest Retry-After taken from an upstream: a day (a daily quota's reset); a longer or
# infinite one is read as this, so that what is passed on stays a short number.
RETRY_AFTER_MAX: Final = 86400.0


def retry_after_seconds(value: str) -> float | None:
    """Seconds from a Retry-After header: delay-seconds, or an HTTP-date (RFC 9110 10.2.3);
    None when it is neither. Finite and within [0, RETRY_AFTER_MAX] whatever it says."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), RETRY_AFTER_MAX)


class UpstreamResponse:
    """An upstream's answer: its status line and headers, and its body as it arrives.

    Its connection goes back on its shelf once the body has been read to its end, and is closed
    by ``close`` if it has not (whatever is left of the body is not worth waiting for).
    """

    __slots__ = ("_connection", "_shelf", "_slots", "content", "headers", "reason", "status")

    def __init__(
        self,
        connection: aiohttp.connector.Connection,
        shelf: Shelf,
        status: int,
        reason: str | None,
        headers: CIMultiDictProxy[str],
        content: aiohttp.StreamReader,
        slots: Slots,
    ) -> None:
        self._connection: aiohttp.connector.Connection | None = connection
        self._shelf = shelf
        self._slots = slots
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content = content
        content.on_eof(self._release)  # at once if the body is over already

    @property
    def content_type(self) -> str:
        """The media type, lower case, without parameters (aiohttp's default if none)."""
        raw = self.headers.get("Content-Type")
        if not raw:
            return "application/octet-stream"
        return raw.partition(";")[0].strip().lower()

    @property
    def takeable(self) -> bool:
        """Its body comes in chunks, not encoded: ``proxy.pipe`` may take it from its connection
        (``proxy.chunks`` undoes the chunks; aiohttp's reader alone undoes an encoding)."""
        headers = self.headers
        coding = headers.get("Content-Encoding", "identity").strip().lower()
        framing = headers.get("Transfer-Encoding", "").strip().lower()
        return framing == "chunked" and coding == "identity"

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            protocol = connection.protocol
            if isinstance(protocol, UpstreamProtocol):
                protocol.idle = True
            self._shelf.put(connection)  # which closes it instead if it cannot be used again
            self._slots.release()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            protocol = connection.protocol
            if isinstance(protocol, UpstreamProtocol):
                protocol.sink = None  # whatever took its reads lets go with it
            self._shelf.connections.discard(connection)
            self._slots.release()


class UpstreamClient:
    """Sends requests to providers over one pool of keep-alive connections per process."""

    def __init__(self, connections: Connections) -> None:
        self.connections = connections

    async def send(
        self, destination: Destination, target: Target, body: bytes, *, stream: bool
    ) -> UpstreamResponse:
        """Send the request and wait for the response headers.

        Callers bound the wait with their own first-byte deadline, and hold one of the target's
        ``slots``: the response gives it back once done with, or this if there is none; a
        non-200 answer raises ``UpstreamStatusError`` with the upstream's message.
        """
        head = destination.stream_head if stream else destination.head
        # mapped_errors("connect"), spelled out, and the exchange itself written here rather
        # than in a coroutine of its own: this is every request's path, and both a generator
        # context manager and a level of coroutine (paid again when the answer resumes it) cost
        # microseconds per request.
        connections = self.connections
        # Whether the slot went to a response (which gives it back); a flag rather than a test
        # of the response for None, which compiled code narrows away across the finally.
        handed = False
        try:
            shelf = destination.shelf(connections)
            connection = shelf.take()
            if connection is None:
                connection = await connections.open(destination.key(), target.timeout)
            try:
                protocol: ResponseHandler | None = connection.protocol
                transport = connection.transport
                if protocol is None or transport is None or transport.is_closing():
                    # Closed by the upstream since it was pooled.
                    raise aiohttp.ServerDisconnectedError()
                if isinstance(protocol, UpstreamProtocol):
                    protocol.idle = False  # what comes from now on answers this request
                if protocol._parser is None:
                    # A new connection: its parser (a body without a length runs to the end).
                    # A pooled one keeps the parser of its last answer, which ended cleanly (a
                    # connection goes back to the pool only once its answer's body was read to
                    # its end) and is ready for the next; aiohttp's ClientSession makes a new
                    # one per request, a measurable cost (docs/performance.md).
                    protocol.set_response_params(read_until_eof=True)
                length = b"Content-Length: %d\r\n\r\n" % len(body)
                if len(body) <= _COALESCE:
                    transport.write(head + length + body)
                else:
                    transport.writelines((head, length, body))
                # Read through Any: aiohttp's C parser makes each message of a class of its own,
                # not the NamedTuple its types declare, and compiled code checks what it is
                # given against the declared type (a TypeError for every answer).
                read: Callable[[], Awaitable[Any]] = protocol.read
                while True:
                    message, content = await read()
                    # Informational answers (100 Continue, 103 Early Hints) precede the real one.
                    if not 100 <= message.code < 200 or message.code == 101:
                        break
                response = UpstreamResponse(
                    connection,
                    shelf,
                    message.code,
                    message.reason,
                    message.headers,
                    content,
                    target.slots,
                )
                handed = True
            except BaseException:
                # Cancelled or failed half way: nothing else may use it.
                connections.discard(connection)
                raise
        except TRANSPORT_ERRORS as exc:
            raise upstream_error_for(exc, "connect") from exc
        finally:
            if not handed:
                target.slots.release()
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
                response.headers.get("Retry-After"),
            )
        return response


def read_arrived(response: UpstreamResponse, limit: int) -> bytes | None:
    """The whole body if it has all arrived already (the usual case for a small answer, which
    comes with its headers), refusing more than ``limit`` bytes; else None (``read_whole``)."""
    content = response.content
    if not content.is_eof():
        return None
    # aiohttp stops reading a body nobody reads long before this; the bound must not rest on it.
    if content.total_bytes > limit:
        raise UpstreamProtocolError(f"The upstream's response is larger than {limit} bytes")
    return content.read_nowait()


async def read_whole(response: UpstreamResponse, limit: int) -> bytes:
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
