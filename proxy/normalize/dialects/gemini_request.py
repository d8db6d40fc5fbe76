"""The Gemini API request for a client's OpenAI chat request (sans-IO).

Written against Google's ``generateContent`` reference (https://ai.google.dev/api/generate-content):
messages become ``contents`` (roles ``user`` and ``model``) and a ``systemInstruction``
(gemini_messages.py), tools ``functionDeclarations`` and ``toolConfig``, the sampling fields
``generationConfig`` (gemini_config.py). Every OpenAI field is translated, dropped or refused
as native_request.py judges it for every native API. docs/providers/gemini.md lists every field.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.gemini_config import (
    API,
    build_generation_config,
    build_tool_config,
    declare_functions,
)
from proxy.normalize.dialects.gemini_messages import translate_messages
from proxy.normalize.dialects.native_request import (
    CHAT_FIELDS,
    OPENAI_ONLY,
    extras,
    merge,
    merge_part,
    refuse,
    require_chat,
)

# Gemini translates n (candidateCount) and logprobs, unlike most native APIs; it may answer
# with several calls at once and has no switch against it (parallel_tool_calls false).
_REFUSED: Final = ("logit_bias", "parallel_tool_calls", *OPENAI_ONLY)
# top_k is not OpenAI's but a common extension, translated (topK): not one of Gemini's own.
_READ: Final = CHAT_FIELDS | {"top_k"}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """The ``generateContent`` body (the model and the stream are in the URL)."""
    require_chat(request.endpoint, API)
    body = request.body
    refuse(body, _REFUSED, API)
    system, contents = translate_messages(body["messages"])
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": system}
    declarations = declare_functions(body.get("tools"))
    if declarations:
        out["tools"] = [{"functionDeclarations": declarations}]
    tool_config = build_tool_config(body.get("tool_choice"), bool(declarations)) or {}
    config = build_generation_config(request, options)
    # A field that is not OpenAI's is one of Gemini's own (safetySettings, cachedContent), sent
    # as it came; Gemini's objects the translation writes take the client's own keys too.
    given = extras(body, _READ)
    merge_part(tool_config, given, "toolConfig")
    merge_part(config, given, "generationConfig")
    if tool_config:
        out["toolConfig"] = tool_config
    if config:
        out["generationConfig"] = config
    merge(out, given)
    return out
