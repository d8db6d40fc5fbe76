"""Google Vertex AI: Gemini and Claude where Google Cloud hosts them, as two dialects built on
the Gemini and Anthropic ones (their adapters and request translation, reused).

A Vertex provider's base_url ends in ``/v1/projects/{project}/locations/{region}``; a model is
under ``/publishers/{publisher}/models/{model}``. Neither dialect sends a key: the provider's
OAuth2 bearer token is added to each request by the upstream client.

- ``vertex_google``: Gemini through ``:generateContent`` and ``:streamGenerateContent?alt=sse``,
  whose ``GenerateContentRequest`` and answers are the Gemini API's
  (https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/projects.locations.publishers.models/generateContent).
  Tool and response schemas go as JSON Schema (``parametersJsonSchema``,
  ``responseJsonSchema``, both in Vertex's v1); a client's own ``responseSchema`` is Google's
  ``Schema`` type, rewritten by vertex_schema.py. Embeddings through ``:predict``
  (vertex_embed.py).
- ``vertex_anthropic``: Claude through ``:rawPredict`` and ``:streamRawPredict``, which take the
  Messages API's body without ``model`` (it is in the URL) and with ``anthropic_version`` in
  it, in place of the header (https://cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/use-claude);
  a stream is asked for with ``"stream": true`` as at Anthropic, and answers Anthropic's events.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects import (
    anthropic,
    anthropic_request,
    gemini,
    gemini_request,
    vertex_embed,
)
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_request import merge
from proxy.normalize.dialects.vertex_schema import vertex_schema

# The Messages API version Vertex takes in the body.
ANTHROPIC_VERSION: Final = "vertex-2023-10-16"
_VERSION: Final = "anthropic_version"

_GOOGLE: Final = "/publishers/google/models/{model}"
_ANTHROPIC: Final = "/publishers/anthropic/models/{model}"


def _no_key(api_key: str) -> dict[str, str]:
    return {}  # the provider's Google credentials, not a key: the upstream client adds them


def build_gemini_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """The Gemini API's body, with any ``Schema``-typed schema made one Vertex takes."""
    out = gemini_request.build_request(request, options)
    config = out.get("generationConfig")
    if isinstance(config, dict) and isinstance(config.get("responseSchema"), dict):
        where = "generationConfig.responseSchema"
        config["responseSchema"] = vertex_schema(config["responseSchema"], where)
    return out


def raw_predict_body(messages: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as rawPredict takes it: without ``model`` (it is in the URL), with
    Vertex's ``anthropic_version`` first (the Anthropic face's pass-through)."""
    body = {key: value for key, value in messages.items() if key not in ("model", _VERSION)}
    return {_VERSION: ANTHROPIC_VERSION, **body}


def build_claude_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """The Messages API's body, the model left to the URL and the version put in."""
    body = anthropic_request.build_request(request, options)
    del body["model"]
    out: dict[str, Any] = {"anthropic_version": ANTHROPIC_VERSION}
    merge(out, body)  # a client's own anthropic_version is refused, as any field the proxy sets
    return out


VERTEX_GOOGLE: Final = replace(
    gemini.DIALECT,
    name="vertex_google",
    paths={
        "chat": f"{_GOOGLE}:generateContent",
        "embeddings": f"{_GOOGLE}:predict",
    },
    stream_paths={"chat": f"{_GOOGLE}:streamGenerateContent?alt=sse"},
    request=build_gemini_request,
    embed_request=vertex_embed.build_embed_request,
    adapt_embeddings=vertex_embed.adapt_embeddings,
    auth=_no_key,
)

VERTEX_ANTHROPIC: Final = replace(
    anthropic.DIALECT,
    name="vertex_anthropic",
    paths={"chat": f"{_ANTHROPIC}:rawPredict"},
    stream_paths={"chat": f"{_ANTHROPIC}:streamRawPredict"},
    request=build_claude_request,
    auth=_no_key,
    headers={},  # the version is in the body
)
