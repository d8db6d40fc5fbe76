"""The canonical whole answer of a request whose answer the cache may store (docs/cache.md),
kept as the relay passes it on: a whole answer's body, or what a stream's frames tell.

The client's answer is not changed by it: a ``Recording`` hands on the frames of the stream it
wraps as they are, and the relay keeps a whole body it made anyway."""

from __future__ import annotations

from proxy.core.errors import ProxyError
from proxy.core.sse import Event
from proxy.core.usage import Usage
from proxy.normalize.convert import Collector
from proxy.normalize.present import Around
from proxy.normalize.stream import StreamNormalizer


class Kept:
    """``body``: the canonical whole response, once the answer is complete and error-free;
    ``usage``: what the upstream said it used (or the estimate), with it."""

    __slots__ = ("body", "usage")

    def __init__(self) -> None:
        self.body: bytes | None = None
        self.usage: Usage | None = None

    def whole(self, body: bytes, usage: Usage) -> None:
        self.body, self.usage = body, usage

    def recording(self, inner: StreamNormalizer) -> Recording:
        return Recording(inner, self)


class Recording(Around):
    """The canonical stream of ``inner``, its frames collected into the whole response they
    tell (an ``EventStream`` for the relay). One that ends in an error keeps nothing."""

    __slots__ = ("_collector", "_kept", "_normalizer")

    def __init__(self, inner: StreamNormalizer, kept: Kept) -> None:
        super().__init__(inner)
        self._normalizer = inner  # for its usage report, which no other stream has
        self._kept = kept
        self._collector: Collector | None = Collector()

    def feed(self, event: Event) -> list[bytes]:
        return self._take(self._normalizer.feed(event))

    def finish(self) -> list[bytes]:
        return self._take(self._normalizer.finish())

    def fail(self, exc: ProxyError) -> list[bytes]:
        self._collector = None
        return self._normalizer.fail(exc)

    def _take(self, frames: list[bytes]) -> list[bytes]:
        collector = self._collector
        if collector is None:
            return frames
        inner = self._normalizer
        if inner.error is not None:
            self._collector = None  # its last frame is the error's, which no whole answer has
            return frames
        for frame in frames:
            collector.add(frame)
        if inner.ended:
            self._collector = None
            # The usage the client's stream showed, or would have shown had it asked for it.
            self._kept.whole(collector.response(inner.usage_report()), inner.usage)
        return frames
