"""``Deadline``: one attempt's timeout, moved as the attempt goes, without a timer per move.

``asyncio.timeout`` creates and cancels a loop timer per use and per ``reschedule``: per relayed
event that was about a tenth of a worker's time relaying 1,000 slow streams (py-spy), and two
timers per non-streamed request. Here moving the deadline is an attribute store; the one armed
timer, when it fires early, re-arms itself at the current deadline, and only an expired deadline
cancels the task. An attempt makes one ``Deadline`` and moves it from its first-byte limit to
its idle and total limits (``proxy.completion``, ``proxy.relay``).

Use: ``move`` before each guarded wait, and catch ``CancelledError`` around it: ``expired()``
then tells this deadline's cancellation from one from outside (the client left), which must
propagate. ``close`` before any wait that the deadline must not cover.
"""

from __future__ import annotations

import asyncio
import math


class Deadline:
    __slots__ = ("_armed_at", "_handle", "_loop", "_task", "expires", "fired")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadline guards the waits of a task")
        self._task = task
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf
        self.expires = math.inf
        self.fired = False

    def move(self, when: float) -> None:
        """Expire at loop time ``when`` (earlier or later than before)."""
        self.expires = when
        if when < self._armed_at:  # earlier than the timer: arm it again (rare)
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self._loop.call_at(when, self._check)

    def _check(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        if self._loop.time() >= self.expires:
            self.fired = True
            self._task.cancel()
        else:
            self._arm(self.expires)

    def close(self) -> None:
        """Disarm: nothing after this is bounded by the deadline."""
        self.expires = math.inf
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._armed_at = math.inf

    def expired(self) -> bool:
        """After a CancelledError: whether it was this deadline (not a cancel from outside)."""
        return self.fired and self._task.uncancel() == 0
