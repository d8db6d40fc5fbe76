"""What the gateway holds: the runtime of one configuration, and who observes requests.

``Runtime`` is everything derived from one configuration; a reload builds a new one and swaps it
in with one assignment, so a request sees one configuration from start to end. Circuit breakers
are the one piece of state that outlives a reload: a deployment that is still configured the
same keeps its breaker (its health does not change because a file did).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from proxy.core.auth import KeyRing
from proxy.core.circuit import CircuitBreaker
from proxy.core.config import Config, Deployment, Model, Provider, Routing
from proxy.core.exchange import Exchange, Trace
from proxy.core.prices import Price
from proxy.core.redact import Redactor
from proxy.core.routing import ModelTable
from proxy.http.cloud import Signer, signer_for
from proxy.http.deadline import Deadlines
from proxy.http.limits.limiter import Limiter, Shown
from proxy.http.pipe import Relays
from proxy.http.upstream import Target, UpstreamClient, target_for

if TYPE_CHECKING:  # it tells the observers of what it serves: it imports this module
    from proxy.http.cache.service import ResponseCache

# (model name, provider, upstream model): a deployment, as configured.
DeploymentKey = tuple[str, str, str]


class Observer:
    """Sees requests and the proxy's own events (metrics, the access log); each hook is a
    no-op here, so an observer implements only what it cares about."""

    def started(self, exchange: Exchange) -> None:
        """An API request arrived."""

    def stream_started(self, exchange: Exchange) -> None:
        """A stream's response headers are going out: it is in flight until ``finished``."""

    def finished(self, exchange: Exchange) -> None:
        """An API request ended, whatever the way."""

    def circuit_changed(self, model: str, deployment: Deployment, state: str) -> None:
        """A deployment's circuit breaker moved to ``state`` (closed, half_open, open)."""

    def reloaded(self, ok: bool) -> None:
        """A configuration reload was applied (``ok``) or refused."""

    def collected(self, full: bool, seconds: float) -> None:
        """The worker's cycle collector ran (``proxy.ops.collector``), in full or its young
        generations, and held the loop for ``seconds``."""

    def lines_dropped(self, count: int) -> None:
        """``count`` lines of log (access or diagnostic) were dropped: the worker's stderr was
        not being read (``proxy.ops.outlet``)."""

    def spans_dropped(self, count: int) -> None:
        """``count`` spans were lost on their way to the OpenTelemetry collector (its queue
        was full, or an export failed: ``proxy.ops.telemetry``)."""

    def state_changed(self, up: bool) -> None:
        """The limits' state store (Redis, or the supervisor's) answers again, or failed."""

    def state_failed(self, operation: str) -> None:
        """A call to the state store failed (reserve, settle, read)."""

    def settlements_dropped(self, count: int) -> None:
        """``count`` settlements were lost: the store was down too long, or may have applied
        them already."""

    def limits_seen(self, shown: Shown) -> None:
        """The teams' limits as they stand now (``proxy.core.limits.view``), read every
        ``limiter.GAUGE_SECONDS``."""

    def flush(self) -> None:
        """Write out what is held now (a scrape of /metrics is about to read it)."""

    def close(self) -> None:
        """The worker is stopping, its requests are over: write out anything still held."""


class Tracing(Protocol):
    """Starts the trace of each API request (``proxy.ops.telemetry``, when configured)."""

    def start(self, method: str, headers: Mapping[str, str], exchange: Exchange) -> Trace:
        """The request's SERVER span, continuing the ``traceparent`` in ``headers``."""


def deployment_key(model: Model, deployment: Deployment) -> DeploymentKey:
    return (model.name, deployment.provider, deployment.model)


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """What admission reserves for a request to one model (docs/limits.md)."""

    # The dearest of its deployments' prices, by each kind of token (None: one has none).
    price: Price | None
    # The longest a request may take: every attempt's total timeout, and the waits between.
    lease_seconds: float


def limit_plan(config: Config, model: Model) -> LimitPlan:
    prices = [config.prices.get(deployment_key(model, d)) for d in model.deployments]
    price = None
    if prices and all(p is not None for p in prices):
        known = [p for p in prices if p is not None]
        price = Price(
            max(p.input for p in known),
            max(p.cached_input for p in known),
            max(p.output for p in known),
        )
    policy = config.routing.policy
    longest = max(config.providers[d.provider].timeouts.total for d in model.deployments)
    return LimitPlan(price, longest * policy.attempts + policy.backoff_max * (policy.attempts - 1))


@dataclass(frozen=True, slots=True)
class Runtime:
    """Everything derived from one configuration."""

    config: Config
    keyring: KeyRing
    models: ModelTable
    targets: Mapping[str, Target]
    breakers: Mapping[str, tuple[CircuitBreaker, ...]]  # per model, aligned with its deployments
    loaded_at: int
    rng: random.Random = field(default_factory=random.Random)
    redact: Redactor = field(default_factory=lambda: Redactor(()))
    plans: Mapping[str, LimitPlan] = field(default_factory=dict)  # per model

    @classmethod
    def from_config(cls, config: Config, previous: Runtime | None = None) -> Runtime:
        deployed: dict[str, list[Deployment]] = {name: [] for name in config.providers}
        for model in config.models.values():
            for deployment in model.deployments:
                deployed[deployment.provider].append(deployment)
        targets = {
            name: target_for(provider, deployed[name], _signer(provider, previous))
            for name, provider in config.providers.items()
        }
        kept: dict[DeploymentKey, CircuitBreaker] = {}
        if previous is not None:
            for name, model in previous.config.models.items():
                for deployment, breaker in zip(
                    model.deployments, previous.breakers[name], strict=True
                ):
                    kept[deployment_key(model, deployment)] = breaker
        routing = config.routing
        breakers = {
            name: tuple(
                _breaker(kept.get(deployment_key(model, deployment)), routing)
                for deployment in model.deployments
            )
            for name, model in config.models.items()
        }
        rng = previous.rng if previous is not None else random.Random()
        return cls(
            config,
            KeyRing(config.teams),
            ModelTable(config),
            targets,
            breakers,
            int(time.time()),
            rng,
            Redactor(config.secrets),
            {name: limit_plan(config, model) for name, model in config.models.items()},
        )


def _signer(provider: Provider, previous: Runtime | None) -> Signer | None:
    """The provider's signer, the one before a reload if its identity is unchanged: its
    credentials stay cached rather than fetched again by every worker at once."""
    if provider.cloud is None:
        return None
    if previous is not None:
        before = previous.config.providers.get(provider.name)
        target = previous.targets.get(provider.name)
        if (
            before is not None
            and target is not None
            and (before.cloud, before.api_key) == (provider.cloud, provider.api_key)
        ):
            return target.signer
    return signer_for(provider)


def _breaker(kept: CircuitBreaker | None, routing: Routing) -> CircuitBreaker:
    """The deployment's breaker kept across a reload, unless its settings changed."""
    if (
        kept is not None
        and kept.failure_threshold == routing.circuit_failures
        and kept.cooldown == routing.circuit_cooldown
        and kept.window == routing.circuit_window
        and kept.failure_rate == routing.circuit_failure_rate
        and kept.min_requests == routing.circuit_min_requests
    ):
        return kept
    return CircuitBreaker(
        routing.circuit_failures,
        routing.circuit_cooldown,
        routing.circuit_window,
        routing.circuit_failure_rate,
        routing.circuit_min_requests,
    )


class Collecting:
    """The bytes that a worker's answers collected from streams hold at once (a request asked
    for a whole answer, its upstream streamed): bounded as a whole, so that endless streams
    cannot take the worker's memory however many requests ask for them."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = 0


@dataclass(slots=True)
class State:
    runtime: Runtime
    observers: Sequence[Observer] = ()
    client: UpstreamClient | None = None
    deadlines: Deadlines | None = None  # the running loop's, from start to close
    relays: Relays | None = None  # the running loop's streams with data to relay, likewise
    limiter: Limiter | None = None  # from the gateway's start to its close
    cache: ResponseCache | None = None  # likewise, when the configuration has a cache
    tracing: Tracing | None = None  # None: nothing is traced, nothing paid
    ready: bool = False
    collecting: Collecting = field(default_factory=Collecting)
    # A reload's reading of the cloud identities it added (``warm``), held until done.
    warming: asyncio.Task[None] | None = None
