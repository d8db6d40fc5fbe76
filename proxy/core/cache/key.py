"""The key of a request's answer in the cache (docs/cache.md): what can change the answer, in
one canonical form, hashed so that no prompt text is ever a key."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson

# Fields that change how an answer is delivered or attributed, never what it says: a streamed
# and a whole request share an entry, and so do two end users of one team.
_UNKEYED: Final = frozenset({"model", "stream", "stream_options", "user"})
# The key's namespace, with the version of its form: entries of another form are never read.
NAMESPACE: Final = "llm-proxy:cache:v1:"


def cache_key(endpoint: str, model: str, body: dict[str, Any], team: str | None) -> str:
    """The entry's key for a request to ``endpoint`` for the client-facing ``model``, of body
    ``body`` (the client's JSON object), read by ``team`` alone (scope team) or by all (None).

    Keys are sorted at every depth, so two bodies that differ only in the order of their keys
    share an entry; every other field (messages, tools, tool_choice, response_format, sampling
    parameters, n, seed, unknown ones) is part of it."""
    keyed = {name: value for name, value in body.items() if name not in _UNKEYED}
    digest = hashlib.sha256()
    # Each part ends with a byte no name holds: "a" + "bc" and "ab" + "c" differ.
    for part in (endpoint, model, "" if team is None else "team:" + team):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(orjson.dumps(keyed, option=orjson.OPT_SORT_KEYS))
    return NAMESPACE + digest.hexdigest()
