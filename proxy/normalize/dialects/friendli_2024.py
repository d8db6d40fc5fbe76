"""FriendliAI's streams before 2024-12, on OpenAI's paths: a ``token_sampled`` event per token,
then ``complete`` with the whole text again and the usage, and no ``[DONE]``."""

from __future__ import annotations

from typing import Any, Final

from proxy.normalize.dialects.dialect import Dialect, stateless, text_choice
from proxy.normalize.fields import RequestContext


def adapt_event(payload: dict[str, Any], ctx: RequestContext) -> tuple[dict[str, Any] | None, bool]:
    kind = payload.get("event")
    if kind == "token_sampled":
        return {"choices": [text_choice(payload.get("index", 0), payload.get("text"), ctx)]}, False
    if kind == "complete":
        # The whole text is repeated here: it must not reach the client a second time.
        return {"choices": [], "usage": payload.get("usage")}, True
    return payload, False


DIALECT: Final = Dialect(
    "friendli-2024",
    paths={"chat": "/chat/completions", "completions": "/completions"},
    adapter=stateless(adapt_event),
)
