"""The whole-response normalizer for embeddings, over every dialect (sans-IO).

Whatever the upstream sends, the client gets OpenAI's ``CreateEmbeddingResponse`` with strict
keys: ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
"usage": {"prompt_tokens", "total_tokens"}}``, one vector per input in input order, ``model``
the client's name, and each vector in the encoding the client asked for: a list of floats, or
(``encoding_format: base64``) the base64 of its float32 values, little-endian, as OpenAI encodes
them. A native dialect's ``adapt_embeddings`` first makes its answer OpenAI-shaped.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Any, Final

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.core.fix_names import FIX_ENVELOPE, FIX_EXTRAS, FIX_USAGE
from proxy.core.request import embedding_inputs
from proxy.core.usage import Usage, estimate_tokens
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.fields import (
    RequestContext,
    upstream_error,
    upstream_model,
    upstream_object,
)
from proxy.normalize.whole import Normalized

_RESPONSE_KEYS: Final = frozenset({"object", "data", "model", "usage"})
_ITEM_KEYS: Final = frozenset({"object", "index", "embedding"})
_USAGE_KEYS: Final = frozenset({"prompt_tokens", "total_tokens"})
# As in proxy.core.usage: beyond this a "count" is garbage.
_MAX_COUNT: Final = 2**53
_MISSING: Final = object()  # no vector at this index yet


def normalize_embeddings(raw: bytes, ctx: RequestContext) -> Normalized:
    """The canonical body for an upstream's 200 answer to an embeddings request; raises
    ``UpstreamError`` for one that cannot be made canonical."""
    body = upstream_object(raw)
    adapt = DIALECTS[ctx.dialect].adapt_embeddings
    if adapt is not None:
        body = adapt(body, ctx)
    data = body.get("data")
    if body.get("error") and not data:
        raise upstream_error(body["error"])
    if not isinstance(data, list) or not data:
        raise UpstreamProtocolError("The upstream answered without any embedding")

    fixes: set[str] = set()
    if not body.keys() <= _RESPONSE_KEYS:
        fixes.add(FIX_EXTRAS)  # id, created, ... (vLLM, Together)
    if body.get("object") != "list":
        fixes.add(FIX_ENVELOPE)
    inputs = embedding_inputs(ctx.prompt)
    if inputs and len(data) != len(inputs):
        raise UpstreamProtocolError(
            f"The upstream answered with another number of embeddings ({len(data)}) than the"
            f" request has inputs ({len(inputs)})"
        )
    vectors = [_values(vector, index) for index, vector in enumerate(_ordered(data, fixes))]
    lengths = {len(vector) for vector in vectors}
    if len(lengths) > 1:
        # One model embeds every input in the same space: vectors apart in length are broken.
        raise UpstreamProtocolError(
            "The upstream answered with embeddings of different lengths"
            f" ({min(lengths)} to {max(lengths)} values)"
        )
    encode = _as_base64 if ctx.encoding == "base64" else _as_floats
    out_data = [
        {"object": "embedding", "index": index, "embedding": encode(vector, index)}
        for index, vector in enumerate(vectors)
    ]

    tokens = _upstream_tokens(body.get("usage"))
    if tokens is not None:
        usage = Usage(tokens, 0, tokens)
        raw_usage = body["usage"]
        if raw_usage.keys() != _USAGE_KEYS or any(raw_usage[key] != tokens for key in _USAGE_KEYS):
            fixes.add(FIX_USAGE)  # other keys (completion_tokens), or a total apart
    else:
        tokens = estimate_input_tokens(inputs)
        usage = Usage(tokens, 0, tokens, source="estimated")
        fixes.add(FIX_USAGE)
    out = {
        "object": "list",
        "data": out_data,
        "model": ctx.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return Normalized(orjson.dumps(out), usage, frozenset(fixes), None, upstream_model(body))


def _ordered(data: list[Any], fixes: set[str]) -> list[object]:
    """The vectors by their ``index``, which must number them 0..n-1 once each (an item
    without one is taken at its position)."""
    vectors: list[object] = [_MISSING] * len(data)
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise UpstreamProtocolError("The upstream answered with an embedding not an object")
        if not item.keys() <= _ITEM_KEYS:
            fixes.add(FIX_EXTRAS)
        if item.get("object") != "embedding":
            fixes.add(FIX_ENVELOPE)
        index = item.get("index")
        if index is None:
            index = position
            fixes.add(FIX_ENVELOPE)
        if type(index) is not int or not 0 <= index < len(data):
            raise UpstreamProtocolError(
                f"The upstream answered with embedding index {index!r} among {len(data)}"
            )
        if vectors[index] is not _MISSING:
            raise UpstreamProtocolError(f"The upstream answered with embedding {index} twice")
        vectors[index] = item.get("embedding")
    return vectors


def _values(vector: object, index: int) -> list[float] | list[int | float]:
    """A vector's numbers, checked, whichever encoding the upstream used."""
    if isinstance(vector, str):
        return _decode(vector, index)
    return _finite(vector, index)


def _as_floats(
    values: list[float] | list[int | float], index: int
) -> list[float] | list[int | float]:
    return values


def _as_base64(values: list[float] | list[int | float], index: int) -> str:
    # A base64 vector is checked too, then written in the one canonical spelling.
    try:
        packed = struct.pack(f"<{len(values)}f", *values)
    except OverflowError:
        raise UpstreamProtocolError(
            f"The upstream answered embedding {index} with a value beyond float32"
        ) from None
    return base64.b64encode(packed).decode("ascii")


def _decode(text: str, index: int) -> list[float]:
    """The float32 values of a base64 vector (little-endian, as OpenAI encodes)."""
    try:
        packed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise UpstreamProtocolError(
            f"The upstream answered embedding {index} with a string that is not base64"
        ) from None
    if not packed or len(packed) % 4:
        raise UpstreamProtocolError(
            f"The upstream answered embedding {index} with base64 that is no float32 vector"
        )
    values = list(struct.unpack(f"<{len(packed) // 4}f", packed))
    if not math.isfinite(sum(values)):
        raise UpstreamProtocolError(f"The upstream answered embedding {index} with NaN or inf")
    return values


def _finite(vector: object, index: int) -> list[int | float]:
    if not isinstance(vector, list) or not vector:
        raise UpstreamProtocolError(
            f"The upstream answered embedding {index} with neither numbers nor base64"
        )
    # Exact types: true is no number, and bool is an int subclass.
    if not {type(value) for value in vector} <= {float, int}:
        raise UpstreamProtocolError(
            f"The upstream answered embedding {index} with a value that is not a number"
        )
    # A sum is finite only if every term is; one that overflows is told apart term by term.
    if not math.isfinite(sum(vector, 0.0)) and not all(math.isfinite(v) for v in vector):
        raise UpstreamProtocolError(f"The upstream answered embedding {index} with NaN or inf")
    return vector


def _count(value: object) -> int | None:
    if type(value) is int:
        return value if 0 <= value < _MAX_COUNT else None
    if type(value) is float and value.is_integer() and 0 <= value < _MAX_COUNT:
        return int(value)
    return None


def _upstream_tokens(raw: object) -> int | None:
    """The input's tokens as the upstream counted them: an embedding has no completion, so
    its prompt_tokens (input_tokens) are its total_tokens."""
    if not isinstance(raw, dict):
        return None
    for key in ("prompt_tokens", "input_tokens", "total_tokens"):
        tokens = _count(raw.get(key))
        if tokens is not None:
            return tokens
    return None


def estimate_input_tokens(inputs: list[str] | list[list[int]]) -> int:
    """The tokens of ``inputs`` where the upstream counted none: token arrays are counted
    exactly, text estimated from its length (``proxy.core.usage.estimate_tokens``)."""
    chars = 0
    tokens = 0
    for item in inputs:
        if isinstance(item, str):
            chars += len(item)
        else:
            tokens += len(item)
    return tokens + estimate_tokens(chars)
