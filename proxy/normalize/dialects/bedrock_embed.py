"""Embeddings on Bedrock (``POST {base_url}/model/{model}/invoke``), both ways: InvokeModel takes
the model's own body, so the model id says which.

- Amazon Titan text embeddings (``amazon.titan-embed-...``; Bedrock user guide, "Amazon Titan
  Embeddings Text"): ``{"inputText", "dimensions", "normalize"}`` answered by ``{"embedding":
  [...], "inputTextTokenCount"}``, one text per call.
- Cohere Embed on Bedrock (``cohere.embed-...``; "Cohere Embed models"): ``{"texts",
  "input_type"}`` answered by ``{"embeddings": [[...]], "id", "response_type":
  "embeddings_floats", "texts"}``, read as Cohere's own Embed answer is (cohere_embed.py).
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects import cohere_embed
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_embed import (
    dimensions,
    embed_texts,
    embedding_list,
    native_fields,
)
from proxy.normalize.dialects.native_request import merge, unsupported
from proxy.normalize.fields import RequestContext

API: Final = "Bedrock's InvokeModel"
PATH: Final = "/model/{model}/invoke"


def build_embed_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    model = options.upstream_model
    own = native_fields(request)
    size = dimensions(request)
    if "cohere.embed" in model:
        native: dict[str, Any] = {
            "texts": embed_texts(request, API),
            "input_type": own.pop("input_type", cohere_embed.INPUT_TYPE),
        }
        if size is not None:
            native["output_dimension"] = size
    elif "titan-embed" in model:
        texts = embed_texts(request, API)
        if len(texts) != 1:
            raise unsupported("input", API, "Titan embeds one text per request: send one")
        native = {"inputText": texts[0]}
        if size is not None:
            native["dimensions"] = size
        if "titan-embed-text-v1" not in model:  # v1 takes inputText alone
            native["normalize"] = True  # OpenAI's vectors have length 1
    else:
        raise unsupported(
            "model", API, "the proxy embeds with Titan and Cohere Embed models on Bedrock"
        )
    merge(native, own)
    return native


def adapt_embeddings(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    if "embedding" in body:  # Titan's one vector
        return embedding_list([body["embedding"]], body.get("inputTextTokenCount"))
    return cohere_embed.adapt_embeddings(body, ctx)
