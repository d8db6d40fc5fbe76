"""A Messages API request's answer as the client sees it (sans-IO): the ``Presenter`` that
turns the chat pipeline's canonical answer into Anthropic's ``message`` object or its stream
of events (``message.py``, ``stream.py``).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import ProxyError
from proxy.core.sse import Event
from proxy.normalize.faces.anthropic.errors import error_event
from proxy.normalize.faces.anthropic.message import message_body
from proxy.normalize.faces.anthropic.stream import MessageEvents, message_frames
from proxy.normalize.present import Around, EventStream

__all__ = ["MessagesPresenter"]


class MessagesPresenter:
    """One Messages request answered through chat: its message id and the client's name for
    the model, fixed once."""

    __slots__ = ("message_id", "model")

    def __init__(self, *, message_id: str, model: str) -> None:
        self.message_id = message_id
        self.model = model  # the client's name for it

    def whole(self, body: bytes) -> bytes:
        chat = orjson.loads(body)
        return orjson.dumps(message_body(chat, message_id=self.message_id, model=self.model))

    def stream(self, inner: EventStream) -> EventStream:
        return _PresentedStream(inner, message_id=self.message_id, model=self.model)

    def frames(self, frames: list[bytes]) -> list[bytes]:
        return message_frames(frames, message_id=self.message_id, model=self.model)


def _counted(inner: EventStream) -> dict[str, Any] | None:
    """What the chat stream has counted of the prompt so far, as a canonical usage; None
    while it has only an estimate (the counts of most upstreams come at the end)."""
    usage = inner.usage
    if usage.source != "upstream" or not usage.prompt_tokens:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


class _PresentedStream(Around):
    """The chat stream's normalizer, its frames turned into Messages events on the way out.

    Its error, usage and fixes are the chat stream's: what the upstream did is metered and
    told as for any chat stream; only the client's bytes differ. It ends, failed, where the
    answer cannot be told as Anthropic's blocks (``MessageEvents.failure``)."""

    __slots__ = ("_events",)

    def __init__(self, inner: EventStream, *, message_id: str, model: str) -> None:
        super().__init__(inner)
        self._events = MessageEvents(
            message_id=message_id, model=model, counted=lambda: _counted(inner)
        )

    @property
    def ended(self) -> bool:
        return self._inner.ended or self._events.failure is not None

    @property
    def error(self) -> ProxyError | None:
        return self._inner.error or self._events.failure

    def feed(self, event: Event) -> list[bytes]:
        if self.ended:
            return []
        return self._present(self._inner.feed(event))

    def finish(self) -> list[bytes]:
        if self._events.ended:
            return []
        return self._present(self._inner.finish())

    def fail(self, exc: ProxyError) -> list[bytes]:
        if self._events.ended:
            return []
        return self._present(self._inner.fail(exc))

    def _present(self, frames: list[bytes]) -> list[bytes]:
        error = self._inner.error
        events = self._events
        out: list[bytes] = []
        if error is None:
            for frame in frames:
                out += events.frame(frame)
            return out
        # The chat stream failed: its last frame is its error event. Told as Anthropic's.
        for frame in frames[:-1]:
            out += events.frame(frame)
        if not events.started:
            # Nothing was said yet (a role chunk says nothing here): the relay answers the
            # failure as an HTTP error, as for a chat client, and may try another deployment.
            return frames[-1:]
        return out + events.fail(error_event(error))
