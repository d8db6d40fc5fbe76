from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.balancer import (
    Attempt,
    AttemptPlan,
    RetryPolicy,
    backoff_delay,
    plan_attempts,
    retryable,
)
from proxy.core.circuit import CircuitBreaker
from proxy.core.config import Deployment, Model
from proxy.core.errors import (
    AuthenticationFailed,
    BodyTooLarge,
    InvalidRequest,
    ModelNotFound,
    PermissionDenied,
    ProxyError,
    RateLimited,
    ServiceUnavailable,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)

NOW = 100.0
COOLDOWN = 10.0


def model(*specs: tuple[float, int]) -> Model:
    """A model whose deployment i is (provider p{i}, model m{i}) with (weight, priority)."""
    return Model("m", tuple(Deployment(f"p{i}", f"m{i}", w, p) for i, (w, p) in enumerate(specs)))


def ordered(n: int) -> Model:
    """n deployments whose priorities fix the order 0, 1, 2, ..."""
    return model(*((1.0, i) for i in range(n)))


def breaker(state: str) -> CircuitBreaker:
    """A breaker (threshold 1, cooldown 10) in ``state`` as seen at NOW."""
    b = CircuitBreaker(failure_threshold=1, cooldown=COOLDOWN, min_requests=1)
    if state == "open":  # opened a second ago
        b.failure(NOW - 1)
    elif state == "cooled":  # open, its cooldown over: the next allow() is a probe
        b.failure(NOW - COOLDOWN - 1)
    elif state in ("probing", "released"):  # half-open, a probe let through a second ago
        b.failure(NOW - COOLDOWN - 2)
        b.allow(NOW - 1)
        if state == "released":
            b.release()
    else:
        assert state == "closed"
    return b


def breakers(*states: str) -> list[CircuitBreaker]:
    return [breaker(s) for s in states]


def scripted(*values: float) -> Callable[[], float]:
    it: Iterator[float] = iter(values)
    return lambda: next(it)


def status(code: int, retry_after: float | None = None) -> UpstreamStatusError:
    return UpstreamStatusError("upstream said no", upstream_status=code, retry_after=retry_after)


# --- retryable ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (UpstreamConnectError("refused"), True),
        (UpstreamTimeout("silent"), True),
        (UpstreamProtocolError("an HTML page"), True),
        *((status(code), True) for code in (408, 429, 500, 502, 503, 504, 529, 599)),
        *((status(code), False) for code in (400, 401, 403, 404, 409, 413, 422, 451)),
        (UpstreamError("unknown"), False),
        (InvalidRequest("bad"), False),
        (BodyTooLarge("big"), False),
        (ModelNotFound("x"), False),
        (AuthenticationFailed("who"), False),
        (PermissionDenied("no"), False),
        (RateLimited("slow down"), False),
        (ServiceUnavailable("none"), False),
        (ProxyError("bug"), False),
    ],
    ids=lambda v: type(v).__name__ + str(getattr(v, "upstream_status", "")),
)
def test_retryable(exc: ProxyError, expected: bool) -> None:
    assert retryable(exc) is expected


# --- backoff_delay -----------------------------------------------------------------------------

DEFAULT = RetryPolicy()


@pytest.mark.parametrize(
    ("policy", "attempt", "retry_after", "rand", "expected"),
    [
        (DEFAULT, 1, None, 0.5, 0.125),
        (DEFAULT, 1, None, 0.0, 0.0),
        (DEFAULT, 2, None, 0.5, 0.25),
        (DEFAULT, 3, None, 0.5, 0.5),
        (DEFAULT, 6, None, 0.5, 4.0),  # 0.25 * 32 = 8: the cap reached
        (DEFAULT, 7, None, 0.5, 4.0),  # capped
        (DEFAULT, 5000, None, 0.5, 4.0),  # 2 ** 4999 would overflow a float
        (DEFAULT, 1, 2.0, 0.5, 2.0),  # Retry-After is a floor
        (DEFAULT, 6, 1.0, 0.5, 4.0),  # ... under which the jitter may still land
        (DEFAULT, 1, 30.0, 0.5, 30.0),  # at retry_after_max: waited for
        (DEFAULT, 1, 30.5, 0.5, 0.0),  # beyond it: not waited for at all
        (DEFAULT, 1, 0.0, 0.5, 0.125),
        (RetryPolicy(backoff_base=0.0), 4, None, 0.9, 0.0),
        (RetryPolicy(backoff_base=1.0, backoff_max=0.5), 1, None, 1.0, 0.5),
        (RetryPolicy(retry_after_max=0.0), 1, 0.0, 0.5, 0.125),
        (RetryPolicy(retry_after_max=0.0), 1, 1.0, 0.5, 0.0),
    ],
)
def test_backoff_delay(
    policy: RetryPolicy, attempt: int, retry_after: float | None, rand: float, expected: float
) -> None:
    assert backoff_delay(policy, attempt, retry_after, lambda: rand) == pytest.approx(expected)


@settings(database=None)
@given(
    attempt=st.integers(1, 2000),
    u=st.floats(0.0, 1.0, exclude_max=True),
    base=st.floats(0.0, 100.0),
    cap=st.floats(0.0, 100.0),
    retry_after=st.none() | st.floats(0.0, 60.0),
)
def test_backoff_delay_bounds(
    attempt: int, u: float, base: float, cap: float, retry_after: float | None
) -> None:
    policy = RetryPolicy(backoff_base=base, backoff_max=cap)
    delay = backoff_delay(policy, attempt, retry_after, lambda: u)
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 1023))
    if retry_after is not None and retry_after > policy.retry_after_max:
        assert delay == 0.0
    elif retry_after is not None:
        assert retry_after <= delay <= max(ceiling, retry_after)
    else:
        assert 0.0 <= delay <= ceiling


# --- the order of attempts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "rands", "expected"),
    [
        # Priorities decide, whatever the draw.
        ([(1, 1), (1, 0), (1, 2)], (0.9, 0.1, 0.5), [1, 0, 2]),
        ([(1, 1), (1, 0), (1, 2)], (0.1, 0.9, 0.5), [1, 0, 2]),
        ([(5, 0), (1, -1)], (0.99, 0.01), [1, 0]),
        # Within a priority the larger rand() ** (1 / weight) goes first.
        ([(1, 0), (1, 0)], (0.2, 0.8), [1, 0]),
        ([(1, 0), (1, 0)], (0.8, 0.2), [0, 1]),
        ([(1, 0), (100, 0)], (0.9, 0.5), [1, 0]),  # 0.5 ** 0.01 > 0.9
        ([(1, 0), (2, 0), (1, 1)], (0.9, 0.5, 0.99), [0, 1, 2]),  # 0.9 > 0.5 ** 0.5
        ([(1, 0), (1, 0)], (0.0, 0.0), [0, 1]),  # a tie keeps the configured order
        ([(1e-300, 0), (1e-300, 0)], (0.4, 0.6), [1, 0]),  # no underflow to a tie
    ],
)
def test_order(
    specs: list[tuple[float, int]], rands: tuple[float, ...], expected: list[int]
) -> None:
    m = model(*specs)
    planned = plan_attempts(
        m, breakers(*["closed"] * len(specs)), NOW, scripted(*rands), len(specs)
    )
    assert [a.index for a in planned] == expected
    assert [a.deployment for a in planned] == [m.deployments[i] for i in expected]
    assert [a.number for a in planned] == list(range(1, len(specs) + 1))


@pytest.mark.parametrize(
    "specs",
    [
        [(1, 0), (1, 0)],
        [(1, 0), (2, 0), (7, 0)],
        [(0.5, 0), (0.5, 0), (3, 0)],
        [(1, 0), (3, 0), (50, 1)],  # the priority-1 deployment is never first, however heavy
    ],
)
def test_weighted_spread(specs: list[tuple[float, int]]) -> None:
    m, rng, plans = model(*specs), random.Random(20240605), 20_000
    first = Counter(
        plan_attempts(m, breakers(*["closed"] * len(specs)), NOW, rng.random, 1)[0].index
        for _ in range(plans)
    )
    top = min(p for _, p in specs)
    total = sum(w for w, p in specs if p == top)
    for i, (w, p) in enumerate(specs):
        share = w / total if p == top else 0.0
        assert first[i] / plans == pytest.approx(share, abs=0.015), (i, first)


def test_weighted_spread_of_second_choices() -> None:
    # Sampling without replacement: after 0 (weight 1) goes first, 1 and 2 follow 2:7.
    m, rng = model((1, 0), (2, 0), (7, 0)), random.Random(7)
    seconds = Counter(
        plan[1].index
        for plan in (
            plan_attempts(m, breakers(*["closed"] * 3), NOW, rng.random, 3) for _ in range(40_000)
        )
        if plan[0].index == 0
    )
    assert seconds[1] / (seconds[1] + seconds[2]) == pytest.approx(2 / 9, abs=0.03)


@pytest.mark.parametrize(
    ("states", "attempts", "expected"),
    [
        (["closed", "open", "closed"], 3, [(0, False), (2, False), (0, False)]),
        (["open", "closed", "open"], 3, [(1, False), (1, False), (1, False)]),
        (["open", "open"], 3, []),
        (["probing", "open"], 3, []),
        (["open", "cooled"], 3, [(1, True)]),  # one probe, not one per pass
        (["cooled", "closed"], 3, [(0, True), (1, False), (1, False)]),
        (["released", "closed"], 2, [(0, True), (1, False)]),
        (["probing", "closed"], 2, [(1, False), (1, False)]),
        (["closed"], 1, [(0, False)]),
        (["closed"], 4, [(0, False)] * 4),
        (["closed", "closed"], 5, [(0, False), (1, False), (0, False), (1, False), (0, False)]),
        (["closed", "closed", "closed"], 2, [(0, False), (1, False)]),
    ],
)
def test_plan_skips_refusing_breakers_and_cycles(
    states: list[str], attempts: int, expected: list[tuple[int, bool]]
) -> None:
    real = breakers(*states)
    planned = plan_attempts(ordered(len(states)), real, NOW, random.random, attempts)
    assert [(a.index, a.probe) for a in planned] == expected
    # A preview takes no probe.
    assert [b.state for b in real] == [breaker(s).state for s in states]
    assert [b.available(NOW) for b in real] == [breaker(s).available(NOW) for s in states]


# --- a request's plan, step by step ------------------------------------------------------------


def plan_for(
    states: list[str], attempts: int = 3, rand: Callable[[], float] = lambda: 0.5
) -> tuple[AttemptPlan, list[CircuitBreaker]]:
    real = breakers(*states)
    return AttemptPlan(ordered(len(states)), real, RetryPolicy(attempts=attempts), rand), real


def test_an_unused_probe_is_not_taken() -> None:
    plan, real = plan_for(["closed", "cooled"])
    assert plan.next(NOW) == Attempt(0, Deployment("p0", "m0", 1.0, 0), 1, False)
    assert plan.report(NOW + 1) is None
    # The request is done; the cooled breaker still has its probe for the next request.
    assert real[1].state == "open"
    assert real[1].allow(NOW + 1)


def test_a_probe_that_answers_closes_its_breaker() -> None:
    plan, real = plan_for(["cooled", "closed"])
    attempt = plan.next(NOW)
    assert attempt is not None and (attempt.index, attempt.probe) == (0, True)
    assert [b.state for b in real] == ["half_open", "closed"]
    assert plan.report(NOW + 1) == "closed"
    assert [b.state for b in real] == ["closed", "closed"]


@pytest.mark.parametrize(
    ("error", "transition", "state_after"),
    [
        (status(400), "closed", "closed"),  # a 4xx: the deployment is up
        (status(503), "open", "open"),
        (UpstreamTimeout("slow"), "open", "open"),
        (InvalidRequest("the client's own"), None, "half_open"),  # says nothing: given back
    ],
)
def test_a_probe_reports_its_outcome(
    error: ProxyError, transition: str | None, state_after: str
) -> None:
    plan, real = plan_for(["cooled"])
    assert plan.next(NOW) is not None
    assert plan.report(NOW + 1, error) == transition
    assert real[0].state == state_after
    assert real[0].available(NOW + 1) is (state_after != "open")


def test_a_cancelled_probe_is_given_back() -> None:
    plan, real = plan_for(["cooled"])
    assert plan.next(NOW) is not None
    assert not real[0].available(NOW)
    plan.release()
    assert real[0].allow(NOW)  # another request's probe
    plan.release()  # twice, or after someone else took the probe: not theirs to give back
    assert not real[0].available(NOW)


def test_release_of_a_closed_attempt_changes_nothing() -> None:
    plan, real = plan_for(["closed"])
    plan.release()  # nothing handed out yet
    assert plan.next(NOW) is not None
    plan.release()
    assert real[0].state == "closed"
    assert plan.report(NOW) is None


def test_failover_to_the_next_priority() -> None:
    plan, real = plan_for(["closed", "closed"], rand=lambda: 0.5)
    first = plan.next(NOW)
    assert first is not None and first.index == 0
    error = status(502)
    assert plan.report(NOW, error) == "open"  # threshold 1
    assert [b.state for b in real] == ["open", "closed"]
    assert plan.retry_delay(NOW, error) == 0.125  # 0.5 * 0.25
    second = plan.next(NOW + 0.125)
    assert second is not None and (second.index, second.number) == (1, 2)
    assert plan.made == 2


def test_a_breaker_that_opens_during_the_request_is_skipped() -> None:
    real = [CircuitBreaker(1, min_requests=1), CircuitBreaker(5, min_requests=1)]
    plan = AttemptPlan(ordered(2), real, RetryPolicy(attempts=4), lambda: 0.5)
    tried = []
    while (attempt := plan.next(NOW)) is not None:
        tried.append(attempt.index)
        error = UpstreamConnectError("refused")
        plan.report(NOW, error)
        if plan.retry_delay(NOW, error) is None:
            break
    # 0 opened at its first failure; 1 has not reached its threshold, so it is tried again.
    assert tried == [0, 1, 1, 1]
    assert [b.state for b in real] == ["open", "closed"]
    assert real[1].failures == 3


@pytest.mark.parametrize(
    ("error", "attempts", "expected"),
    [
        (status(400), 3, None),  # not retryable
        (status(404), 3, None),
        (InvalidRequest("bad"), 3, None),
        (status(503), 1, None),  # no attempt left
        (status(503), 2, 0.125),
    ],
)
def test_retry_delay_is_none_when_the_error_is_final(
    error: ProxyError, attempts: int, expected: float | None
) -> None:
    plan, _ = plan_for(["closed"], attempts=attempts)
    assert plan.next(NOW) is not None
    assert plan.retry_delay(NOW, error) == expected


def test_retry_delay_before_any_attempt() -> None:
    plan, _ = plan_for(["closed"])
    assert plan.retry_delay(NOW, status(503)) is None


def test_retry_delay_is_none_when_every_breaker_refuses() -> None:
    plan, _ = plan_for(["closed", "open"])
    assert plan.next(NOW) is not None
    error = status(503)
    assert plan.report(NOW, error) == "open"
    assert plan.retry_delay(NOW, error) is None
    assert plan.next(NOW) is None


@pytest.mark.parametrize(
    ("states", "retry_after", "expected_delay", "expected_next"),
    [
        (["closed"], 5.0, 5.0, 0),  # the same deployment again: wait as asked
        (["closed"], 30.0, 30.0, 0),
        (["closed"], 31.0, None, None),  # longer than retry_after_max: the error is final
        (["closed", "closed"], 31.0, 0.0, 1),  # ... or the next deployment, at once
        (["closed", "closed"], 5.0, 0.125, 1),  # another deployment need not wait for it
        (["closed", "open"], 5.0, 5.0, 0),
    ],
)
def test_retry_after(
    states: list[str],
    retry_after: float,
    expected_delay: float | None,
    expected_next: int | None,
) -> None:
    plan, _ = plan_for(states, attempts=4)
    assert plan.next(NOW) is not None
    error = status(429, retry_after)
    assert plan.retry_delay(NOW, error) == expected_delay
    following = plan.next(NOW + (expected_delay or 0.0))
    assert (following.index if following else None) == expected_next


def test_a_deployment_that_asked_for_too_long_a_wait_is_not_tried_again() -> None:
    plan, _ = plan_for(["closed", "closed"], attempts=5)
    assert plan.next(NOW) is not None
    assert plan.retry_delay(NOW, status(429, 60.0)) == 0.0
    tried = []
    while (attempt := plan.next(NOW)) is not None:
        tried.append(attempt.index)
    assert tried == [1, 1, 1, 1]


def test_retry_after_is_remembered_per_deployment() -> None:
    # 0 asks for 5 s at NOW; 1 fails a second later; going back to 0 waits the remaining 4 s.
    plan, _ = plan_for(["closed", "closed"], attempts=3)
    assert plan.next(NOW) is not None
    assert plan.retry_delay(NOW, status(429, 5.0)) == 0.125
    assert plan.next(NOW + 1) is not None
    assert plan.retry_delay(NOW + 1, status(503)) == 4.0
    attempt = plan.next(NOW + 5)
    assert attempt is not None and attempt.index == 0


def test_a_breaker_that_cools_down_during_the_request_gets_its_probe() -> None:
    real = [breaker("closed"), CircuitBreaker(1, COOLDOWN, min_requests=1)]
    real[1].failure(NOW - COOLDOWN + 1)  # its cooldown ends a second from NOW
    plan = AttemptPlan(ordered(2), real, RetryPolicy(attempts=3), lambda: 0.5)
    assert [plan.next(NOW + t) for t in (0.0, 2.0)] == [
        Attempt(0, Deployment("p0", "m0", 1.0, 0), 1, False),
        Attempt(1, Deployment("p1", "m1", 1.0, 1), 2, True),
    ]


@pytest.mark.parametrize(
    ("specs", "count"),
    [([(1.0, 0), (0.0, 0)], 2), ([(1.0, 0), (-1.0, 0)], 2), ([(1.0, 0)], 2)],
)
def test_plan_refuses_bad_input(specs: list[tuple[float, int]], count: int) -> None:
    with pytest.raises(ValueError):
        AttemptPlan(model(*specs), breakers(*["closed"] * count), DEFAULT, random.random)


# --- property: whatever the weights, priorities and breaker states -----------------------------

STATES = ("closed", "open", "cooled", "probing", "released")


@settings(database=None, max_examples=300)
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(STATES), st.floats(1e-6, 1e6), st.integers(-3, 3)),
        min_size=1,
        max_size=6,
    ),
    attempts=st.integers(1, 8),
    seed=st.integers(0, 2**32),
)
def test_plan_properties(specs: list[tuple[str, float, int]], attempts: int, seed: int) -> None:
    m = model(*((w, p) for _, w, p in specs))
    real = breakers(*(s for s, _, _ in specs))
    before = [(b.state, b.available(NOW)) for b in real]
    planned = plan_attempts(m, real, NOW, random.Random(seed).random, attempts)
    assert [(b.state, b.available(NOW)) for b in real] == before  # the preview took nothing

    lazy = AttemptPlan(m, real, RetryPolicy(attempts=attempts), random.Random(seed).random)
    handed = []
    while (attempt := lazy.next(NOW)) is not None:
        handed.append(attempt)
    assert handed == planned  # the preview is what a request that never reports would do

    indices = [a.index for a in planned]
    assert len(planned) <= attempts
    assert all(before[i][1] for i in indices), "a refusing breaker's deployment was planned"
    assert all(specs[a.index][0] != "closed" for a in planned if a.probe)
    probes = [a.index for a in planned if a.probe]
    assert len(probes) == len(set(probes)), "one probe per breaker"
    first_pass = indices[: len(set(indices))]
    assert len(set(first_pass)) == len(first_pass)
    priorities = [m.deployments[i].priority for i in first_pass]
    assert priorities == sorted(priorities)
    if any(s == "closed" for s, _, _ in specs):
        assert len(planned) == attempts
    if not any(available for _, available in before):
        assert planned == []
    assert [a.number for a in planned] == list(range(1, len(planned) + 1))


def test_weights_are_ratios() -> None:
    # Scaling every weight by the same factor changes nothing (same draws, same order).
    a = model((1, 0), (2, 0), (7, 0))
    b = model((10, 0), (20, 0), (70, 0))
    for seed in range(50):
        pa = plan_attempts(a, breakers(*["closed"] * 3), NOW, random.Random(seed).random, 3)
        pb = plan_attempts(b, breakers(*["closed"] * 3), NOW, random.Random(seed).random, 3)
        assert [x.index for x in pa] == [x.index for x in pb]


def test_a_deployment_passed_over_is_left_out_and_its_attempt_given_back() -> None:
    """A deployment whose API cannot take the request (pass_over): another is tried, and
    the refusal counts neither as an attempt nor against the deployment's breaker."""
    plan, real = plan_for(["closed", "closed"], attempts=2)
    first = plan.next(NOW)
    assert first is not None and first.index == 0
    assert plan.pass_over(NOW) is True
    tried = [attempt.index for attempt in iter(lambda: plan.next(NOW), None)]
    assert tried == [1, 1]  # both attempts go to the one left; never back to 0
    assert [b.state for b in real] == ["closed", "closed"]


def test_passing_over_the_last_deployment_leaves_nothing() -> None:
    plan, real = plan_for(["cooled"])
    assert plan.next(NOW) is not None  # takes the probe
    assert plan.pass_over(NOW) is False
    assert plan.next(NOW) is None
    assert real[0].state == "half_open" and real[0].allow(NOW)  # the probe given back
