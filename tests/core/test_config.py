from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.config import (
    Config,
    Deployment,
    Metrics,
    Model,
    RetryPolicy,
    Routing,
    Server,
    Timeouts,
    hash_key,
    key_digest,
    load_config,
    parse_config,
)
from proxy.core.errors import ConfigError

ENV = {
    "FRIENDLI_TOKEN": "ft-secret",
    "RESEARCH_KEY": "rk-1234567",
    "SUPPORT_KEY": "sk-45678901",
    "PORT": "9090",
    "TIMEOUT": "2.5",
    "EMPTY": "",
    "A": "a",
    "B": "b",
    "REFERENCE": "${A}",
    "NEWLINE": "v\r\nX-Evil: 1",
}
SHA_TEST = "sha256:62af8704764faf8ea82fc61ce9c4c3908b6cb97d463a634e9e587d7c885db0ef"  # "test-key"
SHA_TEST_UPPER = "sha256:" + SHA_TEST.removeprefix("sha256:").upper()

MINIMAL = {
    "providers": "{p: {base_url: 'https://p.example/v1'}}",
    "models": "{m: {provider: p, model: up}}",
    "teams": "{t: {keys: [tk-one-1], models: ['*']}}",
}


def doc(**sections: str | None) -> str:
    """A config file: the minimal valid one with top-level sections replaced (None: removed)."""
    merged = {**MINIMAL, **sections}
    return "\n".join(f"{key}: {value}" for key, value in merged.items() if value is not None)


def parse(text: str, env: dict[str, str] = ENV) -> Config:
    return parse_config(yaml.safe_load(text), env)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return info.value.problems


BAD = [
    # --- top level
    (
        "",
        [
            "(top level): required key 'providers' is missing",
            "(top level): required key 'models' is missing",
            "(top level): required key 'teams' is missing",
        ],
    ),
    ("- providers", ["(top level): must be a mapping"]),
    (doc(extra="1"), ["extra: unknown key"]),
    (doc(teams=None), ["(top level): required key 'teams' is missing"]),
    (
        doc(providers="{}"),
        ["providers: must be a non-empty mapping", "models.m.provider: unknown provider 'p'"],
    ),
    (doc(models="[m]"), ["models: must be a non-empty mapping"]),
    (doc(teams="null"), ["teams: must be a non-empty mapping"]),
    (doc(access_log="'maybe'"), ["access_log: must be true or false"]),
    # --- server
    ("server: [8080]\n" + doc(), ["server: must be a mapping"]),
    ("server: {prot: 8080}\n" + doc(), ["server.prot: unknown key"]),
    (
        "server: {host: '', port: 0, workers: 0, max_body_bytes: -1, max_response_bytes: 1.5,"
        " read_timeout: 0, drain_seconds: -1, shutdown_delay: -2}\n" + doc(),
        [
            "server.host: must be a non-empty string",
            "server.port: must be an integer from 1 to 65535",
            "server.workers: must be a positive integer",
            "server.max_body_bytes: must be a positive integer",
            "server.max_response_bytes: must be a positive integer",
            "server.read_timeout: must be a positive number",
            "server.drain_seconds: must be a number >= 0",
            "server.shutdown_delay: must be a number >= 0",
        ],
    ),
    *(
        (
            f"server: {{gc_interval: {value}}}\n" + doc(),
            [f"server.gc_interval: {message}"],
        )
        for value, message in [
            ("-1", "must be a number >= 0"),
            ("'often'", "must be a number >= 0"),
            ("0.001", "must be 0 (CPython's own schedule) or from 0.01 to 10 seconds"),
            ("11", "must be 0 (CPython's own schedule) or from 0.01 to 10 seconds"),
            (".inf", "must be a number >= 0"),
        ]
    ),
    # --- metrics
    (
        "metrics: {enabled: 'maybe', port: 8080}\n" + doc(),
        [
            "metrics.enabled: must be true or false",
            "metrics.port: must differ from server.port (null serves /metrics there)",
        ],
    ),
    ("metrics: {host: 127.0.0.1}\n" + doc(), ["metrics.port: required when metrics.host is set"]),
    ("metrics: {token: 42}\n" + doc(), ["metrics.token: must be a string"]),
    # --- providers
    (
        doc(providers="{p: {base_url: 'https://p'}, groq: {bse_url: 'https://api.groq.com'}}"),
        [
            "providers.groq.bse_url: unknown key",
            "providers.groq: required key 'base_url' is missing",
        ],
    ),
    (doc(providers="{p: https://p}"), ["providers.p: must be a mapping"]),
    (doc(providers="{p: null}"), ["providers.p: required key 'base_url' is missing"]),
    (
        doc(providers="{p: {base_url: 'https://p', api: sagemaker, dialect: groq}}"),
        [
            "providers.p.api: unknown API 'sagemaker'"
            " (known: anthropic, bedrock, cohere, gemini, ollama, openai, tgi, vertex)",
            "providers.p.dialect: unknown dialect 'groq'"
            " (known: friendli-2024, maritaca-inference, openai)",
        ],
    ),
    (
        doc(providers="{p: {base_url: 'https://p', api: anthropic, dialect: friendli-2024}}"),
        ["providers.p.dialect: is only for api: openai (a native API is its own)"],
    ),
    (
        doc(providers="{p: {base_url: 'https://p', api: gemini, responses: true}}"),
        ["providers.p.responses: is only for api: openai"],
    ),
    (
        doc(providers="{p: {base_url: 'https://p', responses: maybe}}"),
        ["providers.p.responses: must be true or false"],
    ),
    (
        doc(
            providers="{p: {base_url: 'https://p', api: anthropic}}",
            models="{m: {deployments: [{provider: p, model: c}], max_tokens: 0,"
            " thinking_budgets: {high: -1, huge: 9}}}",
        ),
        [
            "models.m.max_tokens: must be a positive integer",
            "models.m.thinking_budgets.huge: unknown key",
            "models.m.thinking_budgets.high: must be a positive integer",
        ],
    ),
    (
        doc(providers="{p: {base_url: 'https://p', api_key: 123, stream_usage: 1}}"),
        [
            "providers.p.api_key: must be a string",
            "providers.p.stream_usage: must be true or false",
        ],
    ),
    (
        doc(
            providers="{p: {base_url: 'https://p', timeouts: "
            "{conect: 1, connect: 0, first_byte: -1, idle: abc, total: .inf}}}"
        ),
        [
            "providers.p.timeouts.conect: unknown key",
            "providers.p.timeouts.connect: must be a positive number",
            "providers.p.timeouts.first_byte: must be a positive number",
            "providers.p.timeouts.idle: must be a positive number",
            "providers.p.timeouts.total: must be a positive number",
        ],
    ),
    (
        doc(
            providers="{p: {base_url: 'https://p', headers: "
            "{'Bad Name': x, X-Num: 5, X-Nl: '${NEWLINE}', X-Null: null}}}"
        ),
        [
            "providers.p.headers.Bad Name: not a valid header name",
            "providers.p.headers.X-Num: must be a string",
            "providers.p.headers.X-Nl: must not contain line breaks",
            "providers.p.headers.X-Null: must be a string",
        ],
    ),
    (
        # The proxy frames each request itself (proxy.http.upstream.request_head).
        doc(
            providers="{p: {base_url: 'https://p', headers: "
            "{Content-Length: '5', transfer-encoding: chunked, Connection: close, Host: h}}}"
        ),
        [
            "providers.p.headers.Content-Length: is set by the proxy for each request",
            "providers.p.headers.transfer-encoding: is set by the proxy for each request",
            "providers.p.headers.Connection: is set by the proxy for each request",
        ],
    ),
    (
        doc(providers="{p: {base_url: 'https://p', api_key: '${NEWLINE}'}}"),
        ["providers.p.api_key: must not contain line breaks"],
    ),
    (
        doc(providers="{p: {base_url: 'https://p', headers: [a], query: {v: [1]}}}"),
        ["providers.p.headers: must be a mapping", "providers.p.query.v: must be a string"],
    ),
    # --- models
    (
        doc(models="{sabia-4: [{provider: maritka, model: sabia-4}]}"),
        ["models.sabia-4[0].provider: unknown provider 'maritka'"],
    ),
    (doc(models="{x: {model: y}}"), ["models.x: required key 'provider' is missing"]),
    (
        doc(models="{x: {provider: p, model: '', weight: 0, priority: 1.5, extra: 1}}"),
        [
            "models.x.extra: unknown key",
            "models.x.model: must be a non-empty string",
            "models.x.weight: must be a positive number",
            "models.x.priority: must be an integer",
        ],
    ),
    (
        doc(models="{x: {provider: p, model: y, reasoning: false}}"),
        ["models.x.reasoning: unknown key"],
    ),
    (doc(models="{x: []}"), ["models.x: must be a non-empty list"]),
    (
        doc(models="{x: [up, {provider: p}]}"),
        [
            "models.x[0]: must be a mapping",
            "models.x[1]: required key 'model' is missing",
        ],
    ),
    (
        doc(models="{x: {deployments: [], reasoning: 'maybe', provider: p}}"),
        [
            "models.x.provider: unknown key",
            "models.x.deployments: must be a non-empty list",
            "models.x.reasoning: must be true or false",
        ],
    ),
    (
        doc(models="{x: {deployments: [{provider: q, model: y}]}}"),
        ["models.x.deployments[0].provider: unknown provider 'q'"],
    ),
    (
        doc(models="{x: up-model}"),
        ["models.x: must be a deployment, a list of deployments, or {deployments: [...]}"],
    ),
    (
        doc(models="{1.5: {provider: p, model: y}, '': {provider: p, model: y}}"),
        [
            "models.1.5: name must be a non-empty string (quote it)",
            "models.'': name must be a non-empty string (quote it)",
        ],
    ),
    # --- teams
    (
        doc(teams="{research: {keys: [], models: []}}"),
        [
            "teams.research.keys: must be a non-empty list",
            "teams.research.models: must be a non-empty list",
        ],
    ),
    (
        doc(teams="{research: {keys: [tk-one-1]}}"),
        ["teams.research: required key 'models' is missing"],
    ),
    (
        doc(teams="{research: {keys: tk-one-1, models: ['*'], budget: 5}}"),
        ["teams.research.budget: unknown key", "teams.research.keys: must be a non-empty list"],
    ),
    (
        doc(
            teams="{research: {keys: ['sha256:abc', '', 'has space', 'sha256:" + "g" * 64 + "',"
            " '${RESEARCH_KEY}', '${NOPE}', 'caf\u00e9'], models: ['*', 3]}}"
        ),
        [
            "teams.research.keys[0]: 'sha256:' must be followed by exactly 64 hex digits",
            "teams.research.keys[1]: must be a non-empty string",
            "teams.research.keys[2]: must be printable ASCII without spaces",
            "teams.research.keys[3]: 'sha256:' must be followed by exactly 64 hex digits",
            "teams.research.keys[5]: environment variable NOPE is not set",
            "teams.research.keys[6]: must be printable ASCII without spaces",
            "teams.research.models[1]: must be a non-empty string",
        ],
    ),
    (
        doc(teams="{t: {keys: [tk-one-1, tk-one-1], models: ['*']}}"),
        ["teams.t.keys[1]: duplicate key: same as teams.t.keys[0]"],
    ),
    (
        # The same key spelled once in plain text and once as its digest is still the same key.
        doc(
            teams="{research: {keys: [test-key, '${RESEARCH_KEY}'], models: ['*']},"
            f" support: {{keys: [rk-1234567, '{SHA_TEST_UPPER}'],"
            " models: ['llama-*']}}"
        ),
        [
            "teams.support.keys[0]: duplicate key: same as teams.research.keys[1]",
            "teams.support.keys[1]: duplicate key: same as teams.research.keys[0]",
        ],
    ),
    # --- environment substitution
    (
        doc(providers="{p: {base_url: 'https://${HOST}/${PREFIX}', api_key: '${FRIENDLI_TOKEN}'}}"),
        [
            "providers.p.base_url: environment variable HOST is not set",
            "providers.p.base_url: environment variable PREFIX is not set",
        ],
    ),
    *(
        (
            doc(providers=f"{{p: {{base_url: 'https://p', api_key: '{bad}'}}}}"),
            [
                "providers.p.api_key: bad reference: write ${VAR}, ${VAR:-default},"
                " or $${ for a literal ${"
            ],
        )
        for bad in ["${", "x${A", "${1A}", "${A-b}", "${A:-${B}}", "${}"]
    ),
    ("server: {port: '${PORT}x'}\n" + doc(), ["server.port: must be an integer from 1 to 65535"]),
    # --- routing
    ("routing: [3]\n" + doc(), ["routing: must be a mapping"]),
    (
        "routing: {backoff: 1, circuit: [5]}\n" + doc(),
        [
            "routing.backoff: must be a mapping",
            "routing.circuit: must be a mapping",
        ],
    ),
    (
        "routing: {attempt: 3, backoff: {bse: 1, max: 2}, circuit: {failure: 5}}\n" + doc(),
        [
            "routing.attempt: unknown key",
            "routing.backoff.bse: unknown key",
            "routing.circuit.failure: unknown key",
        ],
    ),
    (
        "routing: {attempts: 0, backoff: {base: -1, max: -0.5, retry_after_max: .inf},"
        " circuit: {failures: 0, cooldown: 0}}\n" + doc(),
        [
            "routing.attempts: must be a positive integer",
            "routing.backoff.base: must be a number >= 0",
            "routing.backoff.max: must be a number >= 0",
            "routing.backoff.retry_after_max: must be a number >= 0",
            "routing.circuit.failures: must be a positive integer",
            "routing.circuit.cooldown: must be a positive number",
        ],
    ),
    (
        "routing: {attempts: 1.5, backoff: {base: fast}, circuit: {failures: true,"
        " cooldown: '${NOPE}'}}\n" + doc(),
        [
            "routing.attempts: must be a positive integer",
            "routing.backoff.base: must be a number >= 0",
            "routing.circuit.failures: must be a positive integer",
            "routing.circuit.cooldown: environment variable NOPE is not set",
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_config_reports_every_problem(text: str, expected: list[str]) -> None:
    assert problems(text) == expected


def test_problems_across_a_whole_file_are_reported_at_once() -> None:
    text = """
        server:
          port: ${NO_PORT:-http}
          workers: 0
        providers:
          groq:
            bse_url: https://api.groq.com/openai/v1
            timeouts: {connect: -5}
          maritaca:
            base_url: ftp://chat.maritaca.ai
        models:
          sabia-4: [{provider: maritka, model: sabia-4}]
          llama: {provider: groq}
        teams:
          research: {keys: ["${RESEARCH_KEY}", "${MISSING_KEY}"], models: ["*"]}
          support: {keys: ["${RESEARCH_KEY}"], models: []}
    """
    assert problems(textwrap.dedent(text)) == [
        "server.port: must be an integer from 1 to 65535",
        "server.workers: must be a positive integer",
        "providers.groq.bse_url: unknown key",
        "providers.groq: required key 'base_url' is missing",
        "providers.groq.timeouts.connect: must be a positive number",
        "providers.maritaca.base_url: must be an http:// or https:// URL with a host",
        "models.sabia-4[0].provider: unknown provider 'maritka'",
        "models.llama: required key 'model' is missing",
        "teams.research.keys[1]: environment variable MISSING_KEY is not set",
        "teams.support.keys[0]: duplicate key: same as teams.research.keys[0]",
        "teams.support.models: must be a non-empty list",
    ]


@pytest.mark.parametrize(
    ("base_url", "problem"),
    [
        ("ftp://p.example", "must be an http:// or https:// URL with a host"),
        ("api.groq.com/v1", "must be an http:// or https:// URL with a host"),
        ("https://", "must be an http:// or https:// URL with a host"),
        ("https://p.example:99999", "must be an http:// or https:// URL with a host"),
        ("https://p.example:0", "must be an http:// or https:// URL with a host"),
        ("https://p.example:http", "must be an http:// or https:// URL with a host"),
        ("https://p.exa mple/v1", "must not contain whitespace"),
        ("https://user:pw@p.example", "must not contain credentials: use api_key or headers"),
        ("https://p.example/v1?key=1", "must not have a query or fragment: use query"),
        ("https://p.example/v1#x", "must not have a query or fragment: use query"),
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
    ],
)
def test_bad_base_url(base_url: str | None, problem: str) -> None:
    raw = yaml.safe_load(doc())
    raw["providers"]["p"]["base_url"] = base_url
    with pytest.raises(ConfigError) as info:
        parse_config(raw, ENV)
    assert info.value.problems == [f"providers.p.base_url: {problem}"]


@pytest.mark.parametrize(
    ("port", "ok"),
    [
        (1, True),
        (65535, True),
        ("8081", True),
        ("+8081", True),
        (0, False),
        (65536, False),
        (-1, False),
        (True, False),
        (8080.0, False),
        ("80.5", False),
        ("", False),
        ("٣", False),
        ([80], False),
    ],
)
def test_port_accepts_integers_and_digit_strings(port: object, ok: bool) -> None:
    raw = yaml.safe_load(doc())
    raw["server"] = {"port": port}
    if ok:
        assert parse_config(raw, ENV).server.port == int(port)  # type: ignore[call-overload]
    else:
        with pytest.raises(ConfigError) as info:
            parse_config(raw, ENV)
        assert info.value.problems == ["server.port: must be an integer from 1 to 65535"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2, 2.0),
        (0.5, 0.5),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("5.", 5.0),
        (0, None),
        (-1, None),
        (False, None),
        ("nan", None),
        ("inf", None),
        (float("inf"), None),
        ("1e999", None),
        (10**400, None),
        ("five", None),
        ("", None),
    ],
)
def test_positive_numbers(value: object, expected: float | None) -> None:
    raw = yaml.safe_load(doc())
    raw["providers"]["p"]["timeouts"] = {"idle": value}
    if expected is not None:
        assert parse_config(raw, ENV).providers["p"].timeouts.idle == expected
    else:
        with pytest.raises(ConfigError) as info:
            parse_config(raw, ENV)
        assert info.value.problems == ["providers.p.timeouts.idle: must be a positive number"]


def test_defaults() -> None:
    config = parse(doc())
    assert config.server == Server("0.0.0.0", 8080, 1, 16 * 1024 * 1024, 30.0, 30.0, 0.0, 0.1)
    assert config.metrics == Metrics(enabled=True, host=None, port=None, token=None)
    assert config.access_log is True
    provider = config.providers["p"]
    assert provider.api == "openai"
    assert provider.api_key is None
    assert dict(provider.headers) == {}
    assert dict(provider.query) == {}
    assert provider.timeouts == Timeouts(connect=10, first_byte=120, idle=120, total=900)
    assert provider.stream_usage is True
    assert provider.dialect == "openai"
    assert config.models["m"] == Model("m", (Deployment("p", "up", 1.0, 0),), True)
    assert config.teams["t"].key_digests == (key_digest("tk-one-1"),)
    assert config.teams["t"].models == ("*",)
    assert config.routing == Routing(RetryPolicy(3, 0.25, 8.0, 30.0), 5, 30.0)


def test_null_sections_and_fields_mean_defaults() -> None:
    config = parse("server:\nmetrics:\naccess_log:\nrouting:\n" + doc())
    assert config.server == Server()
    assert config.metrics == Metrics()
    assert config.access_log is True
    assert config.routing == Routing()
    config = parse("server: {port: null, workers: null}\n" + doc())
    assert config.server == Server()
    config = parse("routing: {attempts: null, backoff: null, circuit: {cooldown: null}}\n" + doc())
    assert config.routing == Routing()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "{attempts: 5, backoff: {base: 0.5, max: 10, retry_after_max: 0},"
            " circuit: {failures: 1, cooldown: 2.5}}",
            Routing(RetryPolicy(5, 0.5, 10.0, 0.0), 1, 2.5),
        ),
        # Zero backoff retries at once; each part of the section may be given alone.
        ("{backoff: {base: 0, max: 0}}", Routing(RetryPolicy(backoff_base=0.0, backoff_max=0.0))),
        ("{attempts: 1}", Routing(RetryPolicy(attempts=1))),
        ("{circuit: {failures: 10}}", Routing(circuit_failures=10)),
        (
            "{attempts: '${ATTEMPTS:-4}', circuit: {cooldown: '${TIMEOUT}'}}",
            Routing(RetryPolicy(attempts=4), circuit_cooldown=2.5),
        ),
    ],
)
def test_routing(text: str, expected: Routing) -> None:
    assert parse(f"routing: {text}\n" + doc()).routing == expected


def test_config_built_in_code_gets_default_routing() -> None:
    assert Config(Server(), Metrics(), True, {}, {}, {}).routing == Routing()


BRIEF_EXAMPLE = """
server: {host: 127.0.0.1, port: 8080, workers: 4, max_body_bytes: 1048576, read_timeout: 15,
         drain_seconds: 0, shutdown_delay: 5, gc_interval: 0}
metrics: {enabled: false, host: null, port: 9100, token: "${METRICS_TOKEN:-}"}
access_log: false
providers:
  friendli:
    api: openai
    base_url: https://api.friendli.ai/serverless/v1/
    api_key: ${FRIENDLI_TOKEN}
    headers: {X-Extra: value}
    query: {api-version: preview}
    timeouts: {connect: 5, first_byte: 60, idle: 30, total: 600}
    stream_usage: false
    dialect: friendli-2024
  maritaca:
    base_url: https://chat.maritaca.ai/api
    dialect: maritaca-inference
  deepseek: {base_url: "https://api.deepseek.com"}
models:
  llama-3.1-8b: {provider: friendli, model: meta-llama-3.1-8b-instruct}
  sabia-4: [{provider: maritaca, model: sabia-4}]
  r1:
    deployments:
      - {provider: deepseek, model: deepseek-reasoner, weight: 2, priority: 0}
      - {provider: friendli, model: deepseek-r1, weight: 0.5, priority: -1}
    reasoning: false
teams:
  research:
    keys:
      - "sha256:62af8704764faf8ea82fc61ce9c4c3908b6cb97d463a634e9e587d7c885db0ef"
      - ${RESEARCH_KEY}
    models: ["*"]
  support: {keys: ["${SUPPORT_KEY}"], models: ["llama-*"]}
"""


def test_full_example_with_all_three_model_forms() -> None:
    config = parse(BRIEF_EXAMPLE)
    assert config.server == Server("127.0.0.1", 8080, 4, 1048576, 15.0, 0.0, 5.0, 0.0)
    # A separate metrics listener binds the server's host unless told otherwise.
    assert config.metrics == Metrics(enabled=False, host="127.0.0.1", port=9100, token=None)
    assert config.access_log is False
    friendli = config.providers["friendli"]
    assert friendli.base_url == "https://api.friendli.ai/serverless/v1"
    assert friendli.api_key == "ft-secret"
    assert dict(friendli.headers) == {"X-Extra": "value"}
    assert dict(friendli.query) == {"api-version": "preview"}
    assert friendli.timeouts == Timeouts(5, 60, 30, 600)
    assert (friendli.stream_usage, friendli.dialect) == (False, "friendli-2024")
    assert config.providers["maritaca"].dialect == "maritaca-inference"
    assert list(config.models) == ["llama-3.1-8b", "sabia-4", "r1"]
    assert config.models["llama-3.1-8b"].deployments == (
        Deployment("friendli", "meta-llama-3.1-8b-instruct", 1.0, 0),
    )
    assert config.models["sabia-4"] == Model("sabia-4", (Deployment("maritaca", "sabia-4"),))
    assert config.models["r1"] == Model(
        "r1",
        (
            Deployment("deepseek", "deepseek-reasoner", 2.0, 0),
            Deployment("friendli", "deepseek-r1", 0.5, -1),
        ),
        reasoning=False,
    )
    research = config.teams["research"]
    assert research.key_digests == (key_digest("test-key"), key_digest("rk-1234567"))
    assert config.teams["support"].models == ("llama-*",)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("${A}", "a"),
        ("${A:-default}", "a"),
        ("${UNSET:-default}", "default"),
        ("${EMPTY:-default}", "default"),  # :- as in sh: unset or empty
        ("${EMPTY}", ""),
        ("${UNSET:-}", ""),
        ("${UNSET:-http://h:1/p q}", "http://h:1/p q"),
        ("${A}${B}-${A}", "ab-a"),
        ("$${A}", "${A}"),
        ("$$${A}", "$${A}"),
        ("$A $ $$ {A}", "$A $ $$ {A}"),
        ("${REFERENCE}", "${A}"),  # substituted text is not scanned again
        ("plain", "plain"),
    ],
)
def test_substitution(template: str, expected: str) -> None:
    raw = yaml.safe_load(doc())
    raw["providers"]["p"]["query"] = {"v": template}
    assert parse_config(raw, ENV).providers["p"].query["v"] == expected


def test_substitution_in_typed_fields() -> None:
    text = """
        server: {port: "${PORT}", workers: "${WORKERS:-3}", read_timeout: "${TIMEOUT}"}
        metrics: {enabled: "${METRICS:-False}", port: "${METRICS_PORT:-9100}"}
        access_log: ${EMPTY:-true}
        providers:
          p:
            base_url: "https://${HOST:-p.example}/v1/"
            api_key: "${EMPTY}"
            stream_usage: "${B:-x}"
        models:
          ${A}: {provider: "${P:-p}", model: "${B}", weight: "${TIMEOUT}", priority: "${PRIO:--1}"}
        teams:
          t: {keys: ["${RESEARCH_KEY}"], models: ["${A}*"]}
    """
    with pytest.raises(ConfigError) as info:
        parse(textwrap.dedent(text))
    assert info.value.problems == ["providers.p.stream_usage: must be true or false"]
    config = parse(textwrap.dedent(text).replace('"${B:-x}"', '"${UNSET:-TRUE}"'))
    assert (config.server.port, config.server.workers, config.server.read_timeout) == (9090, 3, 2.5)
    assert (config.metrics.enabled, config.metrics.port) == (False, 9100)
    assert config.access_log is True
    assert config.providers["p"].base_url == "https://p.example/v1"
    assert config.providers["p"].api_key is None  # an empty optional string is not set
    assert config.providers["p"].stream_usage is True
    # Keys are names, not values: `${A}` stays a model called `${A}`.
    assert config.models["${A}"].deployments == (Deployment("p", "b", 2.5, -1),)
    assert config.teams["t"].key_digests == (key_digest("rk-1234567"),)
    assert config.teams["t"].models == ("a*",)


def test_keys_are_stored_as_digests_only() -> None:
    config = parse(
        doc(
            teams=f"{{t: {{keys: [tk-one-1, '{SHA_TEST}', '{SHA_TEST.upper()[7:]}'],"
            " models: ['*']}}"
        )
    )
    assert config.teams["t"].key_digests == (
        key_digest("tk-one-1"),
        key_digest("test-key"),
        # The prefix is case-sensitive; without it this is just a 64-character plain-text key.
        key_digest(SHA_TEST.upper()[7:]),
    )
    assert all(len(digest) == 32 for digest in config.teams["t"].key_digests)


def test_hash_key() -> None:
    assert hash_key("test-key") == SHA_TEST
    assert key_digest("test-key") == bytes.fromhex(SHA_TEST[7:])


def test_config_is_immutable_and_hides_secrets_in_repr() -> None:
    config = parse(BRIEF_EXAMPLE.replace("${METRICS_TOKEN:-}", "metrics-secret"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server.port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.models["new"] = config.models["r1"]  # type: ignore[index]
    with pytest.raises(TypeError):
        config.providers["friendli"].headers["X-Extra"] = "changed"  # type: ignore[index]
    assert "ft-secret" not in repr(config)
    assert "metrics-secret" not in repr(config)
    assert "X-Extra" not in repr(config)


def test_problems_never_quote_values() -> None:
    text = doc(
        providers="{p: {base_url: 'https://me:hunter2@p', api_key: 'sk-live-1${',"
        ' headers: {X-Key: "sk-live-2\\n"}}}',
        teams="{t: {keys: ['sk-live-3 '], models: ['*']}}",
    )
    message = "\n".join(problems(text))
    assert len(message.splitlines()) == 4
    assert "hunter2" not in message
    assert "sk-live" not in message


def test_a_problem_is_one_line_whatever_the_names_it_quotes_hold() -> None:
    """A provider or model named with a control character: escaped, not a broken line."""
    raw = {"providers": None, "models": {"m\tx": {"provider": "\n", "model": "a"}}}
    with pytest.raises(ConfigError) as failed:
        parse_config(raw, ENV)
    assert "models.'m\\tx'.provider: unknown provider '\\n'" in failed.value.problems
    assert all("\n" not in line and "\t" not in line for line in failed.value.problems)


# --- load_config: the file and environment I/O


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(BRIEF_EXAMPLE, encoding="utf-8")
    config = load_config(path, ENV)
    assert config.providers["friendli"].api_key == "ft-secret"
    assert load_config(str(path), ENV) == config


def test_load_config_defaults_to_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(doc(providers="{p: {base_url: 'https://p', api_key: '${LLM_PROXY_TEST}'}}"))
    monkeypatch.setenv("LLM_PROXY_TEST", "from-environ")
    assert load_config(path).providers["p"].api_key == "from-environ"
    monkeypatch.delenv("LLM_PROXY_TEST")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        "providers.p.api_key: environment variable LLM_PROXY_TEST is not set"
    ]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            "providers: {p: {base_url: x}\nmodels: 1\n",
            "2:1: invalid YAML: while parsing a flow mapping,"
            " expected ',' or '}', but got '<scalar>'",
        ),
        (
            "teams:\n  a: b\n c: d\n",
            "3:2: invalid YAML: while parsing a block mapping,"
            " expected <block end>, but found '<block mapping start>'",
        ),
        ("teams: {a: 1}\nmodels: {}\nteams: {b: 2}\n", "3:1: invalid YAML: duplicate key 'teams'"),
        (
            "? [a]\n: 1\n",
            "1:3: invalid YAML: while constructing a mapping, found unhashable key",
        ),
        ("teams:\n  t: {keys: [k], keys: [j]}\n", "2:18: invalid YAML: duplicate key 'keys'"),
        (
            "a: !!python/object:os.system x\n",
            "1:4: invalid YAML: could not determine a constructor"
            " for the tag 'tag:yaml.org,2002:python/object:os.system'",
        ),
        (
            "--- 1\n--- 2\n",
            "2:1: invalid YAML: expected a single document in the stream,"
            " but found another document",
        ),
        (
            "a: \x00\n",
            "invalid YAML: unacceptable character #x0000: special characters are not allowed"
            ' in "<unicode string>", position 3',
        ),
    ],
)
def test_load_config_yaml_errors_name_file_line_and_column(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, ENV)
    separator = "" if problem[0].isdigit() else " "
    assert info.value.problems == [f"{path}:{separator}{problem}"]


def test_yaml_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    base = "base: &p {base_url: 'https://p', stream_usage: false}"
    path.write_text(
        f"providers:\n  {base}\n  q: {{<<: *p, stream_usage: true}}\n"
        + doc(providers=None).replace("provider: p", "provider: q")
    )
    assert load_config(path, ENV).providers["q"].stream_usage is True


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: None, "cannot read: No such file or directory"),
        (lambda p: p.mkdir(), "cannot read: Is a directory"),
        (lambda p: p.write_bytes(b"server: \xff\xfe\n"), "not UTF-8 text (byte 8)"),
    ],
)
def test_load_config_file_errors_are_one_line(tmp_path: Path, make: Any, problem: str) -> None:
    path = tmp_path / "proxy.yaml"
    make(path)
    with pytest.raises(ConfigError) as info:
        load_config(path, ENV)
    assert info.value.problems == [f"{path}: {problem}"]
    assert str(info.value) == f"{path}: {problem}"


# --- robustness: any YAML-shaped input yields a Config or a ConfigError, never a crash

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_KEYS = st.sampled_from(
    [
        "p",
        "m",
        "base_url",
        "provider",
        "model",
        "keys",
        "models",
        "deployments",
        "port",
        "attempts",
        "backoff",
        "circuit",
        "base",
        "failures",
        "1",
    ]
)


def _nested(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    # A function, not a lambda: hypothesis reads a lambda's source to see that it uses its
    # argument, and cannot read one that spans lines.
    return st.lists(inner, max_size=3) | st.dictionaries(_KEYS | _scalars, inner, max_size=3)


_yamlish = st.recursive(_scalars, _nested, max_leaves=12)


@settings(database=None)  # nothing written into the source tree
@given(server=_yamlish, routing=_yamlish, providers=_yamlish, models=_yamlish, teams=_yamlish)
def test_parse_config_never_crashes(
    server: object, routing: object, providers: object, models: object, teams: object
) -> None:
    raw = {
        "server": server,
        "routing": routing,
        "providers": providers,
        "models": models,
        "teams": teams,
    }
    try:
        parse_config(raw, ENV)
    except ConfigError as exc:
        assert exc.problems
        assert all(": " in line and "\n" not in line for line in exc.problems)


SHORT = "a secret must be at least 8 characters"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (doc(providers="{p: {base_url: 'https://p', api_key: short}}"),
         [f"providers.p.api_key: {SHORT}"]),
        (doc(providers="{p: {base_url: 'https://p', headers: {x-goog-api-key: abc}}}"),
         [f"providers.p.headers.x-goog-api-key: {SHORT}"]),
        (doc(providers="{p: {base_url: 'https://p', headers: {X-Gateway-Token: t0k}}}"),
         [f"providers.p.headers.X-Gateway-Token: {SHORT}"]),
        (doc(providers="{p: {base_url: 'https://p', query: {key: k}}}"),
         [f"providers.p.query.key: {SHORT}"]),
        (doc(teams="{t: {keys: [sk-1], models: ['*']}}"), [f"teams.t.keys[0]: {SHORT}"]),
        ("metrics: {token: tok}\n" + doc(), [f"metrics.token: {SHORT}"]),
    ],
)  # fmt: skip
def test_secrets_are_at_least_eight_characters(text: str, expected: list[str]) -> None:
    assert problems(text) == expected


def test_every_credential_is_a_secret_to_redact() -> None:
    config = parse(
        "metrics: {token: metrics-token-1}\n"
        + doc(
            providers="{p: {base_url: 'https://p', api_key: provider-key-1,"
            " headers: {x-goog-api-key: goog-key-1, X-Org: organisation-1, X-Flag: '1',"
            " anthropic-version: '2023-06-01'}, query: {key: query-key-1, api-version: preview}}}",
            teams=f"{{t: {{keys: [team-key-1, '{SHA_TEST}'], models: ['*']}}}}",
        )
    )
    # A value under a credential's name, or any other of eight characters or more; never a
    # setting (api-version, anthropic-version) nor a digest, which is no key.
    assert set(config.secrets) == {
        "metrics-token-1",
        "provider-key-1",
        "goog-key-1",
        "organisation-1",
        "query-key-1",
        "team-key-1",
    }
    assert "provider-key-1" not in repr(config)


def test_the_default_response_limit_holds_the_largest_embeddings_answer() -> None:
    # OpenAI's largest embeddings request: 2,048 inputs, 3,072 dimensions; its JSON floats,
    # pretty-printed, take up to about 30 bytes each ("      -0.0069292834959924221,\n").
    largest = 2048 * 3072 * 30
    assert Server().max_response_bytes > largest
    assert parse_config(yaml.safe_load(doc()), {}).server.max_response_bytes > largest
