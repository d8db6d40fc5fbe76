"""What the native embeddings dialects share: reading the client's OpenAI embeddings request,
and making a native answer's vectors OpenAI's list.

OpenAI's fields (CreateEmbeddingRequest) are translated or dropped: ``input`` becomes the
native API's texts (token ids are refused: no native API here takes them), ``dimensions`` its
output size, ``encoding_format`` is the proxy's to honour (floats are always asked for, and
encoded as the client asked by ``proxy.normalize.embeddings``), ``user`` says nothing about
the vectors. Any other field is taken for one of the native API's own and passed on, as
``native_request`` does for chat.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest, embedding_inputs
from proxy.normalize.dialects.native_request import extras, unsupported

EMBEDDING_FIELDS: Final = frozenset({"input", "model", "encoding_format", "dimensions", "user"})


def embed_texts(request: ClientRequest, api: str) -> list[str]:
    """The texts to embed, one per input; a 400 for token ids."""
    inputs = embedding_inputs(request.prompt)
    texts = [item for item in inputs if isinstance(item, str)]
    if len(texts) != len(inputs):
        raise unsupported("input", api, "it embeds text, not token ids")
    return texts


def dimensions(request: ClientRequest) -> int | None:
    value = request.body.get("dimensions")
    return value if isinstance(value, int) else None  # parse_request checked it


def native_fields(request: ClientRequest) -> dict[str, Any]:
    """The client's fields that are not OpenAI's: the native API's own."""
    return extras(request.body, EMBEDDING_FIELDS)


def embedding_list(vectors: object, tokens: object = None) -> dict[str, Any]:
    """OpenAI's embeddings list for a native answer's vectors (in input order), with the
    input's token count if the upstream gave one; what is not a list is left for the
    normalizer to refuse."""
    if not isinstance(vectors, list):
        return {}
    data = [
        {"object": "embedding", "index": index, "embedding": vector}
        for index, vector in enumerate(vectors)
    ]
    out: dict[str, Any] = {"object": "list", "data": data}
    if type(tokens) is int or (type(tokens) is float and tokens.is_integer()):
        out["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return out
