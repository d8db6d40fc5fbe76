"""One client request as metering, metrics and the access log see it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from proxy.core.errors import ProxyError
from proxy.core.prices import Price
from proxy.core.usage import Usage

if TYPE_CHECKING:
    from proxy.core.config import Deployment, Provider
    from proxy.core.request import ClientRequest

# Label values for requests that never got as far as a configured team, model or provider:
# metric labels stay bounded whatever keys and model names clients make up.
UNKNOWN_TEAM = "unknown"
UNKNOWN_MODEL = "unknown"
NO_PROVIDER = "none"

# What of a path the access log keeps: enough for any API path, and a bound on a made-up one.
PATH_MAX = 256


@dataclass(frozen=True, slots=True)
class Answered:
    """What the answer that went to the client said of itself (``gen_ai.response.*``): its id
    as the client got it, the model the upstream said it used (the client sees its own name),
    and each choice's finish reason, in index order. Made only for a traced request."""

    id: str | None
    model: str | None
    finish_reasons: tuple[str, ...] = ()


class Trace(Protocol):
    """A traced request's spans (``proxy.ops.telemetry``): its own, and one per attempt."""

    # The trace's id (32 hex digits) when it is sampled, for the access log; else None.
    trace_id: str | None

    def attempt(
        self,
        exchange: Exchange,
        provider: Provider,
        deployment: Deployment,
        request: ClientRequest,
    ) -> bytes:
        """An attempt of ``exchange`` begins: its span is started, and the header lines
        returned (each ending in CRLF) carry its context upstream (``traceparent``,
        ``tracestate``). (The trace holds no reference to its exchange, which holds it.)"""

    def attempt_failed(self, error: ProxyError) -> None:
        """The attempt begun last failed before the client got anything: its span ends."""

    def end(self, exchange: Exchange) -> None:
        """The request ended (its stream too): the last attempt's span and its own end."""


@dataclass(slots=True)
class Exchange:
    """One API request as metering sees it. Its times are ``time.perf_counter()`` values, never
    ``loop.time()``: under uvloop that is libuv's clock, in whole milliseconds and fixed for a
    whole loop turn, so a request's overhead read 0 or 1 ms and its waits summed wrongly."""

    request_id: str
    # "chat", "completions", "responses", "messages", "count_tokens", "embeddings", "models",
    # "other"
    endpoint: str
    started: float  # when the request arrived
    team: str = UNKNOWN_TEAM
    model: str = UNKNOWN_MODEL  # a configured model name, never one a client made up
    provider: str = NO_PROVIDER
    path: str = ""  # the request's path, cut at PATH_MAX: for the access log, never a label
    stream: bool = False
    status: int = 0  # the HTTP status sent; 200 for a stream that later ended in an error event
    # The kind of upstream failure the request ended with: connect, timeout, status, protocol.
    upstream_error: str | None = None
    failure: ProxyError | None = None  # what it failed with, before or after its first byte
    # (provider, kind) of each failed attempt that was followed by another (fallback or retry)
    retried: list[tuple[str, str]] = field(default_factory=list)
    usage: Usage | None = None
    price: Price | None = None  # of the deployment that answered; None: unpriced
    fixes: frozenset[str] = frozenset()
    upstream_wait: float = 0.0  # seconds spent waiting for the upstream
    client_wait: float = 0.0  # seconds spent waiting for the client to take what was written
    first_token_at: float | None = None  # when the first content byte was sent
    ended: float = 0.0
    client_disconnected: bool = False
    # Headers every answer to it carries, once it has been admitted (x-ratelimit-*, X-Cache).
    headers: dict[str, str] | None = None
    cache: str | None = None  # "hit", "miss" or "bypass" for a cached model's (docs/cache.md)
    saved: Usage | None = None  # a hit's: the stored answer's usage, which it did not spend
    trace: Trace | None = None  # when telemetry is configured (docs/telemetry.md)
    answered: Answered | None = None  # set for a traced request only (``Trace.end`` reads it)

    def __post_init__(self) -> None:
        self.path = self.path[:PATH_MAX]

    @property
    def error_type(self) -> str | None:
        """The OpenAI error type the client saw, if any."""
        return self.failure.error_type if self.failure is not None else None

    @property
    def cost_usd(self) -> float | None:
        """What its usage cost, in USD; None when unknown (no usage, or no price)."""
        if self.usage is None or self.price is None:
            return None
        return self.price.cost(self.usage)

    @property
    def duration(self) -> float:
        return self.ended - self.started

    @property
    def overhead(self) -> float:
        """Time spent in the proxy itself: the whole minus waiting on either side."""
        return max(0.0, self.duration - self.upstream_wait - self.client_wait)

    @property
    def status_class(self) -> str:
        return f"{self.status // 100}xx" if self.status else "none"
