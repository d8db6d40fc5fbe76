"""Requests to providers, and their failures mapped: the only user of ``proxy.http``'s client.

Every exception that can come out of talking to a provider (the socket's, the parser's, a
timeout) is translated here into ``proxy.core.errors`` (the httpcore ``map_exceptions`` pattern),
always ``from`` the cause.

Every request to one endpoint of one provider is the same bytes but for its body and length, so
those are made once per configuration (``Destination``), and go out with the body in one write
on a keep-alive connection of the process's ``Pool``.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final
from urllib.parse import quote

import orjson
from yarl import URL

from proxy import __version__
from proxy.core.config import MAX_CONNECTIONS, Deployment, Provider, dialect_of
from proxy.core.errors import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from proxy.core.request import Endpoint
from proxy.http.cloud import Signer
from proxy.http.connection import Body, BrokenAnswer, InvalidAnswer, UpstreamConnection
from proxy.http.pool import Origin, Pool, Slots
from proxy.normalize.dialects import DIALECTS, Dialect
from proxy.normalize.dialects.bedrock_errors import aws_error, error_name
from proxy.normalize.fields import upstream_error

# An upstream's error body is read up to this size; the rest is of no use to anybody.
ERROR_BODY_LIMIT: Final = 64 * 1024
_AUTH_HEADERS: Final = frozenset({"authorization", "api-key", "x-api-key"})
# Added to every request unless the configuration sets them; Accept-Encoding lists exactly the
# codings proxy.http.connection undoes.
_DEFAULT_HEADERS: Final = (
    ("Accept", "*/*"),
    ("Accept-Encoding", "gzip, deflate"),
    ("User-Agent", f"llm-proxy/{__version__}"),
)
_TAG: Final = re.compile(r"<[^>]*>")
_AWS_ERROR_TYPE: Final = "x-amzn-errortype"
# The most of an upstream's plain-text error passed on, in characters.
TEXT_MAX: Final = 500


def request_head(url: URL, headers: Mapping[str, str]) -> bytes:
    """A POST to ``url`` with ``headers``, up to the Content-Length that ends every head here:
    the request line, Host (unless given), the headers, and the defaults not given.

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
    """One endpoint of one provider: its URL, where its connections go, and the head of every
    request to it (for a whole answer and for a stream), made once per configuration.

    A stream may be asked for at a URL of its own (``stream_url``: Gemini, TGI)."""

    __slots__ = ("aws_errors", "head", "headers", "origin", "stream_head", "stream_url", "url")

    def __init__(
        self,
        url: URL,
        headers: Mapping[str, str],
        stream_url: URL | None = None,
        *,
        aws_errors: bool = False,
    ) -> None:
        self.url = url
        self.headers = headers
        self.stream_url = stream_url
        self.aws_errors = aws_errors  # its errors are typed as AWS's APIs type them
        tls = url.scheme == "https"
        self.origin = Origin(url.host or "", url.port or (443 if tls else 80), tls)
        self.head = request_head(url, headers)
        stream_headers = {
            name: value for name, value in headers.items() if name.lower() != "accept"
        }
        stream_headers["Accept"] = "text/event-stream"
        self.stream_head = request_head(stream_url or url, stream_headers)

    def with_headers(self, given: Mapping[str, str], path: str = "") -> Destination:
        """This destination with ``given`` headers (replacing its own of the same names, in
        any case), and ``path`` added to its URL's: for one request's own."""
        names = {name.lower() for name in given}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in names}
        headers.update(given)
        url = self.url
        if path:
            url = url.with_path(url.path + path).with_query(url.query)
        stream_url = None if path else self.stream_url
        return Destination(url, headers, stream_url, aws_errors=self.aws_errors)


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how one provider is called; computed once per configuration."""

    # The endpoints its dialect serves; for a dialect whose paths name the model, by
    # (endpoint, upstream model) for each model deployed on it.
    destinations: Mapping[Endpoint | tuple[Endpoint, str], Destination]
    connect: float  # seconds to open a connection; the rest is bounded by the caller's deadlines
    # Its requests holding a connection: taken before ``send``, given back by the response.
    slots: Slots = field(default_factory=lambda: Slots(MAX_CONNECTIONS))
    # A cloud provider's: the headers that authenticate each request (proxy.http.cloud).
    signer: Signer | None = None
    # By upstream model: where Anthropic's Messages calls go as they came, when the dialect
    # takes them at paths of its own (``Dialect.messages``: Claude on Bedrock).
    through: Mapping[str, Destination] = field(default_factory=dict)

    def destination(self, endpoint: Endpoint, model: str) -> Destination | None:
        found = self.destinations.get(endpoint)
        return found if found is not None else self.destinations.get((endpoint, model))


def target_for(
    provider: Provider, deployed: Iterable[Deployment] = (), signer: Signer | None = None
) -> Target:
    """The provider's target; ``deployed``: the deployments on it (a dialect whose paths name
    the model has a destination for each model; on Vertex AI, each in its publisher's dialect)."""
    models: dict[str, str] = {d.model: dialect_of(provider, d) for d in deployed}
    destinations: dict[Endpoint | tuple[Endpoint, str], Destination] = {}
    through: dict[str, Destination] = {}
    # Vertex AI's deployments each speak their publisher's dialect; any other provider's, its own.
    for name in dict.fromkeys(models.values()) or (provider.dialect,):
        dialect = DIALECTS[name]
        headers = _headers(provider, dialect)

        def url(path: str, model: str, safe: str = dialect.model_safe) -> URL:
            path = path.replace("{model}", quote(model, safe=safe))
            # A dialect's path may carry its own query (Gemini's alt=sse); the provider's joins.
            if safe:
                return URL(provider.base_url + path, encoded=False).extend_query(provider.query)
            # Escaped as it goes on the wire (and is signed): yarl would unescape a ":".
            base = str(URL(provider.base_url, encoded=False))
            return URL(base + path, encoded=True).extend_query(provider.query)

        spoken = [model for model, its in models.items() if its == name]
        messages = dialect.messages
        if messages is not None:
            for model in filter(messages.takes, spoken):
                through[model] = Destination(
                    url(messages.path, model),
                    headers,
                    url(messages.stream_path, model),
                    aws_errors=dialect.aws_errors,
                )
        for endpoint, path in dialect.paths.items():
            stream_path = dialect.stream_paths.get(endpoint)
            keys: list[tuple[Endpoint | tuple[Endpoint, str], str]] = (
                [((endpoint, model), model) for model in spoken]
                if "{model}" in path or (stream_path and "{model}" in stream_path)
                else [(endpoint, "")]
            )
            for key, model in keys:
                stream_url = url(stream_path, model) if stream_path else None
                destinations[key] = Destination(
                    url(path, model), headers, stream_url, aws_errors=dialect.aws_errors
                )
    slots = Slots(provider.max_connections)
    return Target(destinations, provider.timeouts.connect, slots, signer, through)


def _headers(provider: Provider, dialect: Dialect) -> dict[str, str]:
    """Every request's headers to ``provider`` in ``dialect``, but the body's length."""
    given = {name.lower() for name in provider.headers}
    headers = {} if "content-type" in given else {"Content-Type": "application/json"}
    headers.update((k, v) for k, v in dialect.headers.items() if k.lower() not in given)
    headers.update(provider.headers)
    if provider.api_key:
        auth = dialect.auth(provider.api_key)
        # Credentials the configuration sets itself win over the dialect's way of sending them.
        if not given & (_AUTH_HEADERS | {name.lower() for name in auth}):
            headers.update(auth)
    return headers


# What can come out of talking to a provider, for callers that catch it themselves on a hot path:
# the socket's failures (ssl.SSLError and socket.gaierror among them), the parser's, timeouts.
TRANSPORT_ERRORS: Final = (OSError, InvalidAnswer, TimeoutError)


def upstream_error_for(exc: BaseException, phase: str) -> UpstreamError:
    """The error of this tree for what the connection or asyncio raised while talking to a
    provider: the one translation of foreign exceptions (``mapped_errors`` and the relay)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"The upstream did not answer in time ({phase})")
    if isinstance(exc, BrokenAnswer):
        if phase == "connect":  # closed before answering: a pooled connection the server shut
            return UpstreamConnectError(f"Could not reach the upstream ({phase}): closed")
        return UpstreamConnectError(f"The upstream connection broke ({phase})")
    if isinstance(exc, InvalidAnswer):
        return UpstreamProtocolError(f"The upstream sent an invalid HTTP response ({phase})")
    if isinstance(exc, OSError):
        if phase == "connect":
            return UpstreamConnectError(
                f"Could not reach the upstream ({phase}): {type(exc).__name__}"
            )
        return UpstreamConnectError(f"The upstream connection failed ({phase})")
    return UpstreamProtocolError(f"Talking to the upstream failed ({phase}): {type(exc).__name__}")


@contextmanager
def mapped_errors(phase: str) -> Iterator[None]:
    """Translate what the connection and asyncio raise while talking to a provider."""
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
    error_type: str | None = None,
) -> UpstreamStatusError:
    """The error for an upstream's non-200 answer, in whatever envelope it came.

    OpenAI-style ``{"error": {...}}``, Anthropic's ``{"type": "error", "error": {...}}``,
    Gemini's ``{"error": {"code", "message", "status"}}``, a bare ``{"message"}`` or
    ``{"detail"}``, plain text, or a load balancer's HTML page. AWS's (Bedrock's) is a bare
    ``{"message"}`` whose type is in the ``x-amzn-ErrorType`` header (``error_type``), or in
    the body's ``__type``: read for an AWS API alone (``error_type`` not None, "" without the
    header), as another upstream behind an AWS front door may send the header too.
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
                if retry_after is None:
                    retry_after = retry_delay(payload["error"])
            else:
                found = payload.get("message") or payload.get("Message") or payload.get("detail")
                message = found if isinstance(found, str) else None
                if error_type == "" and isinstance(payload.get("__type"), str):
                    error_type = payload["__type"]  # AWS's JSON protocol names it in the body
    if exc is None:
        if message is None:
            text = body.decode("utf-8", "replace").strip()
            if "html" in content_type or text.startswith("<"):
                text = ""  # an HTML page says nothing a client can use
            text = " ".join(_TAG.sub(" ", text).split())
            if len(text) > TEXT_MAX:
                # Whole words only: a secret cut in two would leave a part of it that the
                # redaction (of whole secrets, later) cannot recognize.
                text = text[: TEXT_MAX + 1].rpartition(" ")[0]
            message = text or f"The upstream answered {status} {reason}".rstrip()
        if error_type:
            exc = aws_error(status, error_name(error_type), message)
        else:
            exc = UpstreamStatusError(message, upstream_status=status)
    if retry_after is not None:
        exc.retry_after = retry_after_seconds(retry_after)
    return exc


# The longest Retry-After taken from an upstream: a day (a daily quota's reset); a longer or
# infinite one is read as this, so that what is passed on stays a short number.
RETRY_AFTER_MAX: Final = 86400.0


# google.rpc.RetryInfo's retryDelay, a google.protobuf.Duration in its JSON form: "34.4s".
_DURATION: Final = re.compile(r"\d{1,9}(?:\.\d{1,9})?s")


def retry_delay(error: object) -> str | None:
    """The wait Google's error envelope asks for, as Retry-After's delay-seconds: Gemini says it
    in ``details`` (a ``google.rpc.RetryInfo``), with no Retry-After header."""
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith(".RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and _DURATION.fullmatch(delay):
                return delay[:-1]
    return None


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

    Its connection goes back to the pool once the body has been read to its end, and is closed
    by ``close`` if it has not (whatever is left of the body is not worth waiting for).
    """

    __slots__ = (
        "_connection",
        "_origin",
        "_pool",
        "_slots",
        "content",
        "headers",
        "reason",
        "status",
    )

    def __init__(
        self,
        connection: UpstreamConnection,
        pool: Pool,
        origin: Origin,
        status: int,
        reason: str,
        headers: Mapping[str, str],
        content: Body,
        slots: Slots,
    ) -> None:
        self._connection: UpstreamConnection | None = connection
        self._pool = pool
        self._origin = origin
        self._slots = slots
        self.status = status
        self.reason = reason
        self.headers = headers  # names in lower case
        self.content = content
        content.on_eof(self._release)  # at once if the body is over already

    @property
    def content_type(self) -> str:
        """The media type, lower case, without parameters (RFC 9110's default if none)."""
        raw = self.headers.get("content-type")
        if not raw:
            return "application/octet-stream"
        return raw.partition(";")[0].strip().lower()

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.put(connection, self._origin)  # which closes it if it cannot be reused
            self._slots.release()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self.content.listener = None  # whoever listened lets go with it
            self._pool.discard(connection)
            self._slots.release()


class UpstreamClient:
    """Sends requests to providers over one pool of keep-alive connections per process."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def send(
        self,
        destination: Destination,
        target: Target,
        body: bytes,
        *,
        stream: bool,
        extra: bytes = b"",
    ) -> UpstreamResponse:
        """Send the request and wait for the response headers; ``extra``: header lines of this
        request's own (a trace's ``traceparent``), each ending in CRLF.

        Callers bound the wait with their own first-byte deadline, and hold one of the target's
        ``slots``: the response gives it back once done with, or this if there is none; a
        non-200 answer raises ``UpstreamStatusError`` with the upstream's message.
        """
        head = destination.stream_head if stream else destination.head
        if extra:
            head += extra
        pool = self.pool
        origin = destination.origin
        response: UpstreamResponse | None = None
        try:
            connection = pool.take(origin)
            if connection is None:
                async with asyncio.timeout(target.connect):
                    connection = await pool.connect(origin)
            try:
                length = b"Content-Length: %d\r\n\r\n" % len(body)
                answer = await connection.request(head + length, body)
                response = UpstreamResponse(
                    connection,
                    pool,
                    origin,
                    answer.status,
                    answer.reason,
                    answer.headers,
                    answer.body,
                    target.slots,
                )
            except BaseException:
                # Cancelled or failed half way: nothing else may use it.
                pool.discard(connection)
                raise
        except TRANSPORT_ERRORS as exc:
            raise upstream_error_for(exc, "connect") from exc
        finally:
            if response is None:
                target.slots.release()
        if response.status != 200:
            try:
                with mapped_errors("error body"):
                    error_bytes = await response.content.read_upto(ERROR_BODY_LIMIT)
            finally:
                response.close()
            raise status_error(
                response.status,
                response.reason,
                response.headers.get("content-type", ""),
                error_bytes,
                response.headers.get("retry-after"),
                response.headers.get(_AWS_ERROR_TYPE, "") if destination.aws_errors else None,
            )
        return response


def read_arrived(response: UpstreamResponse, limit: int) -> bytes | None:
    """The whole body if it has all arrived already (the usual case for a small answer, which
    comes with its headers), refusing more than ``limit`` bytes; else None (``read_whole``)."""
    content = response.content
    if not content.is_eof():
        return None
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
