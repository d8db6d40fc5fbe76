"""The ``cache`` section of the configuration (docs/cache.md).

    cache:
      backend: memory          # memory (each worker, LRU) | redis (state.redis, shared)
      ttl_seconds: 3600
      max_entries: 10000       # memory backend
      max_entry_bytes: 1048576 # a whole answer's canonical JSON larger than this is not stored
      scope: team              # team: a team reads only its own entries | global
      models: ["*"]            # the client-facing model names whose answers are cached (globs)
      timeout: 0.1             # redis backend: the longest a lookup or a store may take

A team opts out with ``cache: false`` under its entry in ``teams``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final, Literal

from proxy.core.yaml_readers import Checker, Invalid, as_number, int_reader, member, text

Backend = Literal["memory", "redis"]
Scope = Literal["team", "global"]

CACHE_KEYS: Final = frozenset(
    {"backend", "ttl_seconds", "max_entries", "max_entry_bytes", "scope", "models", "timeout"}
)
# A day in seconds times a year: any longer, and an entry outlives the model it came from.
_TTL_MAX: Final = 366 * 86400
# The memory backend holds at most this many entries of at most this many bytes each: a
# configuration that would let one worker hold more than a few GiB of answers is a mistake.
_ENTRIES_MAX: Final = 10_000_000
_ENTRY_BYTES_MAX: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CacheConfig:
    backend: Backend = "memory"
    ttl_seconds: int = 3600
    max_entries: int = 10_000
    max_entry_bytes: int = 1024 * 1024
    scope: Scope = "team"
    models: tuple[str, ...] = ("*",)
    timeout: float = 0.1

    def caches(self, model: str) -> bool:
        """Whether answers of the client-facing ``model`` are cached."""
        return any(fnmatchcase(model, glob) for glob in self.models)


def parse_cache(ck: Checker, raw: object, shared: bool) -> CacheConfig | None:
    """``cache``, or None when the section is absent. ``shared``: a Redis is configured under
    ``state`` (the redis backend uses it)."""
    if raw is None:
        return None
    node = ck.mapping(raw, "cache", CACHE_KEYS) or {}
    d = CacheConfig()
    backend = ck.optional(node, "backend", "cache", _backend, "memory")
    if backend == "redis" and not shared:
        ck.fail("cache.backend", "redis needs state.redis or state.sentinel (where the cache is)")
    models = d.models
    if "models" in node:
        models = tuple(glob for _, glob in ck.items(node, "models", "cache", text))
    scope = ck.optional(node, "scope", "cache", _scope, "team")
    timeout = ck.optional(node, "timeout", "cache", _timeout, d.timeout)
    if backend != "redis" and "timeout" in node:
        ck.fail("cache.timeout", "is only for backend: redis (the memory backend never waits)")
    if backend == "redis" and "max_entries" in node:
        ck.fail("cache.max_entries", "is only for backend: memory (Redis evicts by its maxmemory)")
    return CacheConfig(
        backend="redis" if backend == "redis" else "memory",
        ttl_seconds=ck.optional(node, "ttl_seconds", "cache", _ttl, d.ttl_seconds),
        max_entries=ck.optional(node, "max_entries", "cache", _entries, d.max_entries),
        max_entry_bytes=ck.optional(node, "max_entry_bytes", "cache", _bytes, d.max_entry_bytes),
        scope="global" if scope == "global" else "team",
        models=models,
        timeout=timeout,
    )


_backend = member(("memory", "redis"), "backend", listed=True)
_scope = member(("team", "global"), "scope", listed=True)
_ttl = int_reader(1, _TTL_MAX, f"must be a whole number of seconds from 1 to {_TTL_MAX}")
_entries = int_reader(1, _ENTRIES_MAX, f"must be a whole number from 1 to {_ENTRIES_MAX}")
_bytes = int_reader(1, _ENTRY_BYTES_MAX, f"must be a whole number from 1 to {_ENTRY_BYTES_MAX}")


def _timeout(value: object) -> float:
    seconds = as_number(value)
    if seconds is None or not 0.001 <= seconds <= 5:
        raise Invalid("must be between 0.001 and 5 seconds (a request waits for it)")
    return seconds
