"""A circuit breaker for one deployment: pure state, with the time passed in.

    closed ──(in the last ``window`` seconds, at least min_requests attempts, of which at
              least failure_threshold failed, and at least failure_rate)──▶ open
    open ──(cooldown elapsed: allow() lets one probe through)──▶ half_open
    half_open ──(a success)──▶ closed
    half_open ──(a failure)──▶ open, the cooldown restarting

A rate over a window, not N failures in a row: requests that fail by design (a prompt the
upstream answers with 500, sent again and again by one team) must not take the deployment away
from every team while others are being answered; and judged only over ``min_requests`` attempts
at the least, so that a handful of such requests at a quiet time (every attempt in the window
one team's failing prompt) cannot either. What counts as a failure is the caller's
decision (``balancer``): only what says the deployment is unhealthy. A 4xx answer is a success
here: the deployment is up and answering.

The window is kept in ``BUCKETS`` buckets of ``window / BUCKETS`` seconds each, so a record
costs a few steps and the window slides a bucket at a time.

The probe of a half-open breaker is a lease. It ends with ``success``, ``failure`` or
``release`` (the attempt was never made, or was cancelled before it could tell anything); a
lease that has not ended within ``cooldown`` is presumed lost and another probe is let through,
so that one forgotten ``release`` cannot keep a deployment out until the process restarts.
"""

from __future__ import annotations

import collections
from typing import Final, Literal

CircuitState = Literal["closed", "open", "half_open"]

BUCKETS: Final = 10


class CircuitBreaker:
    """One deployment's breaker; the caller keeps one per (model name, deployment index)."""

    __slots__ = (
        "_buckets",
        "_probing",
        "_since",
        "_width",
        "cooldown",
        "failure_rate",
        "failure_threshold",
        "min_requests",
        "state",
        "window",
    )

    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        window: float = 60.0,
        failure_rate: float = 0.5,
        min_requests: int = 20,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if not cooldown > 0:
            raise ValueError("cooldown must be positive")
        if not window > 0:
            raise ValueError("window must be positive")
        if not 0 < failure_rate <= 1:
            raise ValueError("failure_rate must be above 0 and at most 1")
        if min_requests < 1:
            raise ValueError("min_requests must be at least 1")
        self.failure_threshold = failure_threshold
        self.cooldown = cooldown
        self.window = window
        self.failure_rate = failure_rate
        self.min_requests = min_requests
        self._width = window / BUCKETS
        self.state: CircuitState = "closed"
        # While closed: [bucket number, successes, failures], oldest first.
        self._buckets: collections.deque[list[int]] = collections.deque()
        self._since = 0.0  # open: when it opened; half_open: when the probe was let through
        self._probing = False  # half_open: a probe is out and has not ended

    @property
    def failures(self) -> int:
        """The failures counted in the window as last seen."""
        return sum(bucket[2] for bucket in self._buckets)

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
        if self.state == "closed":
            self._bucket(now)[1] += 1
            return None
        if self.state == "open":
            return None  # a straggler that left before the breaker opened; the probe decides
        self.state, self._probing = "closed", False
        self._buckets.clear()
        return "closed"

    def failure(self, now: float) -> str | None:
        """Record an unhealthy answer; ``"open"`` if that opened the breaker."""
        if self.state == "open":
            # A straggler that left before the breaker opened: restarting the cooldown for
            # each one would keep a recovered deployment out for longer than configured.
            return None
        if self.state == "closed":
            self._bucket(now)[2] += 1
            succeeded = failed = 0
            for bucket in self._buckets:
                succeeded += bucket[1]
                failed += bucket[2]
            attempts = failed + succeeded
            if (
                failed < self.failure_threshold
                or attempts < self.min_requests
                or failed < self.failure_rate * attempts
            ):
                return None
        self.state, self._probing, self._since = "open", False, now
        self._buckets.clear()
        return "open"

    def _bucket(self, now: float) -> list[int]:
        """The bucket ``now`` falls in, the window's buckets older than ``window`` dropped."""
        number = int(now // self._width)
        buckets = self._buckets
        if buckets and buckets[-1][0] == number:
            return buckets[-1]
        while buckets and buckets[0][0] <= number - BUCKETS:
            buckets.popleft()
        bucket = [number, 0, 0]
        buckets.append(bucket)
        return bucket

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r}, failures={self.failures})"
