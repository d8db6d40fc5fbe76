"""Normalizers: whatever an upstream sends, the client gets CANONICAL.md's format.

One entry per upstream API family (a provider's ``api`` setting), registered in ``API_FAMILIES``;
today the tolerant OpenAI-compatible normalizer serves every ``api: openai`` provider, with the
upstream dialects of ``dialects/`` adapted on the way in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from proxy.core.config import APIS
from proxy.core.fixes import FIXES
from proxy.core.request import Endpoint
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.fields import RequestContext
from proxy.normalize.response import Normalized, normalize_response
from proxy.normalize.stream import StreamNormalizer

__all__ = [
    "API_FAMILIES",
    "DIALECTS",
    "FIXES",
    "ApiFamily",
    "Endpoint",
    "Normalized",
    "RequestContext",
    "StreamNormalizer",
    "normalize_response",
]


@dataclass(frozen=True, slots=True)
class ApiFamily:
    """How to talk to one family of upstream APIs."""

    stream: Callable[[RequestContext], StreamNormalizer]
    response: Callable[[bytes, RequestContext], Normalized]


_TOLERANT: Final = ApiFamily(StreamNormalizer, normalize_response)
# A native API's dialect hands the tolerant normalizer OpenAI-shaped chunks and bodies, so every
# family is the same normalizer today; the key is the provider's ``api``.
API_FAMILIES: Final = dict.fromkeys(APIS, _TOLERANT)
