"""Maritaca's legacy endpoint (base_url ``https://chat.maritaca.ai/api``): ``{"text"}`` events,
then a bare usage object and no ``[DONE]``; whole answers as ``{"answer", "usage"}``."""

from __future__ import annotations

from typing import Any, Final

from proxy.normalize.dialects.dialect import Dialect, stateless, text_choice
from proxy.normalize.fields import RequestContext

_USAGE_KEYS: Final = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})


def adapt_event(payload: dict[str, Any], ctx: RequestContext) -> tuple[dict[str, Any] | None, bool]:
    if "choices" in payload:
        return payload, False
    if "text" in payload:
        return {"choices": [text_choice(0, payload["text"], ctx)]}, False
    if payload.keys() & _USAGE_KEYS:
        return {"choices": [], "usage": payload}, True
    return None, False


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    if "answer" in body and "choices" not in body:
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


DIALECT: Final = Dialect(
    "maritaca-inference",
    paths={"chat": "/chat/inference"},
    adapter=stateless(adapt_event),
    adapt_response=adapt_response,
)
