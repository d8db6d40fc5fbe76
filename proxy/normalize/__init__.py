"""Normalizers: whatever an upstream sends, the client gets CANONICAL.md's format.

One entry per upstream API family (a provider's ``api`` setting), registered in ``API_FAMILIES``;
today the tolerant OpenAI-compatible normalizer serves every ``api: openai`` provider, with the
upstream dialects of ``dialects/`` adapted on the way in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

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


API_FAMILIES: Final = {"openai": ApiFamily(StreamNormalizer, normalize_response)}
