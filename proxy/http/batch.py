"""``Batch``: work held for a while (one event-loop turn, or a few milliseconds), then done once.

Observers run once per request, and under load many requests end close together: what each
would write on its own (an access log line, a metric's increment into a shared memory map) is
cheaper written once for all of them. The holder adds to its own pending state, then calls
``touch``; its ``flush`` runs once, as a callback of the next turn (``call_soon``) or after
``delay`` seconds (``call_later``). Without a running loop (a tool, a test), ``touch`` flushes
at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

# How long ended requests are held before the observers are told (proxy.http.app): off the path of
# the requests that follow, and done with its code and data warm from one request to the next.
# Access log lines are this much later, and metrics up to proxy.ops.metrics.FLUSH_DELAY more; a
# scrape on the main listener writes them out first.
REPORT_DELAY: Final = 0.005


class Batch:
    __slots__ = ("_delay", "_flush", "_handle", "_loop")

    def __init__(self, flush: Callable[[], None], delay: float = 0.0) -> None:
        self._flush = flush
        self._delay = delay
        self._handle: asyncio.Handle | None = None
        # The loop of the last touch: asking for the running one on every touch is a getpid()
        # system call on Python 3.11 (proxy.http.deadline.Deadlines says more). One that stopped
        # running (a test's, gone) is asked for again. Touched from its loop's thread only.
        self._loop: asyncio.AbstractEventLoop | None = None

    def touch(self) -> None:
        """Something was added: flush it with the rest of this turn's (or this delay's)."""
        if self._handle is not None:
            return
        loop = self._loop
        if loop is None or not loop.is_running():
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._flush()
                return
        if self._delay:
            self._handle = loop.call_later(self._delay, self._run)
        else:
            self._handle = loop.call_soon(self._run)

    def flush_now(self) -> None:
        """Flush what is held without waiting (a scrape is about to read, a worker stops)."""
        if self._handle is not None:
            self._handle.cancel()
        self._run()

    def _run(self) -> None:
        self._handle = None
        self._flush()
