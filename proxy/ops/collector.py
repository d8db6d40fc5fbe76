"""``Collector``: a worker's cycle collector, run on a timer of its event loop.

CPython starts a collection when tracked allocations outnumber deallocations by 700 since the
last one. A gateway's objects mostly die by reference count, and that rule misjudges it: every
request, stream and connection is a few hundred tracked objects that live as long as it does,
long enough to be walked by a young collection and promoted, and freeing them lowers the count
that starts the next one. So the young generation grows well past its threshold, and the middle
generation fills with the live requests: under many slow streams, the workers' collections of
the middle generation took milliseconds each and found nothing. A request or first event that
arrived meanwhile waited for them: this collector lowers time to first token at p99 about as
much as no collector at all would (docs/performance.md).

Instead, every ``interval`` the loop collects the young and middle generations at once
(``gc.collect(1)``): what was made since the last tick and still lives, a short pause, and the
survivors go to the oldest generation, where they die by reference count. The
oldest generation is collected in full when the worker's peak resident memory has grown by
``growth`` since the last full collection (cyclic garbage left there takes memory), and at least
every ``full_every`` seconds (it may hold sockets or files rather than memory).

Memory also grows with the load, and a full collection then finds nothing and takes longest: a
worker ramping up to hundreds of slow streams ran several, ever longer, when a full collection
followed every tenth of growth. So it takes a doubling: cyclic garbage can take
as much memory as the peak before it is collected, or a minute's worth.

The gc module's switch is the process's, so the collector disables CPython's automatic
collections while it runs and restores them on ``close``.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import time
from collections.abc import Callable
from typing import Final

# Full collections rarely enough that their pause (tens of milliseconds with thousands of
# requests in flight) is rare. The interval of the ticks is configured (server.gc_interval).
FULL_EVERY: Final = 60.0
GROWTH: Final = 1.0


def peak_rss() -> int:
    """The process's peak resident memory, in the platform's unit (only ratios are taken)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Schedule:
    """Whether a tick collects in full: when memory grew, or when time is up."""

    __slots__ = ("_full_at", "_peak_at_full", "full_every", "growth")

    def __init__(self, now: float, peak: int, full_every: float, growth: float) -> None:
        self.full_every = full_every
        self.growth = growth
        self._full_at = now
        self._peak_at_full = peak

    def full(self, now: float, peak: int) -> bool:
        """Whether a tick at ``now`` collects in full, the peak memory being ``peak``."""
        grown = peak > self._peak_at_full * (1 + self.growth)
        return grown or now - self._full_at >= self.full_every

    def collected_full(self, now: float, peak: int) -> None:
        """A full collection ended at ``now``, the peak memory being ``peak`` after it."""
        self._full_at = now
        self._peak_at_full = peak


class Collector:
    """Runs the cycle collector from ``loop``, every ``interval`` seconds, from ``start`` to
    ``close``; ``observe(full, seconds)`` is told of each collection and how long it took."""

    __slots__ = ("_handle", "_observe", "_was_enabled", "interval", "loop", "schedule")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        interval: float,
        *,
        full_every: float = FULL_EVERY,
        growth: float = GROWTH,
        observe: Callable[[bool, float], None] | None = None,
    ) -> None:
        self.loop = loop
        self.interval = interval
        self.schedule = Schedule(time.monotonic(), peak_rss(), full_every, growth)
        self._observe = observe
        self._handle: asyncio.TimerHandle | None = None
        self._was_enabled = False

    def start(self) -> None:
        if self._handle is not None:
            return
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._handle = self.loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        # Scheduled again first, so that nothing below (the observer included) that raises can
        # stop the ticks for good.
        self._handle = self.loop.call_later(self.interval, self._tick)
        now = time.monotonic()
        full = self.schedule.full(now, peak_rss())
        gc.collect(2 if full else 1)
        ended = time.monotonic()
        if full:
            self.schedule.collected_full(ended, peak_rss())
        if self._observe is not None:
            self._observe(full, ended - now)

    def close(self) -> None:
        if self._handle is None:
            return
        self._handle.cancel()
        self._handle = None
        if self._was_enabled:
            gc.enable()
