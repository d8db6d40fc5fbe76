"""A request's ``Cache-Control`` (RFC 9111 section 5.2.1), as the response cache reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Control:
    """``lookup``: a stored answer may be served; ``store``: the fresh answer may be stored;
    ``max_age``: the oldest entry accepted, in seconds (None: any within its TTL)."""

    lookup: bool = True
    store: bool = True
    max_age: int | None = None


DEFAULT: Final = Control()


def read_control(header: str | None) -> Control:
    """The controls a ``Cache-Control`` header value asks for; directives the cache has no use
    for (``no-transform``, ``only-if-cached`` ...) are ignored, as RFC 9111 lets a cache do."""
    if not header:
        return DEFAULT
    lookup = store = True
    max_age: int | None = None
    for directive in header.split(","):
        name, _, argument = directive.strip().partition("=")
        name = name.strip().lower()
        if name == "no-store":
            lookup = store = False
        elif name == "no-cache":
            lookup = False
        elif name == "max-age":
            seconds = argument.strip().strip('"')
            # An invalid age makes every entry stale (RFC 9111 section 4.2.1): none is served,
            # and the fresh answer is stored.
            age = int(seconds) if seconds.isascii() and seconds.isdigit() else 0
            max_age = age if max_age is None else min(max_age, age)
    if max_age == 0:
        lookup = False
    return Control(lookup, store, max_age)
