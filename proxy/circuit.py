"""A circuit breaker for one deployment: pure state, with the time passed in.

    closed ──(failure_threshold consecutive failures)──▶ open
    open ──(cooldown elapsed: allow() lets one probe through)──▶ half_open
    half_open ──(a success)──▶ closed
    half_open ──(a failure)──▶ open, the cooldown restarting

What counts as a failure is the caller's decision (``balancer.retryable``): only what says the
deployment is unhealthy. A 4xx answer is a success here: the deployment is up and answering.

The probe of a half-open breaker is a lease. It ends with ``success``, ``failure`` or
``release`` (the attempt was never made, or was cancelled before it could tell anything); a
lease that has not ended within ``cooldown`` is presumed lost and another probe is let through,
so that one forgotten ``release`` cannot keep a deployment out until the process restarts.
"""

from __future__ import annotations

from typing import Literal

CircuitState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """One deployment's breaker; the caller keeps one per (model name, deployment index)."""

    __slots__ = ("_probing", "_since", "cooldown", "failure_threshold", "failures", "state")

    def __init__(self, failure_threshold: int = 5, cooldown: float = 30.0) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if not cooldown > 0:
            raise ValueError("cooldown must be positive")
        self.failure_threshold = failure_threshold
        self.cooldown = cooldown
        self.state: CircuitState = "closed"
        self.failures = 0  # consecutive, while closed
        self._since = 0.0  # open: when it opened; half_open: when the probe was let through
        self._probing = False  # half_open: a probe is out and has not ended

    def available(self, now: float) -> bool:
        """Whether ``allow(now)`` would say yes; changes nothing."""
        if self.state == "closed":
            return True
        if self.state == "half_open" and not self._probing:
            return True
        return now - self._since >= self.cooldown

    def allow(self, now: float) -> bool:
        """Whether a request may go to the deployment now. Past an open breaker's cooldown
        this lets exactly one probe through, and refuses others until the probe ends."""
        if not self.available(now):
            return False
        if self.state != "closed":
            self.state, self._probing, self._since = "half_open", True, now
        return True

    def release(self) -> None:
        """End a probe that told nothing: the attempt was never made, or was cancelled."""
        self._probing = False

    def success(self, now: float) -> str | None:
        """Record a healthy answer; ``"closed"`` if that closed the breaker."""
        self.failures = 0
        if self.state != "half_open":
            # Open: a straggler that left before the breaker opened; the probe decides.
            return None
        self.state, self._probing = "closed", False
        return "closed"

    def failure(self, now: float) -> str | None:
        """Record an unhealthy answer; ``"open"`` if that opened the breaker."""
        if self.state == "open":
            # A straggler that left before the breaker opened: restarting the cooldown for
            # each one would keep a recovered deployment out for longer than configured.
            return None
        self.failures += 1
        if self.state == "closed" and self.failures < self.failure_threshold:
            return None
        self.state, self._probing, self._since, self.failures = "open", False, now, 0
        return "open"

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r}, failures={self.failures})"
