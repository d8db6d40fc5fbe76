"""Gemini's ``batchEmbedContents`` (``POST {base_url}/v1beta/models/{model}:batchEmbedContents``)
for OpenAI's embeddings, both ways.

Written against Google's embeddings reference (https://ai.google.dev/api/embeddings): one
``EmbedContentRequest`` per input, ``{"model": "models/<m>", "content": {"parts": [{"text"}]},
"outputDimensionality"}``; the answer is ``{"embeddings": [{"values": [...]}]}`` in request
order, with no token counts (the proxy estimates them). The client's own Gemini fields
(``taskType``, ``title``) go into every request.
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

API: Final = "Gemini's batchEmbedContents"
PATH: Final = "/v1beta/models/{model}:batchEmbedContents"


def build_embed_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    model = f"models/{options.upstream_model}"
    size = dimensions(request)
    own = native_fields(request)
    entries = []
    for text in embed_texts(request, API):
        entry: dict[str, Any] = {"model": model, "content": {"parts": [{"text": text}]}}
        if size is not None:
            entry["outputDimensionality"] = size
        merge(entry, own)
        entries.append(entry)
    return {"requests": entries}


def adapt_embeddings(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    embeddings = body.get("embeddings")
    if body.get("error") and not embeddings:
        return {"error": body["error"]}  # google.rpc.Status: code, message, status
    if not isinstance(embeddings, list):
        return {}
    return embedding_list(
        [item.get("values") if isinstance(item, dict) else None for item in embeddings]
    )
