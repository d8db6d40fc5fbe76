"""The configuration: frozen dataclasses, and the one parser of the YAML contract.

``parse_config(raw, env)`` is pure and reports every problem at once, each as ``path: what``
(``models.sabia-4[0].provider: unknown provider 'maritka'``). ``load_config(path)`` is the only
file and environment I/O. Unknown keys are errors everywhere; a ``null`` optional value means
its default. Problems never quote a string value, because any of them may be a secret.

Environment substitution applies to every string value (never to keys):

    ${VAR}            VAR's value; an error at that path if VAR is not set
    ${VAR:-default}   VAR's value, or ``default`` if VAR is unset or empty (as in POSIX sh)
    $${               a literal ``${``

A substituted value is not scanned again. Numeric and boolean fields also accept strings
(``port: ${PORT:-8080}``, ``enabled: ${METRICS:-true}``), and an optional string that comes out
empty (``api_key: ${KEY:-}``) counts as not set.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Final

import orjson

from proxy.core.cache.config import CacheConfig, parse_cache
from proxy.core.cloud_config import (
    CLOUD_KEYS,
    AwsAuth,
    CloudAuth,
    GoogleAuth,
    default_base_url,
    parse_cloud,
    parse_publisher,
    publisher_of,
    vertex_prefix,
)
from proxy.core.errors import ConfigError
from proxy.core.limits.admission import NO_LIMITS, Limits
from proxy.core.limits.config import (
    State,
    check_usd_budgets,
    parse_admin,
    parse_limits,
    parse_state,
)
from proxy.core.prices import Price, file_prices, parse_prices, price_for
from proxy.core.telemetry_config import Otlp, parse_telemetry
from proxy.core.yaml_readers import (
    Checker,
    Invalid,
    boolean,
    http_url,
    int_reader,
    join_path,
    member,
    non_negative,
    optional_text,
    positive,
    read_yaml,
    text,
)

# The native APIs a provider's ``api`` may name besides OpenAI's; each is also its dialect.
NATIVE_APIS = frozenset({"anthropic", "gemini", "cohere", "ollama", "tgi", "bedrock"})
# Vertex AI serves each publisher's models in that publisher's API: a deployment's dialect is
# its model's publisher's (``dialect_of``).
VERTEX_DIALECTS = frozenset({"vertex_google", "vertex_anthropic"})
APIS = NATIVE_APIS | {"openai", "vertex"}
# The names a provider's ``dialect`` may take: the configuration's vocabulary, which the core
# checks without knowing what they mean; proxy.normalize.dialects registers one module for each
# (tests/test_layers.py holds the two to the same names). ``dialect`` is set only with
# ``api: openai``, for an OpenAI-compatible server's older shapes.
LEGACY_DIALECTS = frozenset({"friendli-2024", "maritaca-inference"})
DIALECTS = NATIVE_APIS | LEGACY_DIALECTS | VERTEX_DIALECTS | {"openai"}
# reasoning_effort -> thinking budget (tokens), for native APIs that take a budget
# (docs/providers/anthropic.md); a model's thinking_budgets replaces any of them.
THINKING_BUDGETS: Final[Mapping[str, int]] = MappingProxyType(
    {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
)
_NO_STRINGS: Mapping[str, str] = MappingProxyType({})
_NO_PRICES: Mapping[tuple[str, str, str], Price] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 10.0
    first_byte: float = 120.0
    idle: float = 120.0
    total: float = 900.0


MAX_CONNECTIONS: Final = 1024


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    api: str
    base_url: str
    # Kept out of repr: a logged config must not carry credentials.
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS, repr=False)
    query: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS, repr=False)
    timeouts: Timeouts = field(default_factory=Timeouts)
    stream_usage: bool = True
    dialect: str = "openai"
    # Upstream connections its requests may hold at once, per worker (proxy.connections.Slots).
    max_connections: int = MAX_CONNECTIONS
    # It serves OpenAI's Responses API itself (OpenAI, Azure): /v1/responses is passed through to
    # it, not translated to chat (docs/responses-api.md).
    responses: bool = False
    # api: anthropic: the anthropic-beta values a client sends that are not passed on to it (a
    # backend that refuses betas newer than it knows: docs/anthropic-face.md).
    drop_betas: tuple[str, ...] = ()
    # Its gen_ai.provider.name on traces, for a host the proxy does not know (docs/telemetry.md).
    telemetry_name: str | None = None
    # api: bedrock / vertex: the cloud's region and identity (proxy.core.cloud_config).
    cloud: CloudAuth | None = None


@dataclass(frozen=True, slots=True)
class Deployment:
    provider: str
    model: str
    weight: float = 1.0
    priority: int = 0
    # On api: vertex: whose API the model speaks, when its name does not say (publisher_of).
    publisher: str | None = None


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    deployments: tuple[Deployment, ...]
    reasoning: bool = True
    # For native APIs that require a token limit (Anthropic): sent when the client gives none.
    max_tokens: int = 4096
    # reasoning_effort -> a thinking budget in tokens (Anthropic, Gemini).
    thinking_budgets: Mapping[str, int] = field(default_factory=lambda: THINKING_BUDGETS)


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    key_digests: tuple[bytes, ...]
    models: tuple[str, ...]
    limits: Limits = NO_LIMITS
    cache: bool = True  # False: the team's answers are never cached nor served from the cache


@dataclass(frozen=True, slots=True)
class Server:
    host: str = "0.0.0.0"
    port: int = 8080
    workers: int = 1
    max_body_bytes: int = 16 * 1024 * 1024
    read_timeout: float = 30.0
    drain_seconds: float = 30.0
    # After SIGTERM: keep serving, /readyz answering 503, for this long before the listener
    # closes, so that load balancers see the worker leave before connections are refused.
    shutdown_delay: float = 0.0
    # Seconds between a worker's runs of the cycle collector (proxy.ops.collector); 0 leaves the
    # collector to CPython's own allocation counts.
    gc_interval: float = 0.1
    # The largest whole answer taken from an upstream: OpenAI's largest embeddings answer (2,048
    # inputs of 3,072 dimensions, as JSON floats, pretty-printed) is about 190 MB.
    max_response_bytes: int = 256 * 1024 * 1024
    # The largest answer collected from a stream for a request that asked for a whole one
    # (chat and completions only, whose answers are far smaller than embeddings'); all that a
    # worker collects at once is bounded by max_response_bytes.
    max_collected_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Metrics:
    """``port`` set means a separate listener on (``host``, ``port``); else /metrics is on the
    main listener. A separate listener's ``host`` defaults to the server's."""

    enabled: bool = True
    host: str | None = None
    port: int | None = None
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often one request is sent upstream, and how long it waits in between.

    ``attempts`` counts every upstream attempt of one request, over all deployments. Before
    attempt k+1 (k made) the wait is uniform(0, min(backoff_max, backoff_base * 2**(k-1))), and
    never less than a Retry-After of at most ``retry_after_max``; a longer one is not waited for.
    """

    attempts: int = 3
    backoff_base: float = 0.25
    backoff_max: float = 8.0
    retry_after_max: float = 30.0


@dataclass(frozen=True, slots=True)
class Routing:
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    # A deployment's circuit opens when, within circuit_window seconds, it had at least
    # circuit_min_requests attempts, of which at least circuit_failures failed, and they were
    # circuit_failure_rate of its attempts.
    circuit_failures: int = 5
    circuit_cooldown: float = 30.0
    circuit_window: float = 60.0
    circuit_failure_rate: float = 0.5
    circuit_min_requests: int = 20


@dataclass(frozen=True, slots=True)
class Config:
    server: Server
    metrics: Metrics
    access_log: bool
    providers: Mapping[str, Provider]
    models: Mapping[str, Model]
    teams: Mapping[str, Team]
    routing: Routing = field(default_factory=Routing)
    # Every credential the configuration holds (provider keys, header and query values, team
    # keys given in clear, the metrics token): redacted from whatever an upstream says back.
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # Each deployment's price, by (model, provider, upstream model); none: its cost is unknown.
    prices: Mapping[tuple[str, str, str], Price] = field(default_factory=lambda: _NO_PRICES)
    # Where team limits are counted (docs/limits.md), and the keys of the admin endpoints.
    state: State = field(default_factory=State)
    admin_digests: tuple[bytes, ...] = field(default=(), repr=False)
    cache: CacheConfig | None = None  # None: no response cache (docs/cache.md)
    # OpenTelemetry export (docs/telemetry.md); None: nothing is traced.
    telemetry: Otlp | None = None


def dialect_of(provider: Provider, deployment: Deployment) -> str:
    """The dialect a deployment is spoken to in: its provider's, or on Vertex AI its model's
    publisher's."""
    if provider.api != "vertex":
        return provider.dialect
    return f"vertex_{publisher_of(deployment.model, deployment.publisher)}"


def key_digest(key: str) -> bytes:
    """The sha256 digest under which a team key is stored and looked up."""
    # surrogatepass: a header decoded with surrogateescape must hash, not raise; such a key
    # can never equal a configured one, which is printable ASCII.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def hash_key(key: str) -> str:
    """The ``sha256:<hex>`` form of ``key``, to put in a config file instead of the key."""
    return "sha256:" + key_digest(key).hex()


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate the YAML file at ``path``; every failure is a ConfigError.

    A ``prices_file`` is read relative to the configuration file's folder."""
    folder = Path(path).parent
    return parse_config(
        read_yaml(Path(path)),
        os.environ if env is None else env,
        read_file=lambda name: (folder / name).read_bytes(),
    )


def parse_config(
    raw: object, env: Mapping[str, str], *, read_file: Callable[[str], bytes] | None = None
) -> Config:
    """Validate the YAML-loaded ``raw``, substituting variables from ``env``; ``read_file``
    reads the files it names (a ``prices_file``), the only I/O a configuration asks for."""
    ck = Checker(env)
    root = ck.mapping(raw, "", _TOP_KEYS)
    if root is None:
        raise ConfigError(ck.problems)
    server = _parse_server(ck, root.get("server"))
    metrics = _parse_metrics(ck, root.get("metrics"), server)
    access_log = ck.optional(root, "access_log", "", boolean, True)
    routing = _parse_routing(ck, root.get("routing"))
    providers = {n: _parse_provider(ck, n, v, p) for n, v, p in ck.section(root, "providers")}
    # A deployment may name a provider whose own entry has problems: those are reported there.
    names = frozenset(providers)
    models = {n: _parse_model(ck, n, v, p, names) for n, v, p in ck.section(root, "models")}
    _check_publishers(ck, models, providers)
    seen_keys: dict[bytes, str] = {}
    secrets: list[str] = []
    teams = {
        n: _parse_team(ck, n, v, p, seen_keys, secrets) for n, v, p in ck.section(root, "teams")
    }
    admin_digests = parse_admin(
        ck, root.get("admin"), lambda node, path: _keys(ck, node, path, seen_keys, secrets)
    )
    state, state_secrets = parse_state(ck, root.get("state"))
    cache = parse_cache(ck, root.get("cache"), state.shared is not None)
    secrets += state_secrets
    telemetry = parse_telemetry(
        ck, root.get("telemetry"), lambda raw, path: _string_map(ck, raw, path, _header_name)
    )
    if telemetry is not None:
        # Its headers carry the collector's credentials: redacted as a provider's are.
        secrets += [v for v in telemetry.headers.values() if len(v) >= SECRET_MIN]
    for provider in providers.values():
        secrets += _provider_secrets(ck, provider)
    if metrics.token:
        secrets.append(ck.value(metrics.token, "metrics.token", _secret, ""))
    prices = _deployment_prices(ck, root, models, providers, read_file)
    check_usd_budgets(
        ck,
        ((t.name, t.limits, t.models) for t in teams.values()),
        {m.name: [(d.provider, d.model) for d in m.deployments] for m in models.values()},
        prices,
    )
    if ck.problems:
        raise ConfigError(ck.problems)
    return Config(
        server,
        metrics,
        access_log,
        MappingProxyType(providers),
        MappingProxyType(models),
        MappingProxyType(teams),
        routing,
        tuple(dict.fromkeys(secret for secret in secrets if secret)),
        MappingProxyType(prices),
        state,
        admin_digests,
        cache,
        telemetry,
    )


def _check_publishers(
    ck: Checker, models: Mapping[str, Model], providers: Mapping[str, Provider]
) -> None:
    for model in models.values():
        for d in model.deployments:
            provider = providers.get(d.provider)
            if d.publisher is not None and provider is not None and provider.api != "vertex":
                ck.fail(
                    join_path("models", model.name),
                    f"publisher is only for api: vertex (provider {d.provider} is api: "
                    f"{provider.api})",
                )


def _deployment_prices(
    ck: Checker,
    root: Mapping[str, object],
    models: Mapping[str, Model],
    providers: Mapping[str, Provider],
    read_file: Callable[[str], bytes] | None,
) -> dict[tuple[str, str, str], Price]:
    explicit = parse_prices(ck, root.get("prices"))
    from_file: Mapping[str, Price] = {}
    name = ck.optional(root, "prices_file", "", optional_text, None)
    if name is not None:
        from_file = _read_prices_file(ck, name, read_file)
    prices = {}
    for model in models.values():
        for d in model.deployments:
            provider = providers.get(d.provider)
            api = provider.api if provider is not None else ""
            price = price_for(explicit, from_file, model.name, d.model, api)
            if price is not None:
                prices[(model.name, d.provider, d.model)] = price
    return prices


def _read_prices_file(
    ck: Checker, name: str, read_file: Callable[[str], bytes] | None
) -> Mapping[str, Price]:
    if read_file is None:
        ck.fail("prices_file", "cannot be read here (a configuration parsed without its files)")
        return {}
    try:
        data = orjson.loads(read_file(name))
    except OSError as exc:
        ck.fail("prices_file", f"cannot be read: {exc.strerror or type(exc).__name__}")
        return {}
    except orjson.JSONDecodeError:
        ck.fail("prices_file", "is not JSON")
        return {}
    found = file_prices(data)
    if isinstance(found, str):
        ck.fail("prices_file", found)
        return {}
    return found


def _provider_secrets(ck: Checker, provider: Provider) -> list[str]:
    """A provider's credentials: its key, and every header and query value but settings."""
    path = f"providers.{provider.name}"
    found: list[str] = []
    if provider.api_key:
        found.append(ck.value(provider.api_key, f"{path}.api_key", _secret, ""))
    keys = provider.cloud.keys if isinstance(provider.cloud, AwsAuth) else None
    if keys is not None:
        found.append(ck.value(keys.secret_access_key, f"{path}.aws.secret_access_key", _secret, ""))
        if keys.session_token:
            found.append(keys.session_token)
    for part, values in (("headers", provider.headers), ("query", provider.query)):
        for name, value in values.items():
            lowered = name.lower()
            if lowered in NOT_SECRET:
                continue
            if any(word in lowered for word in _CREDENTIAL_WORDS):
                found.append(ck.value(value, f"{path}.{part}.{name}", _secret, ""))
            elif len(value) >= SECRET_MIN:
                # Perhaps a credential under a name of its own: redacted all the same. A
                # shorter one cannot be without mangling the words of messages.
                found.append(value)
    return found


# --- sections ---------------------------------------------------------------------------------

_TOP_KEYS = frozenset(
    {
        "server",
        "metrics",
        "access_log",
        "routing",
        "providers",
        "models",
        "teams",
        "prices",
        "prices_file",
        "state",
        "admin",
        "cache",
        "telemetry",
    }
)
_SERVER_KEYS = frozenset(f.name for f in fields(Server))
_METRICS_KEYS = frozenset(f.name for f in fields(Metrics))
_TIMEOUT_KEYS = frozenset(f.name for f in fields(Timeouts))
_PROVIDER_KEYS = (frozenset(f.name for f in fields(Provider)) - {"name", "cloud"}) | CLOUD_KEYS
_DEPLOYMENT_KEYS = frozenset(f.name for f in fields(Deployment))
_MODEL_KEYS = frozenset({"deployments", "reasoning", "max_tokens", "thinking_budgets"})
_TEAM_KEYS = frozenset({"keys", "models", "limits", "cache"})
_ROUTING_KEYS = frozenset({"attempts", "backoff", "circuit"})
_BACKOFF_KEYS = frozenset({"base", "max", "retry_after_max"})
_CIRCUIT_KEYS = frozenset({"failures", "cooldown", "window", "failure_rate", "min_requests"})


def _parse_server(ck: Checker, raw: object) -> Server:
    node, d = ck.mapping(raw, "server", _SERVER_KEYS) or {}, Server()
    return Server(
        host=ck.optional(node, "host", "server", text, d.host),
        port=ck.optional(node, "port", "server", _port, d.port),
        workers=ck.optional(node, "workers", "server", _positive_int, d.workers),
        max_body_bytes=ck.optional(
            node, "max_body_bytes", "server", _positive_int, d.max_body_bytes
        ),
        max_response_bytes=ck.optional(
            node, "max_response_bytes", "server", _positive_int, d.max_response_bytes
        ),
        max_collected_bytes=ck.optional(
            node, "max_collected_bytes", "server", _positive_int, d.max_collected_bytes
        ),
        read_timeout=ck.optional(node, "read_timeout", "server", positive, d.read_timeout),
        drain_seconds=ck.optional(node, "drain_seconds", "server", non_negative, d.drain_seconds),
        shutdown_delay=ck.optional(
            node, "shutdown_delay", "server", non_negative, d.shutdown_delay
        ),
        gc_interval=ck.optional(node, "gc_interval", "server", _gc_interval, d.gc_interval),
    )


def _parse_metrics(ck: Checker, raw: object, server: Server) -> Metrics:
    node = ck.mapping(raw, "metrics", _METRICS_KEYS) or {}
    enabled = ck.optional(node, "enabled", "metrics", boolean, True)
    host = ck.optional(node, "host", "metrics", optional_text, None)
    port = ck.optional(node, "port", "metrics", _port, None)
    if host is not None and port is None:
        ck.fail("metrics.port", "required when metrics.host is set")
    if port is not None and port == server.port and host in (None, server.host):
        ck.fail("metrics.port", "must differ from server.port (null serves /metrics there)")
    return Metrics(
        enabled=enabled,
        host=server.host if host is None and port is not None else host,
        port=port,
        token=ck.optional(node, "token", "metrics", optional_text, None),
    )


def _parse_routing(ck: Checker, raw: object) -> Routing:
    node, d = ck.mapping(raw, "routing", _ROUTING_KEYS) or {}, Routing()
    backoff = ck.mapping(node.get("backoff"), "routing.backoff", _BACKOFF_KEYS) or {}
    circuit = ck.mapping(node.get("circuit"), "routing.circuit", _CIRCUIT_KEYS) or {}
    p = d.policy
    # Zero is a choice, not a mistake: base 0 retries at once, retry_after_max 0 never waits.
    policy = RetryPolicy(
        attempts=ck.optional(node, "attempts", "routing", _positive_int, p.attempts),
        backoff_base=ck.optional(backoff, "base", "routing.backoff", non_negative, p.backoff_base),
        backoff_max=ck.optional(backoff, "max", "routing.backoff", non_negative, p.backoff_max),
        retry_after_max=ck.optional(
            backoff, "retry_after_max", "routing.backoff", non_negative, p.retry_after_max
        ),
    )
    return Routing(
        policy=policy,
        circuit_failures=ck.optional(
            circuit, "failures", "routing.circuit", _positive_int, d.circuit_failures
        ),
        circuit_cooldown=ck.optional(
            circuit, "cooldown", "routing.circuit", positive, d.circuit_cooldown
        ),
        circuit_window=ck.optional(
            circuit, "window", "routing.circuit", positive, d.circuit_window
        ),
        circuit_failure_rate=ck.optional(
            circuit, "failure_rate", "routing.circuit", _rate, d.circuit_failure_rate
        ),
        circuit_min_requests=ck.optional(
            circuit, "min_requests", "routing.circuit", _positive_int, d.circuit_min_requests
        ),
    )


def _parse_provider(ck: Checker, name: str, raw: object, path: str) -> Provider:
    node = ck.mapping(raw, path, _PROVIDER_KEYS)
    if node is None:
        return Provider(name, "openai", "")
    api = ck.optional(node, "api", path, member(APIS, "API", listed=True), "openai")
    dialect = ck.optional(
        node,
        "dialect",
        path,
        member(LEGACY_DIALECTS | {"openai"}, "dialect", listed=True),
        "openai",
    )
    responses = ck.optional(node, "responses", path, boolean, False)
    if api in NATIVE_APIS:
        if node.get("dialect") is not None:
            ck.fail(join_path(path, "dialect"), "is only for api: openai (a native API is its own)")
        if responses:
            ck.fail(join_path(path, "responses"), "is only for api: openai")
        dialect = api
    cloud = parse_cloud(ck, api, node, path)
    if cloud is None:
        base_url = ck.require(node, "base_url", path, _base_url, "")
    else:
        base_url = ck.optional(node, "base_url", path, _base_url, None) or default_base_url(cloud)
    if isinstance(cloud, GoogleAuth):
        base_url += vertex_prefix(cloud)
    drop_betas: tuple[str, ...] = ()
    if "drop_betas" in node:
        drop_betas = tuple(beta for _, beta in ck.items(node, "drop_betas", path, text))
        if api != "anthropic":
            ck.fail(join_path(path, "drop_betas"), "is only for api: anthropic")
    headers = _string_map(ck, node.get("headers"), join_path(path, "headers"), _header_name)
    for header in headers if cloud is not None else ():
        if header.lower() in SIGNED_HEADERS:
            ck.fail(
                join_path(join_path(path, "headers"), header), f"is set by api: {api}'s signing"
            )
    return Provider(
        name=name,
        api=api,
        base_url=base_url,
        api_key=ck.optional(node, "api_key", path, _api_key, None),
        headers=headers,
        query=_string_map(ck, node.get("query"), join_path(path, "query")),
        timeouts=_parse_timeouts(ck, node.get("timeouts"), join_path(path, "timeouts")),
        stream_usage=ck.optional(node, "stream_usage", path, boolean, True),
        dialect=dialect,
        max_connections=ck.optional(node, "max_connections", path, _positive_int, MAX_CONNECTIONS),
        responses=responses,
        drop_betas=drop_betas,
        telemetry_name=ck.optional(node, "telemetry_name", path, _telemetry_name, None),
        cloud=cloud,
    )


def _parse_timeouts(ck: Checker, raw: object, path: str) -> Timeouts:
    node, d = ck.mapping(raw, path, _TIMEOUT_KEYS) or {}, Timeouts()
    return Timeouts(
        connect=ck.optional(node, "connect", path, positive, d.connect),
        first_byte=ck.optional(node, "first_byte", path, positive, d.first_byte),
        idle=ck.optional(node, "idle", path, positive, d.idle),
        total=ck.optional(node, "total", path, positive, d.total),
    )


def _string_map(
    ck: Checker, raw: object, path: str, check_name: Callable[[str], object] | None = None
) -> Mapping[str, str]:
    result: dict[str, str] = {}
    for name, value, item in ck.named(ck.mapping(raw, path) or {}, path):
        try:
            if check_name is not None:
                check_name(name)
            result[name] = ck.read(value, _plain_string)
        except Invalid as exc:
            ck.fail(item, *exc.args)
    return MappingProxyType(result)


def _parse_model(
    ck: Checker, name: str, raw: object, path: str, providers: Collection[str]
) -> Model:
    # Three spellings: one deployment, a list of them, or the full form with model options.
    if isinstance(raw, list):
        return Model(name, _parse_deployments(ck, raw, path, providers))
    if isinstance(raw, dict) and "deployments" in raw:
        node = ck.mapping(raw, path, _MODEL_KEYS) or {}
        listed = _parse_deployments(
            ck, node["deployments"], join_path(path, "deployments"), providers
        )
        return Model(
            name,
            listed,
            ck.optional(node, "reasoning", path, boolean, True),
            ck.optional(node, "max_tokens", path, _positive_int, 4096),
            _parse_budgets(ck, node.get("thinking_budgets"), join_path(path, "thinking_budgets")),
        )
    if isinstance(raw, dict):
        return Model(name, (_parse_deployment(ck, raw, path, providers),))
    ck.fail(path, "must be a deployment, a list of deployments, or {deployments: [...]}")
    return Model(name, ())


def _parse_budgets(ck: Checker, raw: object, path: str) -> Mapping[str, int]:
    node = ck.mapping(raw, path, THINKING_BUDGETS.keys()) or {}
    # Only the efforts given are replaced; the others keep their defaults.
    budgets = dict(THINKING_BUDGETS)
    for effort in THINKING_BUDGETS:
        if node.get(effort) is not None:
            budgets[effort] = ck.require(node, effort, path, _positive_int, 0)
    return MappingProxyType(budgets)


def _parse_deployments(
    ck: Checker, raw: object, path: str, providers: Collection[str]
) -> tuple[Deployment, ...]:
    if not isinstance(raw, list) or not raw:
        ck.fail(path, "must be a non-empty list")
        return ()
    return tuple(
        _parse_deployment(ck, item, f"{path}[{i}]", providers) for i, item in enumerate(raw)
    )


def _parse_deployment(
    ck: Checker, raw: object, path: str, providers: Collection[str]
) -> Deployment:
    node = ck.mapping(raw, path, _DEPLOYMENT_KEYS)
    if node is None:
        return Deployment("", "")
    return Deployment(
        provider=ck.require(node, "provider", path, member(providers, "provider"), ""),
        model=ck.require(node, "model", path, text, ""),
        weight=ck.optional(node, "weight", path, positive, 1.0),
        priority=ck.optional(node, "priority", path, _any_int, 0),
        publisher=parse_publisher(ck, node, path),
    )


def _parse_team(
    ck: Checker,
    name: str,
    raw: object,
    path: str,
    seen: dict[bytes, str],
    secrets: list[str],
) -> Team:
    node = ck.mapping(raw, path, _TEAM_KEYS)
    if node is None:
        return Team(name, (), ())
    digests = _keys(ck, node, path, seen, secrets)
    models = tuple(glob for _, glob in ck.items(node, "models", path, text))
    limits = parse_limits(ck, node.get("limits"), join_path(path, "limits"))
    cache = ck.optional(node, "cache", path, boolean, True)
    return Team(name, digests, models, limits, cache)


def _keys(
    ck: Checker,
    node: Mapping[str, object],
    path: str,
    seen: dict[bytes, str],
    secrets: list[str],
) -> tuple[bytes, ...]:
    """The digests of ``node``'s ``keys`` (a team's, or the admin's); each key's clear form
    goes to ``secrets``, for redaction."""
    digests: list[bytes] = []
    for item, (key, digest) in ck.items(node, "keys", path, _team_key):
        if key is not None:
            secrets.append(key)
        # One key, one team (or the admin): otherwise whose request it is would be ambiguous.
        if digest in seen:
            ck.fail(item, f"duplicate key: same as {seen[digest]}")
        seen.setdefault(digest, item)
        digests.append(digest)
    return tuple(digests)


# --- the readers of this contract's own values (the general ones: proxy.core.yaml_readers) ---

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 section 5.6.2, token
# How a request is framed and its connection kept (RFC 9112 6, RFC 9110 7.6.1 and 10.1.1): the
# proxy's to say on each request to a provider, never a configured constant.
_FRAMING_HEADERS = frozenset(
    {
        "connection",
        "content-length",
        "expect",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# A cloud provider's headers that its signature covers or carries (proxy.http.cloud): one
# configured would be sent unsigned, or twice.
SIGNED_HEADERS: Final = frozenset(
    {"authorization", "host", "content-type", "x-amz-date", "x-amz-security-token"}
)
_KEY = re.compile(r"[\x21-\x7e]+")  # what fits in "Authorization: Bearer <key>" unmangled
SECRET_MIN: Final = 8
# Header and query names whose values are settings, not credentials: never redacted (Azure's
# api-version=preview). A value under a name with one of _CREDENTIAL_WORDS in it is held to
# SECRET_MIN; any other value of that length or more is redacted too (docs/security.md).
NOT_SECRET: Final = frozenset(
    {
        "accept",
        "anthropic-beta",
        "anthropic-version",
        "api-version",
        "host",
        "openai-beta",
        "user-agent",
    }
)
_CREDENTIAL_WORDS: Final = (
    "key",
    "token",
    "secret",
    "auth",
    "password",
    "signature",
)
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


_port = int_reader(1, 65535, "must be an integer from 1 to 65535")
_positive_int = int_reader(1, None, "must be a positive integer")
_any_int = int_reader(None, None, "must be an integer")


def _rate(value: object) -> float:
    rate = positive(value)
    if rate > 1:
        raise Invalid("must be a fraction above 0 and at most 1")
    return rate


def _gc_interval(value: object) -> float:
    # Shorter, the ticks would cost more than they save; longer, cyclic garbage would pile up
    # between them, and memory growth (which starts a full collection) go unseen as long.
    seconds = non_negative(value)
    if seconds != 0 and not 0.01 <= seconds <= 10:
        raise Invalid("must be 0 (CPython's own schedule) or from 0.01 to 10 seconds")
    return seconds


def _base_url(value: object) -> str:
    url, _ = http_url(value, ": use api_key or headers", ": use query")
    return url.removesuffix("/")


def _header_name(name: str) -> str:
    if not _HEADER_NAME.fullmatch(name):
        raise Invalid("not a valid header name")
    if name.lower() in _FRAMING_HEADERS:
        raise Invalid("is set by the proxy for each request")
    return name


def _telemetry_name(value: object) -> str:
    # A gen_ai.provider.name: a lowercase name such as "my_vllm" or "acme.inference".
    name = text(value)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise Invalid("must be a lowercase name of letters, digits, '.', '_' or '-'")
    return name


def _plain_string(value: object) -> str:
    if not isinstance(value, str):
        raise Invalid("must be a string")
    # A line break from an environment variable would smuggle in a header of its own.
    if any(c in value for c in "\r\n\0"):
        raise Invalid("must not contain line breaks")
    return value


def _api_key(value: object) -> str | None:
    # It goes out in a header (Authorization): the same rule as a header's value. A key read
    # from a file often ends with a line break; refusing it names the problem at load time.
    return _plain_string(value) or None


def _team_key(value: object) -> tuple[str | None, bytes]:
    """(the key, unless given as its digest; its digest)."""
    key = text(value)
    if not _KEY.fullmatch(key):
        raise Invalid("must be printable ASCII without spaces")
    if not key.startswith("sha256:"):
        return _secret(key), key_digest(key)
    if not _SHA256_HEX.fullmatch(key.removeprefix("sha256:")):
        raise Invalid("'sha256:' must be followed by exactly 64 hex digits")
    return None, bytes.fromhex(key.removeprefix("sha256:"))


def _secret(value: object) -> str:
    # A short secret is guessable, and redacting it would mangle ordinary words in the messages
    # it is redacted from (docs/security.md).
    secret = text(value)
    if len(secret) < SECRET_MIN:
        raise Invalid(f"a secret must be at least {SECRET_MIN} characters")
    return secret
