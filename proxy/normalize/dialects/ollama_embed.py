"""Ollama's ``/api/embed`` (``POST {base_url}/api/embed``) for OpenAI's embeddings, both ways.

Written against Ollama's API reference (https://docs.ollama.com/api/embed): ``{"model",
"input": [...], "dimensions"}``; the answer is ``{"model", "embeddings": [[...]],
"total_duration", "load_duration", "prompt_eval_count"}``, a failure ``{"error": "..."}``.
The client's own Ollama fields (``truncate``, ``keep_alive``, ``options``) pass on as they came.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_embed import (
    dimensions,
    embed_texts,
    embedding_list,
    native_fields,
)
from proxy.normalize.dialects.native_request import merge
from proxy.normalize.fields import RequestContext

API: Final = "Ollama's /api/embed"
PATH: Final = "/api/embed"


def build_embed_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    # Always a list: the answer has one vector per text either way.
    native: dict[str, Any] = {"model": options.upstream_model, "input": embed_texts(request, API)}
    size = dimensions(request)
    if size is not None:
        native["dimensions"] = size
    merge(native, native_fields(request))
    return native


def adapt_embeddings(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    embeddings = body.get("embeddings")
    if body.get("error") and not embeddings:
        return {"error": body["error"]}
    return embedding_list(embeddings, body.get("prompt_eval_count"))
