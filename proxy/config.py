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
import math
import os
import re
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from proxy.errors import ConfigError
from proxy.normalize.legacy import DIALECTS as LEGACY_DIALECTS

APIS = frozenset({"openai"})
# The event shapes the normalizer can read (proxy.normalize.legacy is their one list).
DIALECTS = frozenset(LEGACY_DIALECTS)
_NO_STRINGS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 10.0
    first_byte: float = 120.0
    idle: float = 120.0
    total: float = 900.0


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


@dataclass(frozen=True, slots=True)
class Deployment:
    provider: str
    model: str
    weight: float = 1.0
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    deployments: tuple[Deployment, ...]
    reasoning: bool = True


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    key_digests: tuple[bytes, ...]
    models: tuple[str, ...]


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
    circuit_failures: int = 5
    circuit_cooldown: float = 30.0


@dataclass(frozen=True, slots=True)
class Config:
    server: Server
    metrics: Metrics
    access_log: bool
    providers: Mapping[str, Provider]
    models: Mapping[str, Model]
    teams: Mapping[str, Team]
    routing: Routing = field(default_factory=Routing)


def key_digest(key: str) -> bytes:
    """The sha256 digest under which a team key is stored and looked up."""
    # surrogatepass: a header decoded with surrogateescape must hash, not raise; such a key
    # can never equal a configured one, which is printable ASCII.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def hash_key(key: str) -> str:
    """The ``sha256:<hex>`` form of ``key``, to put in a config file instead of the key."""
    return "sha256:" + key_digest(key).hex()


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate the YAML file at ``path``; every failure is a ConfigError."""
    return parse_config(_read_yaml(Path(path)), os.environ if env is None else env)


def parse_config(raw: object, env: Mapping[str, str]) -> Config:
    """Validate the YAML-loaded ``raw``, substituting variables from ``env``."""
    ck = _Checker(env)
    root = ck.mapping(raw, "", _TOP_KEYS)
    if root is None:
        raise ConfigError(ck.problems)
    server = _parse_server(ck, root.get("server"))
    metrics = _parse_metrics(ck, root.get("metrics"), server)
    access_log = ck.optional(root, "access_log", "", _boolean, True)
    routing = _parse_routing(ck, root.get("routing"))
    providers = {n: _parse_provider(ck, n, v, p) for n, v, p in ck.section(root, "providers")}
    # A deployment may name a provider whose own entry has problems: those are reported there.
    names = frozenset(providers)
    models = {n: _parse_model(ck, n, v, p, names) for n, v, p in ck.section(root, "models")}
    seen_keys: dict[bytes, str] = {}
    teams = {n: _parse_team(ck, n, v, p, seen_keys) for n, v, p in ck.section(root, "teams")}
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
    )


# --- sections ---------------------------------------------------------------------------------

_TOP_KEYS = frozenset(
    {"server", "metrics", "access_log", "routing", "providers", "models", "teams"}
)
_SERVER_KEYS = frozenset(f.name for f in fields(Server))
_METRICS_KEYS = frozenset(f.name for f in fields(Metrics))
_TIMEOUT_KEYS = frozenset(f.name for f in fields(Timeouts))
_PROVIDER_KEYS = frozenset(f.name for f in fields(Provider)) - {"name"}
_DEPLOYMENT_KEYS = frozenset(f.name for f in fields(Deployment))
_MODEL_KEYS = frozenset({"deployments", "reasoning"})
_TEAM_KEYS = frozenset({"keys", "models"})
_ROUTING_KEYS = frozenset({"attempts", "backoff", "circuit"})
_BACKOFF_KEYS = frozenset({"base", "max", "retry_after_max"})
_CIRCUIT_KEYS = frozenset({"failures", "cooldown"})


def _parse_server(ck: _Checker, raw: object) -> Server:
    node, d = ck.mapping(raw, "server", _SERVER_KEYS) or {}, Server()
    return Server(
        host=ck.optional(node, "host", "server", _text, d.host),
        port=ck.optional(node, "port", "server", _port, d.port),
        workers=ck.optional(node, "workers", "server", _positive_int, d.workers),
        max_body_bytes=ck.optional(
            node, "max_body_bytes", "server", _positive_int, d.max_body_bytes
        ),
        read_timeout=ck.optional(node, "read_timeout", "server", _positive, d.read_timeout),
        drain_seconds=ck.optional(node, "drain_seconds", "server", _non_negative, d.drain_seconds),
        shutdown_delay=ck.optional(
            node, "shutdown_delay", "server", _non_negative, d.shutdown_delay
        ),
    )


def _parse_metrics(ck: _Checker, raw: object, server: Server) -> Metrics:
    node = ck.mapping(raw, "metrics", _METRICS_KEYS) or {}
    enabled = ck.optional(node, "enabled", "metrics", _boolean, True)
    host = ck.optional(node, "host", "metrics", _optional_text, None)
    port = ck.optional(node, "port", "metrics", _port, None)
    if host is not None and port is None:
        ck.fail("metrics.port", "required when metrics.host is set")
    if port is not None and port == server.port and host in (None, server.host):
        ck.fail("metrics.port", "must differ from server.port (null serves /metrics there)")
    return Metrics(
        enabled=enabled,
        host=server.host if host is None and port is not None else host,
        port=port,
        token=ck.optional(node, "token", "metrics", _optional_text, None),
    )


def _parse_routing(ck: _Checker, raw: object) -> Routing:
    node, d = ck.mapping(raw, "routing", _ROUTING_KEYS) or {}, Routing()
    backoff = ck.mapping(node.get("backoff"), "routing.backoff", _BACKOFF_KEYS) or {}
    circuit = ck.mapping(node.get("circuit"), "routing.circuit", _CIRCUIT_KEYS) or {}
    p = d.policy
    # Zero is a choice, not a mistake: base 0 retries at once, retry_after_max 0 never waits.
    policy = RetryPolicy(
        attempts=ck.optional(node, "attempts", "routing", _positive_int, p.attempts),
        backoff_base=ck.optional(backoff, "base", "routing.backoff", _non_negative, p.backoff_base),
        backoff_max=ck.optional(backoff, "max", "routing.backoff", _non_negative, p.backoff_max),
        retry_after_max=ck.optional(
            backoff, "retry_after_max", "routing.backoff", _non_negative, p.retry_after_max
        ),
    )
    return Routing(
        policy=policy,
        circuit_failures=ck.optional(
            circuit, "failures", "routing.circuit", _positive_int, d.circuit_failures
        ),
        circuit_cooldown=ck.optional(
            circuit, "cooldown", "routing.circuit", _positive, d.circuit_cooldown
        ),
    )


def _parse_provider(ck: _Checker, name: str, raw: object, path: str) -> Provider:
    node = ck.mapping(raw, path, _PROVIDER_KEYS)
    if node is None:
        return Provider(name, "openai", "")
    return Provider(
        name=name,
        api=ck.optional(node, "api", path, _choice(APIS, "API"), "openai"),
        base_url=ck.require(node, "base_url", path, _base_url, ""),
        api_key=ck.optional(node, "api_key", path, _optional_text, None),
        headers=_string_map(ck, node.get("headers"), _join(path, "headers"), _header_name),
        query=_string_map(ck, node.get("query"), _join(path, "query")),
        timeouts=_parse_timeouts(ck, node.get("timeouts"), _join(path, "timeouts")),
        stream_usage=ck.optional(node, "stream_usage", path, _boolean, True),
        dialect=ck.optional(node, "dialect", path, _choice(DIALECTS, "dialect"), "openai"),
    )


def _parse_timeouts(ck: _Checker, raw: object, path: str) -> Timeouts:
    node, d = ck.mapping(raw, path, _TIMEOUT_KEYS) or {}, Timeouts()
    return Timeouts(
        connect=ck.optional(node, "connect", path, _positive, d.connect),
        first_byte=ck.optional(node, "first_byte", path, _positive, d.first_byte),
        idle=ck.optional(node, "idle", path, _positive, d.idle),
        total=ck.optional(node, "total", path, _positive, d.total),
    )


def _string_map(
    ck: _Checker, raw: object, path: str, check_name: Callable[[str], object] | None = None
) -> Mapping[str, str]:
    result: dict[str, str] = {}
    for name, value, item in ck.named(ck.mapping(raw, path) or {}, path):
        try:
            if check_name is not None:
                check_name(name)
            result[name] = ck.read(value, _plain_string)
        except _Invalid as exc:
            ck.fail(item, *exc.args)
    return MappingProxyType(result)


def _parse_model(
    ck: _Checker, name: str, raw: object, path: str, providers: Collection[str]
) -> Model:
    # Three spellings: one deployment, a list of them, or the full form with model options.
    if isinstance(raw, list):
        return Model(name, _parse_deployments(ck, raw, path, providers))
    if isinstance(raw, dict) and "deployments" in raw:
        node = ck.mapping(raw, path, _MODEL_KEYS) or {}
        listed = _parse_deployments(ck, node["deployments"], _join(path, "deployments"), providers)
        return Model(name, listed, ck.optional(node, "reasoning", path, _boolean, True))
    if isinstance(raw, dict):
        return Model(name, (_parse_deployment(ck, raw, path, providers),))
    ck.fail(path, "must be a deployment, a list of deployments, or {deployments: [...]}")
    return Model(name, ())


def _parse_deployments(
    ck: _Checker, raw: object, path: str, providers: Collection[str]
) -> tuple[Deployment, ...]:
    if not isinstance(raw, list) or not raw:
        ck.fail(path, "must be a non-empty list")
        return ()
    return tuple(
        _parse_deployment(ck, item, f"{path}[{i}]", providers) for i, item in enumerate(raw)
    )


def _parse_deployment(
    ck: _Checker, raw: object, path: str, providers: Collection[str]
) -> Deployment:
    node = ck.mapping(raw, path, _DEPLOYMENT_KEYS)
    if node is None:
        return Deployment("", "")
    return Deployment(
        provider=ck.require(node, "provider", path, _member(providers, "provider"), ""),
        model=ck.require(node, "model", path, _text, ""),
        weight=ck.optional(node, "weight", path, _positive, 1.0),
        priority=ck.optional(node, "priority", path, _any_int, 0),
    )


def _parse_team(ck: _Checker, name: str, raw: object, path: str, seen: dict[bytes, str]) -> Team:
    node = ck.mapping(raw, path, _TEAM_KEYS)
    if node is None:
        return Team(name, (), ())
    digests: list[bytes] = []
    for item, digest in ck.items(node, "keys", path, _key_digest):
        # One key, one team: otherwise which team a request belongs to would be ambiguous.
        if digest in seen:
            ck.fail(item, f"duplicate key: same as {seen[digest]}")
        seen.setdefault(digest, item)
        digests.append(digest)
    models = tuple(glob for _, glob in ck.items(node, "models", path, _text))
    return Team(name, tuple(digests), models)


# --- scalar readers: value -> typed value, or _Invalid(what is wrong) --------------------------

T = TypeVar("T")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 section 5.6.2, token
_KEY = re.compile(r"[\x21-\x7e]+")  # what fits in "Authorization: Bearer <key>" unmangled
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


class _Invalid(Exception):
    """What is wrong with a value; the caller knows where it is."""


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid("must be a non-empty string")
    return value


def _optional_text(value: object) -> str | None:
    if not isinstance(value, str):
        raise _Invalid("must be a string")
    return value or None


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _Invalid("must be true or false")


def _as_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):  # YAML true is an int to Python
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def _as_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str) and not _NUMBER.fullmatch(value):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too big for a float
        return None
    return number if math.isfinite(number) else None


def _int_reader(low: int | None, high: int | None, what: str) -> Callable[[object], int]:
    def read(value: object) -> int:
        number = _as_int(value)
        if number is None or (low is not None and number < low):
            raise _Invalid(what)
        if high is not None and number > high:
            raise _Invalid(what)
        return number

    return read


_port = _int_reader(1, 65535, "must be an integer from 1 to 65535")
_positive_int = _int_reader(1, None, "must be a positive integer")
_any_int = _int_reader(None, None, "must be an integer")


def _positive(value: object) -> float:
    number = _as_number(value)
    if number is None or number <= 0:
        raise _Invalid("must be a positive number")
    return number


def _non_negative(value: object) -> float:
    number = _as_number(value)
    if number is None or number < 0:
        raise _Invalid("must be a number >= 0")
    return number


def _choice(options: frozenset[str], noun: str) -> Callable[[object], str]:
    def read(value: object) -> str:
        name = _text(value)
        if name not in options:
            raise _Invalid(f"unknown {noun} '{name}' (known: {', '.join(sorted(options))})")
        return name

    return read


def _member(names: Collection[str], noun: str) -> Callable[[object], str]:
    # The known names are in the same file, so the message does not list them.
    def read(value: object) -> str:
        name = _text(value)
        if name not in names:
            raise _Invalid(f"unknown {noun} '{name}'")
        return name

    return read


def _base_url(value: object) -> str:
    url, not_a_url = _text(value), "must be an http:// or https:// URL with a host"
    try:
        parts = urlsplit(url)
        port = parts.port  # a property that raises ValueError for a bad port
    except ValueError:
        raise _Invalid(not_a_url) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise _Invalid(not_a_url)
    if any(c.isspace() for c in url):
        raise _Invalid("must not contain whitespace")
    # Both would leak into logs and `check-config` output, and have proper homes.
    if parts.username is not None:
        raise _Invalid("must not contain credentials: use api_key or headers")
    if parts.query or parts.fragment:
        raise _Invalid("must not have a query or fragment: use query")
    return url.removesuffix("/")


def _header_name(name: str) -> str:
    if not _HEADER_NAME.fullmatch(name):
        raise _Invalid("not a valid header name")
    return name


def _plain_string(value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid("must be a string")
    # A line break from an environment variable would smuggle in a header of its own.
    if any(c in value for c in "\r\n\0"):
        raise _Invalid("must not contain line breaks")
    return value


def _key_digest(value: object) -> bytes:
    key = _text(value)
    if not _KEY.fullmatch(key):
        raise _Invalid("must be printable ASCII without spaces")
    if not key.startswith("sha256:"):
        return key_digest(key)
    if not _SHA256_HEX.fullmatch(key.removeprefix("sha256:")):
        raise _Invalid("'sha256:' must be followed by exactly 64 hex digits")
    return bytes.fromhex(key.removeprefix("sha256:"))


# --- environment substitution -------------------------------------------------------------

_REFERENCE = re.compile(r"\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})?")


def _substitute(text: str, env: Mapping[str, str]) -> str:
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1, 2)
        if match.group() == "$${":
            return "${"
        if name is None or (default is not None and "${" in default):
            raise _Invalid("bad reference: write ${VAR}, ${VAR:-default}, or $${ for a literal ${")
        value = env.get(name)
        if default is not None and not value:
            return default
        if value is None:
            missing.append(f"environment variable {name} is not set")
            return ""
        return value

    result = _REFERENCE.sub(replace, text)
    if missing:
        raise _Invalid(*missing)
    return result


# --- the problem collector ------------------------------------------------------------------


@dataclass(slots=True)
class _Checker:
    env: Mapping[str, str]
    problems: list[str] = field(default_factory=list)

    def fail(self, path: str, *whats: str) -> None:
        self.problems.extend(f"{path or '(top level)'}: {what}" for what in whats)

    def read(self, raw: object, read: Callable[[object], T]) -> T:
        """``raw``, substituted if a string, then read; raises _Invalid."""
        return read(_substitute(raw, self.env) if isinstance(raw, str) else raw)

    def value(self, raw: object, path: str, read: Callable[[object], T], default: T) -> T:
        """``raw`` read; ``default`` if it is invalid (and reported)."""
        try:
            return self.read(raw, read)
        except _Invalid as exc:
            self.fail(path, *exc.args)
            return default

    def optional(
        self,
        node: Mapping[str, object],
        key: str,
        path: str,
        read: Callable[[object], T],
        default: T,
    ) -> T:
        """The optional ``node[key]``: ``default`` if absent, null or invalid."""
        raw = node.get(key)
        return default if raw is None else self.value(raw, _join(path, key), read, default)

    def require(
        self, node: Mapping[str, object], key: str, path: str, read: Callable[[object], T], none: T
    ) -> T:
        """The required ``node[key]``; ``none`` if it is absent or invalid (and reported)."""
        if key not in node:
            self.fail(path, f"required key '{key}' is missing")
            return none
        return self.value(node[key], _join(path, key), read, none)

    def items(
        self, node: Mapping[str, object], key: str, path: str, read: Callable[[object], T]
    ) -> list[tuple[str, T]]:
        """The valid items of the required non-empty list ``node[key]``, with their paths."""
        here, raw = _join(path, key), node.get(key)
        if key not in node:
            self.fail(path, f"required key '{key}' is missing")
            return []
        if not isinstance(raw, list) or not raw:
            self.fail(here, "must be a non-empty list")
            return []
        pairs: list[tuple[str, T]] = []
        for i, item in enumerate(raw):
            try:
                pairs.append((f"{here}[{i}]", self.read(item, read)))
            except _Invalid as exc:
                self.fail(f"{here}[{i}]", *exc.args)
        return pairs

    def mapping(
        self, raw: object, path: str, keys: Collection[str] | None = None
    ) -> dict[Any, Any] | None:
        """``raw`` (null: empty) as a mapping, None if it is not one; keys outside ``keys`` are
        reported and dropped. A value that is not a mapping is one problem, however many
        required keys it lacks."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.fail(path, "must be a mapping")
            return None
        if keys is None:
            return raw
        for key in raw:
            if key not in keys:
                self.fail(_join(path, key), "unknown key")
        return {k: v for k, v in raw.items() if k in keys}

    def section(self, root: Mapping[str, object], key: str) -> list[tuple[str, object, str]]:
        """The named entries of the required, non-empty top-level mapping ``key``."""
        if key not in root:
            self.fail("", f"required key '{key}' is missing")
            return []
        raw = root[key]
        if not isinstance(raw, dict) or not raw:
            self.fail(key, "must be a non-empty mapping")
            return []
        return self.named(raw, key)

    def named(self, node: Mapping[object, object], path: str) -> list[tuple[str, object, str]]:
        """(name, value, path) of each entry with a non-empty string name; others reported."""
        entries = []
        for name, value in node.items():
            if not isinstance(name, str) or not name:
                self.fail(_join(path, name), "name must be a non-empty string (quote it)")
            else:
                entries.append((name, value, _join(path, name)))
        return entries


def _join(path: str, key: object) -> str:
    name = key if isinstance(key, str) and key and key.isprintable() else repr(key)
    return f"{path}.{name}" if path else name


# --- YAML --------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping; PyYAML keeps the last silently,
    so a second `research:` team would replace the first without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` may be overridden, by design
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):  # SafeConstructor reports it below
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}'", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start})"]) from exc
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = ", ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError([f"{where}: invalid YAML: {what}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML: {' '.join(str(exc).split())}"]) from exc
