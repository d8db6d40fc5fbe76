"""Vertex AI's text embeddings (``POST .../publishers/google/models/{model}:predict``) for
OpenAI's embeddings, both ways.

Written against Vertex's text embeddings reference
(https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/text-embeddings-api),
for ``text-embedding-005``, ``text-multilingual-embedding-002``, ``gemini-embedding-001`` and
their kin: one instance per input, ``{"instances": [{"content", "task_type"?, "title"?}],
"parameters": {"outputDimensionality"?, "autoTruncate"?}}``; the answer is
``{"predictions": [{"embeddings": {"values": [...], "statistics": {"token_count",
"truncated"}}}], "metadata": {"billableCharacterCount"}}`` in request order. The input's tokens
are the sum of the predictions' ``token_count``.

The client's own Vertex fields: ``task_type`` and ``title`` go into every instance (they are
per instance at Vertex), any other (``autoTruncate``) into ``parameters``.
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

API: Final = "Vertex AI's predict"
_INSTANCE_FIELDS: Final[tuple[str, ...]] = ("task_type", "title")


def build_embed_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    own = native_fields(request)
    per_instance = {key: own.pop(key) for key in _INSTANCE_FIELDS if key in own}
    instances = []
    for text in embed_texts(request, API):
        instance: dict[str, Any] = {"content": text}
        merge(instance, per_instance)
        instances.append(instance)
    parameters: dict[str, Any] = {}
    size = dimensions(request)
    if size is not None:
        parameters["outputDimensionality"] = size
    merge(parameters, own)
    out: dict[str, Any] = {"instances": instances}
    if parameters:
        out["parameters"] = parameters
    return out


def adapt_embeddings(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    predictions = body.get("predictions")
    if body.get("error") and not predictions:
        return {"error": body["error"]}  # google.rpc.Status: code, message, status
    if not isinstance(predictions, list):
        return {}
    vectors: list[object] = []
    tokens: int | None = 0
    for prediction in predictions:
        embeddings = prediction.get("embeddings") if isinstance(prediction, dict) else None
        if not isinstance(embeddings, dict):
            vectors.append(None)  # the normalizer refuses an answer without a vector
            continue
        vectors.append(embeddings.get("values"))
        count = _token_count(embeddings.get("statistics"))
        # One count missing leaves the proxy to estimate them all.
        tokens = None if tokens is None or count is None else tokens + count
    return embedding_list(vectors, tokens)


def _token_count(stats: object) -> int | None:
    count = stats.get("token_count") if isinstance(stats, dict) else None
    if isinstance(count, bool) or not isinstance(count, int | float):
        return None
    # proto3 JSON may write the count as a float (6.0).
    return int(count) if float(count).is_integer() and count >= 0 else None
