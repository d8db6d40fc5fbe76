"""What the cache holds for one answer (docs/cache.md): the canonical whole response, its
usage and when it was stored; and whether an answer may be stored at all."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Final

import orjson

from proxy.core.usage import Source, Usage

# The first field of an encoded entry: one of another version is not read (a miss).
_VERSION: Final = 1
_SOURCES: Final = ("upstream", "estimated")


@dataclass(frozen=True, slots=True)
class Entry:
    """``body``: the canonical whole response (chat, completions or embeddings), as a client of
    that endpoint asking for a whole answer would get it; ``stored``: epoch seconds."""

    body: bytes
    stored: float
    prompt_tokens: int
    completion_tokens: int
    source: Source

    @property
    def usage(self) -> Usage:
        total = self.prompt_tokens + self.completion_tokens
        return Usage(self.prompt_tokens, self.completion_tokens, total, source=self.source)


# In canonical JSON (orjson's: no whitespace), where a key can only be a key: inside a string
# value its quotes would be escaped. So choices are counted without parsing the answer again.
_FINISH: Final = b'"finish_reason":'
_UNFINISHED: Final = b'"finish_reason":null'
_FILTERED: Final = b'"finish_reason":"content_filter"'


def entry_for(
    body: bytes, usage: Usage, stored: float, endpoint: str, n: int, limit: int
) -> Entry | None:
    """The entry for a complete canonical answer ``body`` (as the normalizers make it) to a
    request to ``endpoint`` for ``n`` choices; None for one that must not be stored: over
    ``limit`` bytes, a choice missing, unfinished or cut off by a content filter."""
    if len(body) > limit or not _complete(body, endpoint, n):
        return None
    return Entry(body, stored, usage.prompt_tokens, usage.completion_tokens, usage.source)


def _complete(body: bytes, endpoint: str, n: int) -> bool:
    if endpoint == "embeddings":
        return True  # one vector per input, which the normalizer checked
    choices = body.count(_FINISH)
    if choices == 0 or _UNFINISHED in body:
        return False
    if endpoint == "chat" and choices != n:
        return False  # n asked, fewer answered: the next request would get the same hole
    # A filtered answer may be the filter's mood of the moment; it is not the model's answer.
    return _FILTERED not in body


def encode_entry(entry: Entry) -> bytes:
    """The entry as stored in a shared store: a header line and the body, compressed."""
    header = orjson.dumps(
        [_VERSION, entry.stored, entry.prompt_tokens, entry.completion_tokens, entry.source]
    )
    # Level 1: most of what a higher level saves on JSON text, at a fraction of its CPU.
    return zlib.compress(header + b"\n" + entry.body, 1)


def decode_entry(raw: bytes) -> Entry | None:
    """An entry ``encode_entry`` made; None for anything else (another version, damage)."""
    try:
        plain = zlib.decompress(raw)
        header, _, body = plain.partition(b"\n")
        version, stored, prompt, completion, source = orjson.loads(header)
    except (zlib.error, orjson.JSONDecodeError, ValueError, TypeError):
        return None
    if (
        version != _VERSION
        or source not in _SOURCES
        or type(prompt) is not int
        or type(completion) is not int
        or not isinstance(stored, int | float)
        or not body
    ):
        return None
    known: Source = "upstream" if source == "upstream" else "estimated"
    return Entry(body, float(stored), prompt, completion, known)
