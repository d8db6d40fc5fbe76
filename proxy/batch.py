"""``TurnBatch``: work held while the event loop runs one turn, then done once for the turn.

Observers run once per request, and under load many requests end in the same loop turn: what
each would write on its own (an access log line, a metric's increment into a shared memory map)
is cheaper written once for all of them. The holder adds to its own pending state, then calls
``touch``; its ``flush`` runs once, as a callback of the next turn (``call_soon``). Without a
running loop (a tool, a test), ``touch`` flushes at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class TurnBatch:
    __slots__ = ("_armed", "_flush")

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._armed = False

    def touch(self) -> None:
        """Something was added: flush it with the rest of this loop turn's."""
        if self._armed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush()
            return
        self._armed = True
        loop.call_soon(self._run)

    def _run(self) -> None:
        self._armed = False
        self._flush()
