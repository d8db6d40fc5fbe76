"""``Deadline``: one attempt's timeout, moved as the attempt goes, without a timer per move.

``asyncio.timeout`` creates and cancels a loop timer per use and per ``reschedule``: one per
relayed event, a large share of a worker's time under many slow streams (docs/performance.md),
and two timers per non-streamed request. Here moving the deadline is an attribute store; the
one armed timer, when it fires early, re-arms itself at the current deadline, and only an
expired deadline cancels the task. An attempt makes one ``Deadline`` and moves it from its
first-byte limit to its idle and total limits (``proxy.http.completion``, ``proxy.http.relay``).

Most deadlines are closed within milliseconds (a non-streamed answer comes back), so a deadline
gets a loop timer of its own only once it has been open for a tick (``Deadlines``): until then
one timer per tick serves every deadline of the loop. A deadline shorter than a tick therefore
fires up to a tick late; the timeouts it carries are seconds long.

Use: ``move`` before each guarded wait, and catch ``CancelledError`` around it: ``expired()``
then tells this deadline's cancellation from one from outside (the client left), which must
propagate. ``close`` before any wait that the deadline must not cover.
"""

from __future__ import annotations

import asyncio
import math
from typing import Final

# How long a deadline waits for a timer of its own. Under load a tick sees many requests begin
# and end: a uvloop timer made and cancelled per request cost a measurable share of a worker's
# time (docs/performance.md), one per tick costs nothing to speak of.
TICK: Final = 0.01


class Deadlines:
    """The deadlines of one event loop that are waiting for their own timer."""

    __slots__ = ("_handle", "_waiting", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # The loop, for the request path to use rather than asyncio.get_running_loop(): on
        # Python 3.11 every get_running_loop() (and current_task() without a loop) is a getpid()
        # system call, several of them per request (docs/performance.md).
        self.loop = loop
        self._waiting: list[Deadline] = []
        self._handle: asyncio.TimerHandle | None = None

    def _enlist(self, deadline: Deadline) -> None:
        if self._handle is None:
            self._handle = self.loop.call_at(self.loop.time() + TICK, self._promote)
        self._waiting.append(deadline)

    def _promote(self) -> None:
        # Those still open (most closed meanwhile) get their own timer, at their limit: one
        # already passed fires on the loop's next turn.
        self._handle = None
        waiting, self._waiting = self._waiting, []
        for deadline in waiting:
            deadline._enlisted = False
            if deadline.expires != math.inf:
                deadline._arm(deadline.expires)

    def close(self) -> None:
        """Stop the shared timer (the gateway is closing): the deadlines still waiting for it
        get their own timers at once, so that none of them goes unguarded."""
        if self._handle is not None:
            self._handle.cancel()
        self._promote()


class Deadline:
    __slots__ = (
        "_armed_at",
        "_deadlines",
        "_enlisted",
        "_handle",
        "_task",
        "expires",
        "fired",
        "loop",
    )

    def __init__(self, deadlines: Deadlines) -> None:
        self._deadlines = deadlines
        self.loop = deadlines.loop  # the task's, for its callers (see Deadlines.loop)
        task = asyncio.current_task(self.loop)
        if task is None:
            raise RuntimeError("a Deadline guards the waits of a task")
        self._task = task
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf  # when its own timer fires; inf while it has none
        self._enlisted = False  # waiting for a timer of its own (Deadlines)
        self.expires = math.inf
        self.fired = False

    def move(self, when: float) -> None:
        """Expire at loop time ``when`` (earlier or later than before)."""
        self.expires = when
        if self._handle is not None:
            if when < self._armed_at:  # earlier than its timer: arm it again (rare)
                self._arm(when)
        elif not self._enlisted:
            self._enlisted = True
            self._deadlines._enlist(self)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self.loop.call_at(when, self._check)

    def _check(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        if self.loop.time() >= self.expires:
            self.fired = True
            self._task.cancel()
        elif self.expires != math.inf:
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
