from __future__ import annotations

import pytest
import yaml

from proxy.core.config import Config, key_digest, parse_config
from proxy.core.errors import ConfigError
from proxy.core.limits.admission import NO_LIMITS, Budget, Limits
from proxy.core.limits.config import SentinelConfig, State

BASE = """
providers: {p: {base_url: 'https://p.example/v1'}, q: {base_url: 'https://q.example/v1'}}
models:
  cheap: {provider: p, model: up}
  mixed: [{provider: p, model: up}, {provider: q, model: other}]
prices: {cheap: {input: 1, output: 2}}
"""


def parse(extra: str, team: str = "{keys: [tk-one-1], models: [cheap]}") -> Config:
    text = f"{BASE}\nteams: {{t: {team}}}\n{extra}"
    return parse_config(yaml.safe_load(text), {"PW": "redis-pass-1"})


def problems(extra: str, team: str = "{keys: [tk-one-1], models: [cheap]}") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(extra, team)
    return caught.value.problems


def test_defaults() -> None:
    config = parse("")
    assert config.state == State(None, "open")
    assert config.admin_digests == ()
    assert config.teams["t"].limits is NO_LIMITS


def test_everything_given() -> None:
    config = parse(
        "state: {redis: 'redis://:${PW}@cache:6379/0', on_failure: closed}\n"
        "admin: {keys: [admin-key-1]}",
        "{keys: [tk-one-1], models: [cheap], limits: {requests_per_minute: 600,"
        " tokens_per_minute: 200000, concurrency: 50, budget: {usd: 100, period: month}}}",
    )
    assert config.state == State("redis://:redis-pass-1@cache:6379/0", "closed")
    assert config.admin_digests == (key_digest("admin-key-1"),)
    assert config.teams["t"].limits == Limits(600, 200000, 50, Budget("usd", 100.0, "month"))
    assert "redis-pass-1" in config.secrets and "admin-key-1" in config.secrets
    assert "redis-pass-1" not in repr(config.state)


def test_a_tokens_budget() -> None:
    limits = (
        parse(
            "",
            "{keys: [tk-one-1], models: ['*'], limits: {budget: {tokens: 5000000, period: day}}}",
        )
        .teams["t"]
        .limits
    )
    assert limits == Limits(budget=Budget("tokens", 5000000, "day"))


LIMIT = "teams.t.limits"
PROBLEMS = [
    ("{requests_per_minute: 0}", [f"{LIMIT}.requests_per_minute: must be a positive integer"]),
    ("{tokens_per_minute: -5}", [f"{LIMIT}.tokens_per_minute: must be a positive integer"]),
    ("{concurrency: 1.5}", [f"{LIMIT}.concurrency: must be a positive integer"]),
    ("{rpm: 5}", [f"{LIMIT}.rpm: unknown key"]),
    ("5", [f"{LIMIT}: must be a mapping"]),
    ("{budget: {usd: 0, period: day}}", [f"{LIMIT}.budget.usd: must be a positive number of USD"]),
    (
        "{budget: {usd: .nan, period: day}}",
        [f"{LIMIT}.budget.usd: must be a positive number of USD"],
    ),
    ("{budget: {tokens: -1, period: day}}", [f"{LIMIT}.budget.tokens: must be a positive integer"]),
    # Past 2**53 the stores' counters (Lua's doubles) are not exact.
    (
        "{budget: {tokens: 9000000000000001, period: day}}",
        [f"{LIMIT}.budget.tokens: must be at most 9000000000000000"],
    ),
    (
        "{tokens_per_minute: 100000000000000000}",
        [f"{LIMIT}.tokens_per_minute: must be at most 9000000000000000"],
    ),
    ("{budget: {usd: 5}}", [f"{LIMIT}.budget: required key 'period' is missing"]),
    (
        "{budget: {usd: 5, period: week}}",
        [f"{LIMIT}.budget.period: unknown period 'week' (known: day, month)"],
    ),
    ("{budget: {period: day}}", [f"{LIMIT}.budget: must give one of usd or tokens"]),
    ("{budget: {usd: 1, tokens: 1, period: day}}", [f"{LIMIT}.budget: usd or tokens, not both"]),
    ("{budget: {}}", [f"{LIMIT}.budget: must give usd or tokens, and period"]),
    ("{budget: {usd: 1, period: day, per: team}}", [f"{LIMIT}.budget.per: unknown key"]),
]


@pytest.mark.parametrize(("limits", "expected"), PROBLEMS)
def test_limit_problems_have_their_paths(limits: str, expected: list[str]) -> None:
    assert problems("", f"{{keys: [tk-one-1], models: [cheap], limits: {limits}}}") == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "state: {redis: 'http://cache'}",
            ["state.redis: must be a redis://, rediss:// or unix:// URL"],
        ),
        (
            "state: {redis: 'redis://c:99999'}",
            ["state.redis: must be a redis://, rediss:// or unix:// URL"],
        ),
        (
            "state: {redis: 'redis://c', on_failure: maybe}",
            ["state.on_failure: unknown on_failure 'maybe' (known: closed, open)"],
        ),
        (
            "state: {on_failure: closed}",
            [
                "state.on_failure: is only for state.redis or state.sentinel"
                " (in-process counters cannot fail)"
            ],
        ),
        ("state: {redis: 'redis://c', ttl: 5}", ["state.ttl: unknown key"]),
        ("admin: {keys: []}", ["admin.keys: must be a non-empty list"]),
        ("admin: {keys: [tk-one-1]}", ["admin.keys[0]: duplicate key: same as teams.t.keys[0]"]),
        ("admin: {keys: [short]}", ["admin.keys[0]: a secret must be at least 8 characters"]),
        (
            "admin: {tokens: [x]}",
            ["admin.tokens: unknown key", "admin: required key 'keys' is missing"],
        ),
    ],
)
def test_state_and_admin_problems_have_their_paths(extra: str, expected: list[str]) -> None:
    assert problems(extra) == expected


def test_sentinel_as_documented() -> None:
    """docs/limits.md's example: the master's credentials are secrets, for redaction."""
    config = parse(
        "state:\n"
        "  sentinel:\n"
        "    hosts: ['sentinel-0:26379', 'sentinel-1:26379', '[::1]:26380']\n"
        "    service: llm-proxy\n"
        "    db: 2\n"
        "    username: proxy-user\n"
        "    password: ${PW}\n"
        "    tls: true\n"
        "  on_failure: closed\n"
    )
    sentinel = SentinelConfig(
        (("sentinel-0", 26379), ("sentinel-1", 26379), ("::1", 26380)),
        "llm-proxy", 2, "proxy-user", "redis-pass-1", True,
    )  # fmt: skip
    assert config.state == State(None, "closed", sentinel=sentinel)
    assert config.state.shared == sentinel
    # The password is redacted; a username is no secret.
    assert "redis-pass-1" in config.secrets and "proxy-user" not in config.secrets
    assert "redis-pass-1" not in repr(config.state)


def test_an_acl_user_in_the_url_is_redacted_too() -> None:
    config = parse("state: {redis: 'rediss://proxy-user:${PW}@cache:6380/0'}")
    assert config.state.shared == "rediss://proxy-user:redis-pass-1@cache:6380/0"
    # The password is redacted; a username is no secret.
    assert "redis-pass-1" in config.secrets and "proxy-user" not in config.secrets


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (
            "{redis: 'redis://c:6379/0', sentinel: {hosts: ['s:26379'], service: m}}",
            ["state.sentinel: state.redis and state.sentinel exclude each other"],
        ),
        ("{sentinel: {hosts: [], service: m}}", ["state.sentinel.hosts: must be a non-empty list"]),
        (
            "{sentinel: {hosts: ['s', 's:x', 's:70000'], service: m}}",
            [f"state.sentinel.hosts[{i}]: must be host:port" for i in range(3)],
        ),
        ("{sentinel: {hosts: ['s:26379']}}", ["state.sentinel: required key 'service' is missing"]),
        (
            "{sentinel: {hosts: ['s:26379'], service: m, db: -1, tls: maybe, port: 1}}",
            [
                "state.sentinel.port: unknown key",
                "state.sentinel.db: must be a database number (0 or more)",
                "state.sentinel.tls: must be true or false",
            ],
        ),
        ("{redis: 'redis://c/x'}",
         ["state.redis: must end in a database number (redis://host:6379/0)"]),
        ("{redis: 'redis://c/0?socket_timeout=9'}",
         ["state.redis: has an unknown query parameter: socket_timeout"]),
        ("{redis: 'redis://c/0?ssl_ca_certs=/ca.pem'}",  # TLS options are for rediss:// alone
         ["state.redis: has an unknown query parameter: ssl_ca_certs"]),
    ],
)  # fmt: skip
def test_sentinel_and_url_problems_have_their_paths(state: str, expected: list[str]) -> None:
    assert problems(f"state: {state}") == expected


def test_a_tls_url_may_name_its_certificate_authority() -> None:
    url = "rediss://cache:6380/0?ssl_ca_certs=/etc/ca.pem"
    assert parse(f"state: {{redis: '{url}'}}").state.redis == url


def test_unix_socket_redis() -> None:
    assert parse("state: {redis: 'unix:///run/redis.sock'}").state.redis == "unix:///run/redis.sock"


def test_a_usd_budget_needs_a_price_for_every_reachable_deployment() -> None:
    team = "{keys: [tk-one-1], models: ['*'], limits: {budget: {usd: 5, period: day}}}"
    assert problems("", team) == [
        "teams.t.limits.budget.usd: models without a price for every deployment: mixed"
        " (give them prices, 0 if free, or budget tokens)"
    ]
    # A tokens budget needs no price; nor a team that cannot reach the unpriced model.
    parse("", "{keys: [tk-one-1], models: ['*'], limits: {budget: {tokens: 5, period: day}}}")
    parse("", "{keys: [tk-one-1], models: [cheap], limits: {budget: {usd: 5, period: day}}}")
