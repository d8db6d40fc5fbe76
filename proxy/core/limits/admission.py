"""Team limits (sans-IO): the windows, the reservation a request takes, the one admission
decision, the settlement and OpenAI's x-ratelimit headers. The stores' reference
semantics are in ``proxy.core.limits.memory``, which every store implements (docs/limits.md).

Every limit but concurrency is a counter in a fixed UTC window: the epoch minute for requests
and tokens per minute, the UTC day or month for a budget. A fixed window is one key that every
process computes alike from the time, so one shared counter per key makes the decision exact
across workers and replicas; a sliding window would need each process's history. Concurrency is
a set of leases, each with a deadline, so that a worker that dies holding slots frees them when
its leases run out instead of never.

Admission checks every counter before it increments any: a refused request takes nothing. USD
are counted in integer nano-dollars, so that every store adds integers alike (a float sum
depends on the order of its terms, which differs between processes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal, NamedTuple

from proxy.core.errors import RateLimited
from proxy.core.prices import Price
from proxy.core.usage import Usage, estimate_tokens

Kind = Literal["usd", "tokens"]
Period = Literal["minute", "day", "month"]
Code = Literal["requests_per_minute", "tokens_per_minute", "concurrency", "budget"]

NANOS_PER_USD: Final = 1_000_000_000
# Keys outlive their window by this much: a worker whose clock runs behind the store's still
# finds the counter it means, rather than a fresh one at 0 (which would reset the window).
GRACE_SECONDS: Final = 60
# When nothing says when a slot frees (a request in flight ends when it ends).
CONCURRENCY_RETRY: Final = 1
# The most a counter holds, and the most one request adds to it: the stores' scripts count in
# Lua's doubles, exact to 2**53, and Redis's integers end at 2**63. A usage an upstream reports
# beyond it (the proxy trusts its counts) is charged as this much: a spent limit, not a wrap.
COUNT_MAX: Final = 2**53
# The most a limit may be (9 million USD in nano-USD, or tokens): under ``COUNT_MAX``, so
# that a counter at ``COUNT_MAX``, or an amount clamped to it, is always over the limit.
LIMIT_MAX: Final = 9 * 10**15


@dataclass(frozen=True, slots=True)
class Budget:
    kind: Kind
    amount: float  # USD, or tokens
    period: Literal["day", "month"]


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrency: int | None = None
    budget: Budget | None = None
    # Any limit at all: a request of the team is admitted by the store. Asked on every
    # request, so set once rather than compared with NO_LIMITS field by field each time.
    checked: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        limits = (self.requests_per_minute, self.tokens_per_minute, self.concurrency, self.budget)
        object.__setattr__(self, "checked", any(limit is not None for limit in limits))


NO_LIMITS: Final = Limits()


class Window(NamedTuple):
    id: str
    end: float  # epoch seconds
    start: float = 0.0


def window(period: Period, now: float) -> Window:
    """The fixed UTC window of ``period`` holding ``now`` (epoch seconds). POSIX time has no
    leap seconds, so every UTC day is 86400 of them."""
    if period == "minute":
        minute = math.floor(now / 60)
        return Window(str(minute), (minute + 1) * 60.0, minute * 60.0)
    if period == "day":
        day = math.floor(now / 86400)
        start = datetime.fromtimestamp(day * 86400, UTC)
        return Window(start.strftime("%Y-%m-%d"), (day + 1) * 86400.0, day * 86400.0)
    moment = datetime.fromtimestamp(now, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    first = datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp()
    end = datetime(year, month, 1, tzinfo=UTC).timestamp()
    return Window(moment.strftime("%Y-%m"), end, first)


class Windows:
    """The window of each period that holds now, and each team's charges in them, made once
    per window rather than once per request (a month's takes a few datetime calls, and a
    request's admission is on its path). Not shared between threads."""

    __slots__ = ("_current", "_plans")

    def __init__(self) -> None:
        self._current: dict[str, Window] = {}
        self._plans: dict[str, Plan] = {}

    def __call__(self, period: Period, now: float) -> Window:
        found = self._current.get(period)
        if found is None or not found.start <= now < found.end:
            found = self._current[period] = window(period, now)
        return found

    def plan(self, team: str, limits: Limits, now: float) -> Plan:
        """The team's charges in the windows holding ``now``, and its lease set's key."""
        found = self._plans.get(team)
        # Identity, not equality: a reloaded configuration's limits are new objects.
        if found is None or found.limits is not limits or not found.start <= now < found.end:
            found = self._plans[team] = _plan(team, limits, now, self)
        return found


def key_prefix(team: str, counter: str) -> str:
    # The team in braces is a Redis Cluster hash tag: every key of one team is in one slot, which
    # a script touching several keys requires. Whatever the team's name holds, all of its keys
    # share the same braces, so the same slot.
    return f"lim:{{{team}}}:{counter}"


# What a charge counts: the index of its amount in ``Reservation.amounts``.
REQUESTS: Final = 0
TOKENS: Final = 1
NANOS: Final = 2


class Charge(NamedTuple):
    """One counter of a team's, in one window: a reservation adds its amount (of ``unit``)
    if ``used + amount <= limit``. The same for every request of the window."""

    code: Code
    prefix: str  # the key without its window: the budget's names its kind, lest units mix
    period: Period
    window: Window
    limit: int
    key: str  # prefix:window
    unit: int  # REQUESTS, TOKENS or NANOS
    expires: int  # when the key is dropped (epoch seconds): the window's end and a grace
    headers: tuple[str, str, str] | None  # its x-ratelimit-* names, for a per-minute one
    limit_text: str


class Shown(NamedTuple):
    """A team's x-ratelimit headers in the current minute, made once per window: the limits'
    (``fixed``, copied for every answer), then what each answer fills in."""

    fixed: dict[str, str]
    remaining: tuple[tuple[int, int, int, str], ...]  # charge index, unit, limit, header name
    resets: tuple[str, ...]
    end: float  # the minute's end


class Plan(NamedTuple):
    """A team's charges in the current windows (``Windows.plan``)."""

    limits: Limits
    start: float  # the charges hold from ``start`` to ``end``, when the first window ends
    end: float
    charges: tuple[Charge, ...]
    lease_key: str
    shown: Shown | None  # None: no per-minute limit, no headers


class Lease(NamedTuple):
    """One slot of the team's concurrency, held until settled or until ``deadline``."""

    key: str
    member: str
    limit: int
    deadline: float


class Reservation(NamedTuple):
    """What admission takes for one request; ``tokens`` and ``usd`` are what it may spend.
    ``amounts``: what it adds to a charge of each unit (1 request, its tokens, its nano-USD)."""

    team: str
    tokens: int
    usd: float | None
    charges: tuple[Charge, ...]
    amounts: tuple[int, int, int]
    lease: Lease | None = None
    shown: Shown | None = None  # its team's headers (``rate_limit_headers``)

    def amount(self, charge: Charge) -> int:
        return self.amounts[charge.unit]


def prompt_estimate(size: int, prompt: object = None) -> int:
    """The tokens a request's prompt is reserved for: its whole body of ``size`` bytes at
    about four characters a token (``usage.estimate_tokens``), and each token id in ``prompt``
    (a completions prompt or embeddings input given as ids) as one more.

    The whole body, not its messages alone: tools, schemas, instructions and every other item
    go upstream with them and are counted as prompt there, so a reservation of the messages
    alone could be outrun by a body of anything else. Its length is known already, which
    walking it is not; the estimate that meters an upstream without usage counts text only
    (``usage.prompt_chars``)."""
    ids = 0
    if type(prompt) is list:
        for part in prompt:
            if type(part) is int:
                ids += 1
            elif type(part) is list:
                ids += sum(type(item) is int for item in part)
    return estimate_tokens(size) + ids


def nanos(usd: float) -> int:
    """USD as nano-USD, at most ``COUNT_MAX`` (an infinite or NaN cost too)."""
    if not usd * NANOS_PER_USD < COUNT_MAX:
        return COUNT_MAX
    # Rounded up (less a float's error, so that 0.0003 USD is 300000, not 300001): never less.
    return max(0, math.ceil(usd * NANOS_PER_USD - 1e-6))


def reserve(
    team: str,
    limits: Limits,
    *,
    prompt_tokens: int,
    max_tokens: int,
    price: Price | None,
    lease_id: str,
    lease_seconds: float,
    now: float,
    windows: Windows | None = None,
) -> Reservation:
    """The reservation of a request: 1 request, its estimated prompt plus ``max_tokens`` (the
    client's, or the model's ceiling), those tokens at ``price`` (the dearest of the model's
    deployments) for a USD budget, and a slot for ``lease_seconds`` (its longest duration).
    ``windows``: a cache of the current windows and charges, kept by the caller. The limiter
    takes the same steps one by one, to skip the last when a reservation made ahead serves."""
    usd, amounts = request_amounts(prompt_tokens, max_tokens, price)
    plan = (windows or Windows()).plan(team, limits, now)
    return reservation_in(plan, team, usd, amounts, lease_id, now + lease_seconds)


def request_amounts(
    prompt_tokens: int, max_tokens: int, price: Price | None
) -> tuple[float | None, tuple[int, int, int]]:
    """What a request may spend in USD (None: unpriced), and its ``Reservation.amounts``."""
    tokens = prompt_tokens + max_tokens
    usd = None if price is None else price.cost(Usage(prompt_tokens, max_tokens, tokens))
    # An unpriced model reserves nothing of a USD budget; the configuration refuses a USD
    # budget on a team that can reach one (proxy.core.limits.config).
    return usd, (1, min(tokens, COUNT_MAX), nanos(usd) if usd else 0)


def reservation_in(
    plan: Plan,
    team: str,
    usd: float | None,
    amounts: tuple[int, int, int],
    lease_id: str,
    deadline: float,
) -> Reservation:
    """``reserve``'s reservation, of ``request_amounts``, in the team's ``plan``."""
    concurrency = plan.limits.concurrency
    lease = None if concurrency is None else Lease(plan.lease_key, lease_id, concurrency, deadline)
    return Reservation(team, amounts[1], usd, plan.charges, amounts, lease, plan.shown)


def unchecked_in(plan: Plan, team: str) -> Reservation:
    """The reservation of a request admitted unchecked (the store down, ``on_failure: open``):
    it took nothing and holds no slot, so that settling it charges all it spent to the
    windows it ran in, once the store answers again (docs/limits.md)."""
    return Reservation(team, 0, None, plan.charges, _UNCHECKED)


_UNCHECKED: Final = (0, 0, 0)


def _plan(team: str, limits: Limits, now: float, windows: Windows) -> Plan:
    charges: list[Charge] = []
    if limits.requests_per_minute is not None:
        charges.append(_charge(team, "requests_per_minute", "rpm", "minute", REQUESTS,
                               limits.requests_per_minute, windows("minute", now)))  # fmt: skip
    if limits.tokens_per_minute is not None:
        charges.append(_charge(team, "tokens_per_minute", "tpm", "minute", TOKENS,
                               limits.tokens_per_minute, windows("minute", now)))  # fmt: skip
    budget = limits.budget
    if budget is not None:
        usd = budget.kind == "usd"
        limit = nanos(budget.amount) if usd else int(budget.amount)
        charges.append(_charge(team, "budget", f"budget:{budget.kind}", budget.period,
                               NANOS if usd else TOKENS, limit,
                               windows(budget.period, now)))  # fmt: skip
    start = max((c.window.start for c in charges), default=-math.inf)
    end = min((c.window.end for c in charges), default=math.inf)
    return Plan(limits, start, end, tuple(charges), key_prefix(team, "inflight"), _shown(charges))


def requests_only(plan: Plan) -> Plan:
    """The plan of a request that spends no tokens (an answer from the response cache): the
    team's requests per minute alone, so that a spent token budget does not refuse it."""
    charges = [charge for charge in plan.charges if charge.unit == REQUESTS]
    return Plan(plan.limits, plan.start, plan.end, tuple(charges), plan.lease_key, _shown(charges))


def _shown(charges: list[Charge]) -> Shown | None:
    fixed: dict[str, str] = {}
    remaining = []
    resets = []
    end = 0.0
    for index, charge in enumerate(charges):
        if charge.headers is not None:
            limit, left, reset = charge.headers
            fixed[limit] = charge.limit_text
            remaining.append((index, charge.unit, charge.limit, left))
            resets.append(reset)
            end = charge.window.end  # every per-minute charge's is the same minute
    return Shown(fixed, tuple(remaining), tuple(resets), end) if fixed else None


def _charge(
    team: str, code: Code, counter: str, period: Period, unit: int, limit: int, at: Window
) -> Charge:
    prefix = key_prefix(team, counter)
    return Charge(code, prefix, period, at, limit, f"{prefix}:{at.id}", unit,
                  expires(at), _HEADER_NAMES.get(code), str(limit))  # fmt: skip


def expires(at: Window) -> int:
    """When a window's keys are dropped: its end (whole seconds), and a grace."""
    return math.ceil(at.end) + GRACE_SECONDS


class Decision(NamedTuple):
    """Admission's answer: ``used`` is each charge's counter as it was seen (before this
    request), ``in_flight`` the leases held (one process's store may count expired ones while
    they are under the limit); refused, the limit that refused it."""

    admitted: bool
    used: tuple[int, ...]
    in_flight: int = 0
    code: Code | None = None
    retry_after: int = 0
    message: str = ""

    def error(self) -> RateLimited:
        return RateLimited(self.message, code=self.code, retry_after=self.retry_after)


_MESSAGES: Final[Mapping[Code, str]] = {
    "requests_per_minute": "Rate limit reached for requests per minute",
    "tokens_per_minute": "Rate limit reached for tokens per minute",
    "concurrency": "Too many requests in flight",
    "budget": "Budget spent for this period",
}


def admit(reservation: Reservation, used: tuple[int, ...], in_flight: int, now: float) -> Decision:
    """The decision on ``reservation`` given its counters' values and the leases held.

    Of several limits reached, the one whose wait is longest is reported: retrying after a
    shorter one's would be refused again."""
    refusals: list[tuple[int, Code, str]] = []
    amounts = reservation.amounts
    for charge, value in zip(reservation.charges, used, strict=True):
        amount = amounts[charge.unit]
        if value + amount > charge.limit:
            wait = max(1, math.ceil(charge.window.end - now))
            refusals.append((wait, charge.code, _refusal(charge, value, amount)))
    lease = reservation.lease
    if lease is not None and in_flight + 1 > lease.limit:
        refusals.append(
            (CONCURRENCY_RETRY, "concurrency", f"{_MESSAGES['concurrency']}: limit {lease.limit}")
        )
    if not refusals:
        return Decision(True, used, in_flight)
    wait, code, message = max(refusals, key=lambda r: r[0])  # max keeps the first of a tie
    return Decision(False, used, in_flight, code, wait, message)


def _refusal(charge: Charge, value: int, amount: int) -> str:
    text = f"{_MESSAGES[charge.code]}: limit {charge.limit}, used {value}"
    if charge.unit != REQUESTS:
        unit = "nano-USD" if charge.unit == NANOS else "tokens"
        text += f", this request may use {amount} {unit}"
    if amount > charge.limit:
        text += " (more than the whole limit: lower max_tokens)"
    return text


# --- settlement --------------------------------------------------------------------------


class Correction(NamedTuple):
    key: str
    delta: int
    expires: int  # epoch seconds, as ``Charge.expires``


class Settlement(NamedTuple):
    corrections: tuple[Correction, ...]
    lease: Lease | None


def settle(
    reservation: Reservation,
    usage: Usage,
    cost: float | None,
    now: float,
    windows: Windows | None = None,
) -> Settlement:
    """The corrections that make a reservation's counters hold what the request spent.

    Each is actual - reserved, so under the reservation it gives back, over it it charges the
    rest: the whole usage is charged, whatever was reserved. A window that ended while the
    request ran keeps the reservation; the excess goes to the window ``now`` is in, and a
    refund is dropped (an ended window admits nothing more). The lease is released."""
    tokens = spent_tokens(usage)
    amounts = reservation.amounts
    corrections: list[Correction] = []
    for charge in reservation.charges:
        unit = charge.unit
        if unit == REQUESTS:
            continue
        amount = amounts[unit]
        # Unknown cost (an unpriced deployment): the reservation stands, never zero.
        spent = tokens if unit == TOKENS else amount if cost is None else nanos(cost)
        delta = spent - amount
        if not delta:
            continue
        if now < charge.window.end:
            corrections.append(Correction(charge.key, delta, charge.expires))
        elif delta > 0:
            current = (windows or window)(charge.period, now)
            corrections.append(Correction(f"{charge.prefix}:{current.id}", delta, expires(current)))
    return Settlement(tuple(corrections), reservation.lease)


def spent_tokens(usage: Usage) -> int:
    """What a usage charges of a tokens limit: at most ``COUNT_MAX``."""
    return min(usage.prompt_tokens + usage.completion_tokens, COUNT_MAX)


def release(reservation: Reservation, now: float) -> Settlement:
    """What a reservation that no request used gives back (``proxy.core.limits.prefetch``):
    everything it took, its request too, in the windows that have not ended; and its lease."""
    amounts = reservation.amounts
    corrections = tuple(
        Correction(charge.key, -amounts[charge.unit], charge.expires)
        for charge in reservation.charges
        if now < charge.window.end and amounts[charge.unit]
    )
    return Settlement(corrections, reservation.lease)


# --- OpenAI's headers ----------------------------------------------------------------------


# A second's thousandths as a duration spells them: "", ".001", ..., ".5", ..., ".999".
_FRACTIONS: Final = ("", *(f".{ms:03d}".rstrip("0") for ms in range(1, 1000)))


def duration(seconds: float) -> str:
    """A duration as OpenAI's x-ratelimit-reset-* spell it (Go's time.Duration): "1s", "6m0s",
    "1.5s", "20ms", "1h2m3s"; to the millisecond."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:  # a per-minute window's, every time: on every answer, so from a table
        return f"{ms // 1000}{_FRACTIONS[ms % 1000]}s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, fraction = divmod(rest, 1000)
    secs = f"{whole}.{fraction:03d}".rstrip("0") if fraction else str(whole)
    text = f"{secs}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def _names(kind: str) -> tuple[str, str, str]:
    return (
        f"x-ratelimit-limit-{kind}",
        f"x-ratelimit-remaining-{kind}",
        f"x-ratelimit-reset-{kind}",
    )


_HEADER_NAMES: Final[Mapping[Code, tuple[str, str, str]]] = {
    "requests_per_minute": _names("requests"),
    "tokens_per_minute": _names("tokens"),
}


def rate_limit_headers(
    reservation: Reservation, decision: Decision, now: float, counted: int = 1
) -> dict[str, str]:
    """x-ratelimit-{limit,remaining,reset}-{requests,tokens} for the team's per-minute limits,
    as of the decision (an admitted request counted in full). ``counted``: how many alike it
    stands for after the counters it saw, itself included (one made ahead: its run's place,
    ``proxy.core.limits.prefetch``)."""
    shown = reservation.shown
    if shown is None:
        return {}
    # On every answer: the plan's names and limits, copied, rather than a walk of the charges.
    headers = shown.fixed.copy()
    used, amounts = decision.used, reservation.amounts
    if not decision.admitted:
        counted = 0
    for index, unit, limit, name in shown.remaining:
        taken = used[index] + counted * amounts[unit]
        headers[name] = str(limit - taken) if taken < limit else "0"
    reset = duration(shown.end - now)
    for name in shown.resets:
        headers[name] = reset
    return headers
