"""``Dialect``: what one upstream API's module registers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.request import Endpoint
from proxy.normalize.fields import RequestContext

# (the OpenAI-style chunk for an upstream's event, or None to skip it; whether it ends the stream)
EventAdapter = Callable[[dict[str, Any], RequestContext], tuple[dict[str, Any] | None, bool]]
ResponseAdapter = Callable[[dict[str, Any], RequestContext], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    paths: Mapping[Endpoint, str]  # after the provider's base_url, per endpoint it serves
    # None: the upstream speaks OpenAI's own shape, which the normalizer reads as it is.
    adapt_event: EventAdapter | None = None
    adapt_response: ResponseAdapter | None = None


def text_choice(index: object, text: object, ctx: RequestContext) -> dict[str, Any]:
    """A chunk's choice carrying ``text``, in the shape of the client's endpoint."""
    if ctx.endpoint == "chat":
        return {"index": index, "delta": {"content": text}}
    return {"index": index, "text": text}
