from __future__ import annotations

import copy

import pytest

from proxy.core.circuit import CircuitBreaker

# Each step: (call, now, what it returns, state after). Threshold 3, cooldown 10, window 10 (in
# buckets of 1 s), failure rate 0.5, judged from 3 attempts on.
Step = tuple[str, float, object, str]
OPEN_AT_2: list[Step] = [
    ("failure", 0, None, "closed"),
    ("failure", 1, None, "closed"),
    ("failure", 2, "open", "open"),
]
PROBE_AT_12: list[Step] = [*OPEN_AT_2, ("allow", 12, True, "half_open")]

SCRIPTS: dict[str, list[Step]] = {
    "a fresh breaker lets everything through": [
        ("allow", 0, True, "closed"),
        ("allow", 0, True, "closed"),
    ],
    "opens after threshold failures": OPEN_AT_2,
    "failures below the rate do not open": [
        *[("success", t, None, "closed") for t in (0, 1, 2, 3)],
        ("failure", 4, None, "closed"),
        ("failure", 5, None, "closed"),
        ("failure", 6, None, "closed"),  # 3 of 7: under half
        ("failure", 7, "open", "open"),  # 4 of 8: half
    ],
    "one request's failures among many answers do not open": [
        *[("success", t / 10, None, "closed") for t in range(50)],
        *[("failure", 5 + t / 10, None, "closed") for t in range(20)],
    ],
    "failures older than the window no longer count": [
        ("failure", 0, None, "closed"),
        ("failure", 2, None, "closed"),
        ("failure", 11, None, "closed"),  # the one at 0 has left the window
        ("failure", 11.5, "open", "open"),
    ],
    "successes older than the window no longer count": [
        *[("success", t, None, "closed") for t in (0, 1, 2, 3, 4, 5)],
        ("failure", 20, None, "closed"),
        ("failure", 20, None, "closed"),
        ("failure", 20, "open", "open"),
    ],
    "open refuses until the cooldown has passed": [
        *OPEN_AT_2,
        ("allow", 2, False, "open"),
        ("allow", 11.99, False, "open"),
        ("allow", 12, True, "half_open"),
    ],
    "exactly one probe while half-open": [
        *PROBE_AT_12,
        ("allow", 12, False, "half_open"),
        ("allow", 21.99, False, "half_open"),
    ],
    "a probe's success closes, with the count reset": [
        *PROBE_AT_12,
        ("success", 13, "closed", "closed"),
        ("allow", 13, True, "closed"),
        ("failure", 14, None, "closed"),
        ("failure", 15, None, "closed"),
        ("failure", 16, "open", "open"),
    ],
    "a probe's failure opens again and restarts the cooldown": [
        *PROBE_AT_12,
        ("failure", 13, "open", "open"),
        ("allow", 22.99, False, "open"),
        ("allow", 23, True, "half_open"),
    ],
    "a released probe lets the next one through": [
        *PROBE_AT_12,
        ("release", 12, None, "half_open"),
        ("allow", 12.5, True, "half_open"),
        ("allow", 12.5, False, "half_open"),
    ],
    "a probe that never ends is presumed lost after the cooldown": [
        *PROBE_AT_12,
        ("allow", 21.99, False, "half_open"),
        ("allow", 22, True, "half_open"),
        ("allow", 22, False, "half_open"),
    ],
    "a straggler's failure while open does not restart the cooldown": [
        *OPEN_AT_2,
        ("failure", 9, None, "open"),
        ("allow", 12, True, "half_open"),
    ],
    "a straggler's success while open does not close": [
        *OPEN_AT_2,
        ("success", 5, None, "open"),
        ("allow", 5, False, "open"),
    ],
    "release outside a probe changes nothing": [
        ("release", 0, None, "closed"),
        *OPEN_AT_2,
        ("release", 3, None, "open"),
        ("allow", 3, False, "open"),
    ],
    "available peeks without taking the probe": [
        *OPEN_AT_2,
        ("available", 11, False, "open"),
        ("available", 12, True, "open"),
        ("available", 12, True, "open"),
        ("allow", 12, True, "half_open"),
        ("available", 12, False, "half_open"),
    ],
}


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_breaker_transitions(script: list[Step]) -> None:
    breaker = CircuitBreaker(failure_threshold=3, cooldown=10.0, window=10.0, min_requests=3)
    for i, (call, now, returns, state) in enumerate(script):
        result: object = None
        if call == "release":
            breaker.release()
        else:
            result = getattr(breaker, call)(now)
        assert (result, breaker.state) == (returns, state), f"step {i}: {call}({now})"


def test_threshold_one_opens_on_the_first_failure() -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown=1.0, min_requests=1)
    assert breaker.failure(0.0) == "open"
    assert not breaker.allow(0.5)


@pytest.mark.parametrize(
    ("threshold", "cooldown"), [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -1.0), (1, float("nan"))]
)
def test_bad_settings_are_refused(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(threshold, cooldown)


def test_a_copy_is_independent() -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown=1.0, min_requests=1)
    breaker.failure(0.0)
    twin = copy.copy(breaker)
    assert twin.allow(5.0)
    assert (twin.state, breaker.state) == ("half_open", "open")
    assert breaker.allow(5.0)
    assert repr(breaker) == "CircuitBreaker(state='half_open', failures=0)"


@pytest.mark.parametrize(("window", "rate"), [(0.0, 0.5), (-1.0, 0.5), (1.0, 0.0), (1.0, 1.5)])
def test_bad_window_settings_are_refused(window: float, rate: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(1, 1.0, window, rate)


def test_a_handful_of_failures_at_a_quiet_time_does_not_open() -> None:
    """Every attempt in the window one team's failing prompt: below min_requests, the rate
    says nothing yet (issue: one team opening the circuit for every team)."""
    breaker = CircuitBreaker(failure_threshold=5, cooldown=10.0, min_requests=20)
    for t in range(19):
        assert breaker.failure(t / 10) is None
    assert breaker.state == "closed"
    assert breaker.failure(2.0) == "open"  # 20 attempts, all failed: the deployment is down


def test_min_requests_must_be_positive() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(1, 1.0, min_requests=0)
