"""Cohere's Embed API v2 (``POST {base_url}/v2/embed``) for OpenAI's embeddings, both ways.

Written against Cohere's API reference (https://docs.cohere.com/reference/embed and its
OpenAPI document): ``{"model", "texts", "input_type", "embedding_types": ["float"],
"output_dimension"}``; the answer is ``{"id", "embeddings": {"float": [[...]]}, "texts",
"meta": {"billed_units": {"input_tokens"}, "tokens": {"input_tokens"}}}``.

``input_type`` is required by Embed v3 and later, and OpenAI's request has nothing like it:
``search_document`` is sent (vectors to store and search, what an embeddings client most
often makes), unless the client sends Cohere's own ``input_type`` (``search_query``,
``classification``, ``clustering``) beside the OpenAI fields. Other Cohere fields
(``truncate``, ``max_tokens``, ``priority``) pass on as they came.
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

API: Final = "Cohere's Embed API"
PATH: Final = "/v2/embed"
INPUT_TYPE: Final = "search_document"


def build_embed_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    own = native_fields(request)
    native: dict[str, Any] = {
        "model": options.upstream_model,
        "texts": embed_texts(request, API),
        "input_type": own.pop("input_type", INPUT_TYPE),
        # Floats whatever the client asked: the normalizer encodes them as it asked.
        "embedding_types": ["float"],
    }
    size = dimensions(request)
    if size is not None:
        native["output_dimension"] = size
    merge(native, own)
    return native


def adapt_embeddings(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    embeddings = body.get("embeddings")
    # By type (embeddings_by_type), or a bare list of floats (embeddings_floats, Embed v1's).
    vectors = embeddings.get("float") if isinstance(embeddings, dict) else embeddings
    return embedding_list(vectors, _input_tokens(body.get("meta")))


def _input_tokens(meta: object) -> object:
    """The input's tokens: ``tokens`` counts what the model read; ``billed_units`` what is
    billed of it, which for embeddings is the same count, and the only one the reference's
    example answer has."""
    if not isinstance(meta, dict):
        return None
    for key in ("tokens", "billed_units"):
        counts = meta.get(key)
        if isinstance(counts, dict) and counts.get("input_tokens") is not None:
            return counts["input_tokens"]
    return None
