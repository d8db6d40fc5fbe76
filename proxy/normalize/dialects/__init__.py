"""Upstream dialects: one module per upstream API, holding what is particular to it (its URL
paths, how its events and bodies become OpenAI-compatible ones), all registered in
``DIALECTS``. Nothing about a provider's API lives anywhere else.

A provider's ``dialect`` setting names its entry. The tolerant normalizer finishes whatever an
adapter hands it (or the upstream's own event, where there is no adapter).
"""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects import friendli_2024, maritaca_inference, openai
from proxy.normalize.dialects.dialect import Dialect

__all__ = ["DIALECTS", "Dialect"]

DIALECTS: Final[dict[str, Dialect]] = {
    dialect.name: dialect
    for dialect in (openai.DIALECT, friendli_2024.DIALECT, maritaca_inference.DIALECT)
}
