"""Upstream dialects: one module per upstream API, holding what is particular to it (its URL
paths, how its events and bodies become OpenAI-compatible ones), all registered in
``DIALECTS``. Nothing about a provider's API lives anywhere else.

A provider's ``dialect`` setting names its entry. The tolerant normalizer finishes whatever an
adapter hands it (or the upstream's own event, where there is no adapter).
"""

from __future__ import annotations

from typing import Final

from proxy.core.request import ClientRequest, encode_body, upstream_body
from proxy.normalize.dialects import (
    anthropic,
    bedrock,
    cohere,
    friendli_2024,
    gemini,
    maritaca_inference,
    ollama,
    openai,
    tgi,
    vertex,
)
from proxy.normalize.dialects.dialect import Dialect, RequestOptions

__all__ = ["DIALECTS", "Dialect", "RequestOptions", "upstream_request"]

DIALECTS: Final[dict[str, Dialect]] = {
    dialect.name: dialect
    for dialect in (
        openai.DIALECT,
        friendli_2024.DIALECT,
        maritaca_inference.DIALECT,
        anthropic.DIALECT,
        gemini.DIALECT,
        cohere.DIALECT,
        ollama.DIALECT,
        tgi.DIALECT,
        bedrock.DIALECT,
        vertex.VERTEX_GOOGLE,
        vertex.VERTEX_ANTHROPIC,
    )
}


def upstream_request(dialect: Dialect, request: ClientRequest, options: RequestOptions) -> bytes:
    """The body that goes up: the client's own for an OpenAI dialect
    (docs/canonical-output.md section 5), else the native API's request built from it."""
    build = dialect.embed_request if request.endpoint == "embeddings" else dialect.request
    if build is None:
        return upstream_body(request, options.upstream_model, ask_usage=options.ask_usage)
    return encode_body(build(request, options))
