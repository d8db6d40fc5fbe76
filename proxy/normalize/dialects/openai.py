"""OpenAI's API, and every server that speaks it (Azure, vLLM, TGI's Messages API, Groq, ...):
the normalizer's own shape, its quirks handled by the tolerant normalizer itself."""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects.dialect import Dialect

DIALECT: Final = Dialect(
    "openai",
    paths={
        "chat": "/chat/completions",
        "completions": "/completions",
        "embeddings": "/embeddings",
        # Only for a provider that serves the Responses API itself (its ``responses`` setting).
        "responses": "/responses",
    },
)
