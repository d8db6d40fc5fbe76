"""The configuration of limits (docs/limits.md): ``state``, each team's ``limits``, ``admin``.

    state:  {redis: redis://host:6379/0, on_failure: open}     # absent: each process alone
            # or, for Redis behind Sentinel: {sentinel: {hosts: [h:26379], service: m}, ...}
    teams:  {t: {..., limits: {requests_per_minute: 600, tokens_per_minute: 200000,
                               concurrency: 50, budget: {usd: 100, period: month}}}}
    admin:  {keys: [...]}

Every limit is optional and, given, a positive number: a limit of 0 would refuse everything,
which is what taking the team out of ``teams`` does. A USD budget on a team that can reach a
deployment without a price is refused: requests there would cost nothing against it, so the
budget would not bound what the team spends (give the deployment a price, 0 for one's own
hardware, or budget tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal
from urllib.parse import parse_qs, unquote, urlsplit

from proxy.core.limits.admission import LIMIT_MAX, NO_LIMITS, Budget, Limits
from proxy.core.yaml_readers import (
    Checker,
    Invalid,
    as_number,
    boolean,
    int_reader,
    join_path,
    member,
    optional_text,
    text,
)

OnFailure = Literal["open", "closed"]


@dataclass(frozen=True, slots=True)
class SentinelConfig:
    """Redis found through Sentinel: ``hosts`` the sentinels, ``service`` the name they
    monitor the master by; the rest is for the master (``tls`` for the sentinels too)."""

    hosts: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False


@dataclass(frozen=True, slots=True)
class State:
    """Where limits are counted: Redis (``redis``, a URL, or ``sentinel``) shared by every
    worker and replica, else in each process. ``on_failure``: with Redis unreachable, admit
    unchecked ("open") or refuse with a 503 ("closed")."""

    redis: str | None = field(default=None, repr=False)  # its URL may hold a password
    on_failure: OnFailure = "open"
    # Seconds a call to Redis may take before it counts as failed: well under a request's.
    timeout: float = 0.25
    sentinel: SentinelConfig | None = None

    @property
    def shared(self) -> str | SentinelConfig | None:
        """Where the shared Redis is: its URL, or its sentinels; None without one."""
        return self.redis if self.redis is not None else self.sentinel


STATE_KEYS = frozenset({"redis", "sentinel", "on_failure", "timeout"})
SENTINEL_KEYS = frozenset({"hosts", "service", "db", "username", "password", "tls"})
LIMIT_KEYS = frozenset({"requests_per_minute", "tokens_per_minute", "concurrency", "budget"})
BUDGET_KEYS = frozenset({"usd", "tokens", "period"})
ADMIN_KEYS = frozenset({"keys"})
_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
_URL_OPTIONS = frozenset(
    {"db", "password", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"}
)

_positive = int_reader(1, None, "must be a positive integer")


def _count(value: object) -> int:
    number = _positive(value)
    # The stores count in Lua's doubles, exact to 2**53 (``limits.LIMIT_MAX``).
    if number > LIMIT_MAX:
        raise Invalid(f"must be at most {LIMIT_MAX}")
    return number


def _timeout(value: object) -> float:
    seconds = as_number(value)
    if seconds is None:
        raise Invalid("must be a number of seconds")
    if not 0.001 <= seconds <= 5:
        raise Invalid("must be between 0.001 and 5 seconds (a request must not wait on it)")
    return seconds


_on_failure = member(("open", "closed"), "on_failure", listed=True)
_period = member(("day", "month"), "period", listed=True)


def _usd(value: object) -> float:
    amount = as_number(value)
    if amount is None or amount <= 0:
        raise Invalid("must be a positive number of USD")
    # Counted in nano-USD in doubles (Lua's numbers): exact to 2**53 of them.
    if amount > 9_000_000:
        raise Invalid("must be at most 9000000 USD a period")
    return amount


def _redis_url(value: object) -> str:
    url = text(value)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a property that raises ValueError for a bad port
    except ValueError:
        raise Invalid("must be a redis://, rediss:// or unix:// URL") from None
    if parts.scheme not in _REDIS_SCHEMES or not (parts.hostname or parts.path):
        raise Invalid("must be a redis://, rediss:// or unix:// URL")
    if parts.scheme != "unix" and not parts.path.strip("/").isdigit() and parts.path.strip("/"):
        raise Invalid("must end in a database number (redis://host:6379/0)")
    # The redis client takes each query parameter as a connection option: only these.
    for name, values in parse_qs(parts.query).items():
        if name not in _URL_OPTIONS or (name.startswith("ssl_") and parts.scheme != "rediss"):
            raise Invalid(f"has an unknown query parameter: {name}")
        if name == "db" and not values[0].isdigit():
            raise Invalid("db must be a database number")
    return url


def _host_port(value: object) -> tuple[str, int]:
    host, _, port = text(value).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Invalid("must be host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)  # [::1]:26379


_db = int_reader(0, None, "must be a database number (0 or more)")


def parse_sentinel(ck: Checker, raw: object, secrets: list[str]) -> SentinelConfig | None:
    """``state.sentinel``; its password goes to ``secrets``, for redaction (a username is no
    secret, and masking one, "default" say, would mangle ordinary words in upstream errors)."""
    path = "state.sentinel"
    node = ck.mapping(raw, path, SENTINEL_KEYS)
    if node is None:
        return None
    hosts = tuple(host for _, host in ck.items(node, "hosts", path, _host_port))
    service = ck.require(node, "service", path, text, "")
    username = ck.optional(node, "username", path, optional_text, None)
    password = ck.optional(node, "password", path, optional_text, None)
    if password:
        secrets.append(password)
    return SentinelConfig(
        hosts,
        service,
        ck.optional(node, "db", path, _db, 0),
        username,
        password,
        ck.optional(node, "tls", path, boolean, False),
    )


def parse_state(ck: Checker, raw: object) -> tuple[State, list[str]]:
    """``state``, and the secrets it holds (its passwords), for redaction."""
    node = ck.mapping(raw, "state", STATE_KEYS) or {}
    url = ck.optional(node, "redis", "state", _redis_url, None)
    secrets: list[str] = []
    sentinel = None
    if node.get("sentinel") is not None:
        sentinel = parse_sentinel(ck, node["sentinel"], secrets)
        if url is not None:
            ck.fail("state.sentinel", "state.redis and state.sentinel exclude each other")
    closed = ck.optional(node, "on_failure", "state", _on_failure, "open") == "closed"
    timeout = ck.optional(node, "timeout", "state", _timeout, 0.25)
    for name in ("on_failure", "timeout"):
        if url is None and sentinel is None and node.get(name) is not None:
            ck.fail(
                f"state.{name}",
                "is only for state.redis or state.sentinel (in-process counters cannot fail)",
            )
    parts = urlsplit(url) if url else None
    if parts is not None:
        if parts.password:
            secrets.append(unquote(parts.password))
        secrets += parse_qs(parts.query).get("password", [])
    return State(url, "closed" if closed else "open", timeout, sentinel), secrets


def parse_limits(ck: Checker, raw: object, path: str) -> Limits:
    """A team's ``limits``."""
    if raw is None:
        return NO_LIMITS
    node = ck.mapping(raw, path, LIMIT_KEYS) or {}
    return Limits(
        requests_per_minute=ck.optional(node, "requests_per_minute", path, _count, None),
        tokens_per_minute=ck.optional(node, "tokens_per_minute", path, _count, None),
        concurrency=ck.optional(node, "concurrency", path, _count, None),
        budget=_parse_budget(ck, node.get("budget"), join_path(path, "budget")),
    )


def _parse_budget(ck: Checker, raw: object, path: str) -> Budget | None:
    node = ck.mapping(raw, path, BUDGET_KEYS)
    if not node:
        if node == {} and raw is not None:
            ck.fail(path, "must give usd or tokens, and period")
        return None
    period = ck.require(node, "period", path, _period, "month")
    given = [kind for kind in ("usd", "tokens") if node.get(kind) is not None]
    if len(given) != 1:
        ck.fail(path, "must give one of usd or tokens" if not given else "usd or tokens, not both")
        return None
    if given == ["usd"]:
        amount = ck.require(node, "usd", path, _usd, 0.0)
        return Budget("usd", amount, "day" if period == "day" else "month") if amount else None
    tokens = ck.require(node, "tokens", path, _count, 0)
    return Budget("tokens", tokens, "day" if period == "day" else "month") if tokens else None


def parse_admin(
    ck: Checker,
    raw: object,
    read_keys: Callable[[Mapping[str, object], str], tuple[bytes, ...]],
) -> tuple[bytes, ...]:
    """``admin.keys``' digests, read by ``read_keys`` as teams' are, which also refuses one
    equal to a team's (one key, one role: a team key that were an admin key would let a team
    manage every team)."""
    if raw is None:
        return ()
    node = ck.mapping(raw, "admin", ADMIN_KEYS)
    if node is None:
        return ()
    return read_keys(node, "admin")


def check_usd_budgets(
    ck: Checker,
    teams: Iterable[tuple[str, Limits, tuple[str, ...]]],
    deployments: Mapping[str, Iterable[tuple[str, str]]],
    priced: Iterable[tuple[str, str, str]],
) -> None:
    """Report each USD budget whose team can reach a deployment without a price.

    ``teams``: (name, limits, model globs); ``deployments``: model -> (provider, upstream
    model) of each; ``priced``: the (model, provider, upstream model) that have a price."""
    has_price = frozenset(priced)
    for name, limits, globs in teams:
        if limits.budget is None or limits.budget.kind != "usd":
            continue
        unpriced = sorted(
            model
            for model, listed in deployments.items()
            if any(fnmatchcase(model, glob) for glob in globs)
            and any((model, *d) not in has_price for d in listed)
        )
        if unpriced:
            ck.fail(
                f"teams.{name}.limits.budget.usd",
                f"models without a price for every deployment: {', '.join(unpriced)}"
                " (give them prices, 0 if free, or budget tokens)",
            )
