"""Ollama's native API (``POST {base_url}/api/chat`` and ``/api/generate``, NDJSON streams),
translated both ways.

docs/providers/ollama.md says what is translated and what is refused.
"""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects.dialect import Dialect

DIALECT: Final = Dialect(
    "ollama", paths={"chat": "/api/chat", "completions": "/api/generate"}, native=True
)
