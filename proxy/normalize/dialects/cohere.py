"""Cohere's v2 Chat API (``POST {base_url}/v2/chat``), translated both ways.

docs/providers/cohere.md says what is translated and what is refused.
"""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects.dialect import Dialect

DIALECT: Final = Dialect("cohere", paths={"chat": "/v2/chat"}, native=True)
