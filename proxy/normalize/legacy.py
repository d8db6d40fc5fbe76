"""Pre-OpenAI event shapes that some upstreams still send on an OpenAI-style path.

A provider's ``dialect`` setting names its shape; the adapters here turn each event into an
OpenAI-compatible chunk that the tolerant normalizer then finishes. Both dialects mark their own
end (a ``complete`` event, a bare usage object) instead of sending ``[DONE]``.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.normalize.fields import RequestContext
from proxy.normalize.tables import FIX_LEGACY

FIX: Final = FIX_LEGACY
DIALECTS: Final = ("openai", "friendli-2024", "maritaca-inference")
_USAGE_KEYS: Final = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})


def _text_choice(index: object, text: object, ctx: RequestContext) -> dict[str, Any]:
    if ctx.endpoint == "chat":
        return {"index": index, "delta": {"content": text}}
    return {"index": index, "text": text}


def adapt_event(payload: dict[str, Any], ctx: RequestContext) -> tuple[dict[str, Any] | None, bool]:
    """(the OpenAI-style chunk for a legacy event or None to skip it, whether it ends the stream).

    Events already in OpenAI's shape are returned as they are.
    """
    if ctx.dialect == "friendli-2024":
        return _friendli_event(payload, ctx)
    if ctx.dialect == "maritaca-inference":
        return _maritaca_event(payload, ctx)
    return payload, False


def _friendli_event(
    payload: dict[str, Any], ctx: RequestContext
) -> tuple[dict[str, Any] | None, bool]:
    # Friendli before 2024-12: {"event": "token_sampled", "index", "text", "token"} per token, then
    # {"event": "complete", "choices": [{"text": <the whole text again>}], "usage"}.
    kind = payload.get("event")
    if kind == "token_sampled":
        return {"choices": [_text_choice(payload.get("index", 0), payload.get("text"), ctx)]}, False
    if kind == "complete":
        # The whole text is repeated here: it must not reach the client a second time.
        return {"choices": [], "usage": payload.get("usage")}, True
    return payload, False


def _maritaca_event(
    payload: dict[str, Any], ctx: RequestContext
) -> tuple[dict[str, Any] | None, bool]:
    # Maritaca /api/chat/inference: {"text": ...} events, then a bare usage object, no [DONE].
    if "choices" in payload:
        return payload, False
    if "text" in payload:
        return {"choices": [_text_choice(0, payload["text"], ctx)]}, False
    if payload.keys() & _USAGE_KEYS:
        return {"choices": [], "usage": payload}, True
    return None, False


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    """The OpenAI-style response for a legacy whole body (Maritaca's ``{"answer", "usage"}``)."""
    if ctx.dialect == "maritaca-inference" and "answer" in body and "choices" not in body:
        answer = body.get("answer")
        if ctx.endpoint == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
            }
        else:
            choice = {"index": 0, "text": answer}
        return {"choices": [choice], "usage": body.get("usage")}
    return body
