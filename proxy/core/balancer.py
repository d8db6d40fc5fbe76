"""Which deployment a request tries next, whether it may try again, and how long it waits.

Pure: the time and a random source ``rand() -> [0, 1)`` are passed in; the waiting, the
sending and the breakers' home (one ``CircuitBreaker`` per model deployment, on the app) are
the caller's. One request's loop, up to the first byte the client receives:

    plan = AttemptPlan(model, breakers, policy, rng.random)
    while (attempt := plan.next(loop.time())) is not None:
        try:
            upstream = await send(attempt.deployment)
        except ProxyError as exc:
            last_error = exc
            plan.report(loop.time(), exc)          # a transition name, for the log and metrics
            delay = plan.retry_delay(loop.time(), exc)
            if delay is None:
                raise
            await asyncio.sleep(delay)
            continue
        except BaseException:
            plan.release()                         # cancelled: the attempt tells nothing
            raise
        plan.report(loop.time())
        return await relay(upstream)               # from here on nothing is retried
    raise last_error or ServiceUnavailable(...)    # no breaker let (another) attempt through

The plan is lazy because a half-open breaker lets exactly one probe through: asking every
breaker up front would spend probes on attempts that are never made (the first one succeeds).
``next`` asks a deployment's breaker only when an attempt there is about to be made.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from proxy.core.circuit import CircuitBreaker
from proxy.core.config import Deployment, Model, RetryPolicy
from proxy.core.errors import (
    ProxyError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)

__all__ = [
    "Attempt",
    "AttemptPlan",
    "CircuitBreaker",
    "RetryPolicy",
    "backoff_delay",
    "plan_attempts",
    "retryable",
]


def retryable(exc: ProxyError) -> bool:
    """Whether ``exc``, raised before the client received a byte, is worth another attempt.

    Also what counts against a deployment's health. An upstream that broke the connection,
    kept silent, was overloaded (429, 5xx) or timed out reading the request (408) may answer
    on another try or at another deployment. So may one that answered garbage (an HTML error
    page, broken JSON, a cut stream): that is a broken deployment or a proxy in front of it,
    not a bad request, because a bad request gets a 4xx. Any other 4xx would be refused again.
    """
    if isinstance(exc, UpstreamStatusError):
        status = exc.upstream_status
        return status in (408, 429) or status >= 500
    return isinstance(exc, UpstreamConnectError | UpstreamTimeout | UpstreamProtocolError)


def backoff_delay(
    policy: RetryPolicy, attempt: int, retry_after: float | None, rand: Callable[[], float]
) -> float:
    """Seconds to wait before the next attempt, ``attempt`` attempts having been made.

    Full jitter (uniform over [0, min(max, base * 2**(attempt-1))]) so that requests that
    failed together do not come back together; never less than ``retry_after`` when that is
    at most ``policy.retry_after_max``; 0 when it is longer, which is not waited for.
    """
    if retry_after is not None and retry_after > policy.retry_after_max:
        return 0.0
    # 2.0 ** 1024 raises OverflowError; a product too large for a float is inf, which min cuts.
    ceiling = min(policy.backoff_max, policy.backoff_base * 2.0 ** min(attempt - 1, 1023))
    delay = rand() * ceiling
    return delay if retry_after is None else max(delay, retry_after)


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class Attempt:
    index: int  # the deployment's index in model.deployments
    deployment: Deployment
    number: int = 1  # 1 for the request's first upstream attempt
    probe: bool = False  # the half-open trial of the deployment's breaker


class AttemptPlan:
    """The attempts of one request, handed out one at a time.

    Deployments are tried by priority, lowest first; within a priority in a random order
    weighted by ``weight`` (Efraimidis and Spirakis, "Weighted random sampling with a
    reservoir", 2006: sort by ``rand() ** (1 / weight)``, so the first is deployment i with
    probability w_i / sum w, the second likewise among the rest, and so on). A deployment whose
    breaker refuses is passed over. Past the last deployment the order starts again, so one
    deployment may be tried more than once, up to ``policy.attempts`` attempts in all.
    """

    def __init__(
        self,
        model: Model,
        breakers: Sequence[CircuitBreaker],
        policy: RetryPolicy,
        rand: Callable[[], float],
    ) -> None:
        if len(breakers) != len(model.deployments):
            raise ValueError("one breaker per deployment")
        # Weights only order several deployments (the configuration has made them positive).
        if len(model.deployments) > 1 and not all(d.weight > 0 for d in model.deployments):
            raise ValueError("deployment weights must be positive")
        self.model = model
        self.policy = policy
        self._breakers = breakers
        self._rand = rand
        self._order = _ordered(model.deployments, rand)
        self._cursor = 0  # position in the endless repetition of _order
        self._made = 0
        self._current: Attempt | None = None
        self._pending = False  # _current has a probe that has not ended
        self._not_before: dict[int, float] = {}  # deployment index -> end of its Retry-After
        self._excluded: set[int] = set()  # asked for a longer wait than the policy allows

    @property
    def made(self) -> int:
        """How many attempts were handed out."""
        return self._made

    def next(self, now: float) -> Attempt | None:
        """The attempt to make now, or None when no attempt is left or no breaker allows one.

        Takes the probe of a half-open breaker, which ``report`` or ``release`` gives back."""
        found = self._find(now, take=True)
        if found is None:
            return None
        index, probe = found
        self._made += 1
        self._current = Attempt(index, self.model.deployments[index], self._made, probe)
        self._pending = probe
        return self._current

    def report(self, now: float, error: ProxyError | None = None) -> str | None:
        """Record on its breaker how the current attempt went; the transition, if any.

        None (an answer) and an upstream 4xx are successes; a ``retryable`` error is a
        failure, unless it does not blame the deployment (``blames_deployment``: a generation
        longer than a timeout, a provider's connections all in use); any other error (the
        client's own) says nothing about the deployment."""
        if self._current is None:
            return None
        breaker = self._breakers[self._current.index]
        pending, self._pending = self._pending, False
        if isinstance(error, UpstreamError) and not error.blames_deployment:
            if pending:
                breaker.release()  # a probe that told nothing of the deployment
            return None
        if error is None or (isinstance(error, UpstreamStatusError) and not retryable(error)):
            return breaker.success(now)
        if retryable(error):
            return breaker.failure(now)
        if pending:
            breaker.release()
        return None

    def pass_over(self, now: float) -> bool:
        """The current deployment cannot take this request at all (its API cannot say what
        the request asks): leave it out of this plan, give its attempt back, and tell whether
        another deployment is left to try. It says nothing of the deployment's health."""
        if self._current is None:
            return False
        self.release()
        self._excluded.add(self._current.index)
        self._made -= 1
        self._current = None
        return self._find(now, take=False) is not None

    def release(self) -> None:
        """The current attempt ended without an outcome (cancelled): give back its probe."""
        if self._current is not None and self._pending:
            self._breakers[self._current.index].release()
        self._pending = False

    def retry_delay(self, now: float, error: ProxyError) -> float | None:
        """Seconds to wait before ``next``, after ``error`` ended the current attempt before
        the client received a byte; None when ``error`` is final: not retryable, raised midway
        through an answer, no attempt left, or no breaker would allow one. Call it after
        ``report``.

        A Retry-After is honoured when the next attempt goes back to the deployment that sent
        it; one longer than ``policy.retry_after_max`` takes that deployment out of this plan,
        and the next one is tried at once."""
        if self._current is None or not retryable(error):
            return None
        if isinstance(error, UpstreamError) and error.midway:
            return None
        index = self._current.index
        retry_after = error.retry_after if isinstance(error, UpstreamStatusError) else None
        if retry_after is not None and retry_after > self.policy.retry_after_max:
            self._excluded.add(index)
            return 0.0 if self._find(now, take=False) is not None else None
        if retry_after is not None:
            self._not_before[index] = now + retry_after
        found = self._find(now, take=False)
        if found is None:
            return None
        wait = self._not_before.get(found[0], now) - now
        return backoff_delay(self.policy, self._made, wait if wait > 0 else None, self._rand)

    def _find(self, now: float, *, take: bool) -> tuple[int, bool] | None:
        """The next deployment whose breaker allows an attempt, with whether it is a probe;
        ``take`` moves past it and takes its probe, else nothing changes."""
        if self._made >= self.policy.attempts:
            return None
        count = len(self._order)
        for step in range(count):
            index = self._order[(self._cursor + step) % count]
            breaker = self._breakers[index]
            if index in self._excluded or not breaker.available(now):
                continue
            probe = breaker.state != "closed"
            if take:
                breaker.allow(now)
                self._cursor += step + 1
            return index, probe
        return None


def plan_attempts(
    model: Model,
    breakers: Sequence[CircuitBreaker],
    now: float,
    rand: Callable[[], float],
    attempts: int,
) -> list[Attempt]:
    """Every attempt a request starting at ``now`` would make if none of them reported back.

    A preview for tests and logs: it works on copies of the breakers and takes no probe. The
    request path uses ``AttemptPlan``."""
    copies = [copy.copy(breaker) for breaker in breakers]
    plan = AttemptPlan(model, copies, RetryPolicy(attempts=attempts), rand)
    planned = []
    while (attempt := plan.next(now)) is not None:
        planned.append(attempt)
    return planned


def _ordered(deployments: Sequence[Deployment], rand: Callable[[], float]) -> tuple[int, ...]:
    if len(deployments) == 1:
        return _ONLY  # the usual model: nothing to draw
    # log(u) / w orders as u ** (1 / w) does, without underflowing to 0 for small weights.
    keys = [_log(rand()) / d.weight for d in deployments]
    return tuple(sorted(range(len(deployments)), key=lambda i: (deployments[i].priority, -keys[i])))


_ONLY: Final = (0,)


def _log(u: float) -> float:
    return math.log(u) if u > 0 else -math.inf
