"""How an answer is shown to a client that asked in another API's shape than chat's (sans-IO).

A Responses API request is answered by the chat pipeline (proxy.normalize.responses): the
upstream's answer is normalized into canonical chat objects as for any client, and a
``Presenter`` then turns those into what the client asked for. Nothing of the chat pipeline
changes for it, and a chat client pays nothing for it.
"""

from __future__ import annotations

from typing import Protocol

from proxy.core.errors import ProxyError
from proxy.core.exchange import Answered
from proxy.core.sse import Event
from proxy.core.usage import Usage

__all__ = ["Around", "EventStream", "Presenter"]


class EventStream(Protocol):
    """What the relay drives: a ``StreamNormalizer``, or a presenter's stream around one."""

    @property
    def ended(self) -> bool: ...

    @property
    def error(self) -> ProxyError | None: ...

    @property
    def fixes(self) -> set[str]: ...

    @property
    def usage(self) -> Usage: ...

    @property
    def answered(self) -> Answered:
        """What the answer said of itself (``gen_ai.response.*``): asked for a traced request
        only, at its end."""
        ...

    def feed(self, event: Event) -> list[bytes]: ...

    def finish(self) -> list[bytes]: ...

    def fail(self, exc: ProxyError) -> list[bytes]: ...


class Presenter(Protocol):
    def whole(self, body: bytes) -> bytes:
        """The client's body for a canonical chat completion's ``body``."""
        ...

    def stream(self, inner: EventStream) -> EventStream:
        """The client's stream around the canonical chat stream ``inner`` makes."""
        ...

    def frames(self, frames: list[bytes]) -> list[bytes]:
        """The client's frames for a whole canonical chat stream's ``frames``."""
        ...


class Around:
    """An ``EventStream`` wrapped around another, whose state it reports as its own: what the
    upstream did is metered and told as for the inner stream; only the frames differ. A
    wrapper that can end or fail on its own says so in ``ended`` and ``error``."""

    __slots__ = ("_inner",)

    def __init__(self, inner: EventStream) -> None:
        self._inner = inner

    @property
    def ended(self) -> bool:
        return self._inner.ended

    @property
    def error(self) -> ProxyError | None:
        return self._inner.error

    @property
    def fixes(self) -> set[str]:
        return self._inner.fixes

    @property
    def usage(self) -> Usage:
        return self._inner.usage

    @property
    def answered(self) -> Answered:
        return self._inner.answered
