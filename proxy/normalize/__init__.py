"""Normalizers: whatever an upstream sends, the client gets the format of docs/canonical-output.md.

One entry per upstream API family (a provider's ``api`` setting), registered in ``API_FAMILIES``;
today the tolerant OpenAI-compatible normalizer serves every ``api: openai`` provider, with the
upstream dialects of ``dialects/`` adapted on the way in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from proxy.core.config import APIS
from proxy.core.fix_names import FIXES
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.embeddings import normalize_embeddings
from proxy.normalize.fields import RequestContext
from proxy.normalize.present import EventStream
from proxy.normalize.stream import StreamNormalizer
from proxy.normalize.whole import Normalized, normalize_response

__all__ = [
    "API_FAMILIES",
    "DIALECTS",
    "FIXES",
    "ApiFamily",
    "Normalized",
    "RequestContext",
    "StreamNormalizer",
    "normalize_embeddings",
    "normalize_response",
]


@dataclass(frozen=True, slots=True)
class ApiFamily:
    """How to talk to one family of upstream APIs."""

    stream: Callable[[RequestContext], EventStream]
    response: Callable[[bytes, RequestContext], Normalized]
    # Its answers are chat or completions ones (what the relay can collect from a stream, or
    # stream from a whole answer), not another API's (a provider's own Responses API).
    chat: bool = True


def normalize_whole(raw: bytes, ctx: RequestContext) -> Normalized:
    """A whole answer, by the endpoint it answers: embeddings are not completions."""
    if ctx.endpoint == "embeddings":
        return normalize_embeddings(raw, ctx)
    return normalize_response(raw, ctx)


_TOLERANT: Final = ApiFamily(StreamNormalizer, normalize_whole)
# A native API's dialect hands the tolerant normalizer OpenAI-shaped chunks and bodies, so every
# family is the same normalizer today; the key is the provider's ``api``.
API_FAMILIES: Final = dict.fromkeys(APIS, _TOLERANT)
