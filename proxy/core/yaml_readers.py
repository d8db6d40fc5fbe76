"""The parts of the configuration parser that know nothing of its contract (``proxy.core.config``).

- ``Checker`` walks YAML-loaded values, substitutes environment references in every string
  value (``${VAR}``, ``${VAR:-default}``, ``$${``; syntax in ``proxy.core.config``) and
  collects every problem as ``path: what`` instead of stopping at the first;
- the readers (``text``, ``boolean``, ``int_reader`` ...) turn one value into a typed one or
  raise ``Invalid`` with what is wrong, never quoting the value (it may be a secret);
- ``read_yaml`` reads a file with a loader that refuses a key given twice in one mapping.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import SplitResult, urlsplit

import yaml

from proxy.core.errors import ConfigError

T = TypeVar("T")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Control characters as a string's repr writes them (a newline as backslash and n).
_ESCAPED: Final = {code: repr(chr(code))[1:-1] for code in (*range(32), 127)}


# --- scalar readers: value -> typed value, or Invalid(what is wrong) -----------------------------


class Invalid(Exception):
    """What is wrong with a value; the caller knows where it is."""


def text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid("must be a non-empty string")
    return value


def optional_text(value: object) -> str | None:
    if not isinstance(value, str):
        raise Invalid("must be a string")
    return value or None


def boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise Invalid("must be true or false")


def _as_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):  # YAML true is an int to Python
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def as_number(value: object) -> float | None:
    """A finite number (an int, a float, or a string that spells one, as ``${VAR}`` gives),
    else None: for readers of their own bounds and messages."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str) and not _NUMBER.fullmatch(value):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too big for a float
        return None
    return number if math.isfinite(number) else None


def int_reader(low: int | None, high: int | None, what: str) -> Callable[[object], int]:
    def read(value: object) -> int:
        number = _as_int(value)
        if number is None or (low is not None and number < low):
            raise Invalid(what)
        if high is not None and number > high:
            raise Invalid(what)
        return number

    return read


def http_url(value: object, credentials: str, query: str) -> tuple[str, SplitResult]:
    """An http:// or https:// URL with a host and nothing else a service's base URL has no use
    for (whitespace, credentials, a query or fragment: ``credentials`` and ``query`` say where
    those belong instead, they would leak into logs and ``check-config`` output there)."""
    url, not_a_url = text(value), "must be an http:// or https:// URL with a host"
    try:
        parts = urlsplit(url)
        port = parts.port  # a property that raises ValueError for a bad port
    except ValueError:
        raise Invalid(not_a_url) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise Invalid(not_a_url)
    if any(c.isspace() for c in url):
        raise Invalid("must not contain whitespace")
    if parts.username is not None:
        raise Invalid(f"must not contain credentials{credentials}")
    if parts.query or parts.fragment:
        raise Invalid(f"must not have a query or fragment{query}")
    return url, parts


def positive(value: object) -> float:
    number = as_number(value)
    if number is None or number <= 0:
        raise Invalid("must be a positive number")
    return number


def non_negative(value: object) -> float:
    number = as_number(value)
    if number is None or number < 0:
        raise Invalid("must be a number >= 0")
    return number


def member(names: Collection[str], noun: str, *, listed: bool = False) -> Callable[[object], str]:
    """The reader of one of ``names``. ``listed``: an unknown name's message lists the known
    ones, for a fixed set (dialects); a file's own names (its providers) are there to read."""

    def read(value: object) -> str:
        name = text(value)
        if name not in names:
            known = f" (known: {', '.join(sorted(names))})" if listed else ""
            raise Invalid(f"unknown {noun} '{name}'{known}")
        return name

    return read


# --- environment substitution -------------------------------------------------------------


_REFERENCE = re.compile(r"\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})?")


def _substitute(text: str, env: Mapping[str, str]) -> str:
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1, 2)
        if match.group() == "$${":
            return "${"
        if name is None or (default is not None and "${" in default):
            raise Invalid("bad reference: write ${VAR}, ${VAR:-default}, or $${ for a literal ${")
        value = env.get(name)
        if default is not None and not value:
            return default
        if value is None:
            missing.append(f"environment variable {name} is not set")
            return ""
        return value

    result = _REFERENCE.sub(replace, text)
    if missing:
        raise Invalid(*missing)
    return result


# --- the problem collector ------------------------------------------------------------------


@dataclass(slots=True)
class Checker:
    env: Mapping[str, str]
    problems: list[str] = field(default_factory=list)

    def fail(self, path: str, *whats: str) -> None:
        # One line each, whatever a name or value quoted in it holds.
        self.problems.extend(
            f"{path or '(top level)'}: {what}".translate(_ESCAPED) for what in whats
        )

    def read(self, raw: object, read: Callable[[object], T]) -> T:
        """``raw``, substituted if a string, then read; raises Invalid."""
        return read(_substitute(raw, self.env) if isinstance(raw, str) else raw)

    def value(self, raw: object, path: str, read: Callable[[object], T], default: T) -> T:
        """``raw`` read; ``default`` if it is invalid (and reported)."""
        try:
            return self.read(raw, read)
        except Invalid as exc:
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
        return default if raw is None else self.value(raw, join_path(path, key), read, default)

    def require(
        self, node: Mapping[str, object], key: str, path: str, read: Callable[[object], T], none: T
    ) -> T:
        """The required ``node[key]``; ``none`` if it is absent or invalid (and reported)."""
        if key not in node:
            self.fail(path, f"required key '{key}' is missing")
            return none
        return self.value(node[key], join_path(path, key), read, none)

    def items(
        self, node: Mapping[str, object], key: str, path: str, read: Callable[[object], T]
    ) -> list[tuple[str, T]]:
        """The valid items of the required non-empty list ``node[key]``, with their paths."""
        here, raw = join_path(path, key), node.get(key)
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
            except Invalid as exc:
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
                self.fail(join_path(path, key), "unknown key")
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
                self.fail(join_path(path, name), "name must be a non-empty string (quote it)")
            else:
                entries.append((name, value, join_path(path, name)))
        return entries


def join_path(path: str, key: object) -> str:
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


def read_yaml(path: Path) -> object:
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
