"""``Outlet``: lines written to a file descriptor (a worker's stderr) without ever blocking the
event loop.

A worker writes its access log and its diagnostics to stderr, which a container runtime,
systemd or a supervisor reads through a pipe or a socket. A blocking write to a pipe whose
reader has stalled (a log shipper restarting, journald behind a full disk) waits until the
reader takes something: the worker's event loop waits with it, and every request of the worker,
health checks included, stops. nginx waits so (its access log is written from its worker's
loop). Envoy's maintainers chose to drop, and count, what a stalled log cannot take
(envoyproxy/envoy#9458); so does this.

The outlet writes through a channel of its own that never blocks: a pipe, FIFO or terminal
reopened with ``O_NONBLOCK`` (through ``/proc/self/fd``: the flag then belongs to this open file
alone, not to the one the worker shares with its parent and the other workers), a socket sent
to with ``MSG_DONTWAIT``. What the reader cannot take yet waits in a backlog, in order, and the
loop tries again every ``RETRY`` seconds; past ``BACKLOG`` bytes, new lines are dropped, counted
(``on_dropped``), and a line saying how many stands where they were, before the next line kept
(or last, at ``close``). A regular file is written as before (a disk is slow, not stalled), and
so is anything that cannot be reopened.

Lines go out in writes of at most ``PIPE_BUF`` bytes cut at line ends: workers share their
stderr, and a write that size is never interleaved with another.

Without a running loop (a tool, a test), a full channel is waited for, as a blocking write
would, unless the outlet is told not to (``patient=False``: the supervisor, which has no loop
and must go on starting workers and stopping them, and a worker outside its loop, which must
exit if it cannot start): then what the channel cannot take waits in the backlog for the next
write. ``close`` (a process stopping) waits for the channel too, but only up to ``CLOSE_WAIT``
seconds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import math
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

# The most a write(2) to a pipe may carry and still be atomic (POSIX: at least 512; Linux 4096).
ATOMIC: Final = select.PIPE_BUF
# What waits for a stalled reader before lines are dropped: at 7,000 requests a second (about
# 400 bytes of access log each), more than two seconds of a worker's lines.
BACKLOG: Final = 8 * 1024 * 1024
# How often the loop tries a full channel again.
RETRY: Final = 0.05
# How long a process that stops (a worker, the supervisor) waits for its reader to take what
# is left.
CLOSE_WAIT: Final = 2.0


class _Channel:
    """Writes to ``fd`` as it is (blocking unless a supervisor made it non-blocking)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: memoryview) -> int:
        return os.write(self.fd, data)

    def close(self) -> None:
        pass


class _Reopened(_Channel):
    """A pipe, FIFO or terminal, opened anew for non-blocking writes of its own."""

    def close(self) -> None:
        os.close(self.fd)


class _Socket(_Channel):
    """A socket (journald's stream, a supervisor's socketpair), sent to without waiting."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock.fileno())
        self._sock = sock

    def write(self, data: memoryview) -> int:
        return self._sock.send(data, socket.MSG_DONTWAIT)

    def close(self) -> None:
        self._sock.close()


def _channel(fd: int) -> _Channel:
    """The non-blocking channel to ``fd``, or ``fd`` itself where there can be none."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return _Channel(fd)  # closed already: every write fails, and is let go
    if stat.S_ISSOCK(mode):
        try:
            return _Socket(socket.socket(fileno=os.dup(fd)))
        except OSError:
            return _Channel(fd)
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        try:
            flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
            return _Reopened(os.open(f"/proc/self/fd/{fd}", flags))
        except OSError:
            return _Channel(fd)  # no /proc (not Linux), or a pipe that cannot be reopened
    return _Channel(fd)


class Outlet:
    """Lines to ``fd``, in order, never blocking a running event loop (the module says how).

    Used from one thread: the worker's loop (``OutletHandler`` brings other threads' records
    there). ``on_dropped`` is told how many lines were dropped, each time some are.
    """

    def __init__(
        self,
        fd: int,
        *,
        backlog: int = BACKLOG,
        on_dropped: Callable[[int], None] | None = None,
        patient: bool = True,
    ) -> None:
        self.on_dropped = on_dropped
        self._patient = patient  # without a loop, wait for a full channel (else: next write)
        self._channel = _channel(fd)
        self._limit = backlog
        self._lines: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._dropped = 0  # lines dropped since the last line saying so was queued
        self._retry: asyncio.TimerHandle | None = None
        self._retry_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def backlog(self) -> int:
        """Bytes waiting for the reader."""
        return self._size

    def write(self, lines: Iterable[bytes]) -> None:
        """Queue ``lines`` (each ending with a newline) and write what the channel takes now."""
        if self._closed:
            return
        dropped = 0
        for line in lines:
            # Full: dropped. (A line longer than the whole backlog still goes, on its own.)
            if self._size + len(line) > self._limit and self._lines:
                dropped += 1
                continue
            if self._dropped:
                self._queue(self._notice())  # where the hole is
            self._queue(line)
        self._dropped += dropped
        retry = self._retry
        # While a retry is armed the channel is full, and its timer tries again; unless the
        # loop it was armed on is gone (a tool's, a test's): then this loop takes over.
        if retry is None or self._retry_loop is None or self._retry_loop.is_closed():
            self._retry = None
            self._drain(None)
        if dropped and self.on_dropped is not None:
            self.on_dropped(dropped)

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Write what is left, waiting up to ``wait`` seconds for the reader; then let go."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._dropped:
            self._queue(self._notice())
        self._drain(time.monotonic() + wait)
        lost = len(self._lines)
        self._lines.clear()
        self._size = 0
        self._channel.close()
        if lost and self.on_dropped is not None:
            self.on_dropped(lost)

    def _queue(self, line: bytes) -> None:
        self._lines.append(line)
        self._size += len(line)

    def _notice(self) -> bytes:
        count, self._dropped = self._dropped, 0
        return b"proxy: %d log lines dropped: stderr was not being read\n" % count

    def _retry_now(self) -> None:
        self._retry = None
        if not self._closed:
            self._drain(None)

    def _drain(self, deadline: float | None) -> None:
        """Write while the channel takes it. When it is full and there is no ``deadline``: with
        a running loop, try again on its timer; without one, wait for it if patient, else leave
        it to the next write. With a ``deadline``, wait for it until then."""
        lines = self._lines
        while lines:
            try:
                written = self._channel.write(memoryview(self._batch()))
            except BlockingIOError:
                written = 0
            except InterruptedError:
                continue
            except OSError:
                # stderr closed or gone (EPIPE, EBADF): there is no one left to tell, and
                # failing the requests, or the process, over their log lines would be worse.
                lines.clear()
                self._size = 0
                return
            if written:
                self._consume(written)
            elif (deadline is None and (self._arm() or not self._patient)) or not (
                self._wait_writable(deadline)
            ):
                return

    def _batch(self) -> bytes:
        """The lines at the front, up to ``ATOMIC`` bytes (the first alone, if it is longer)."""
        lines = self._lines
        first = lines[0]
        if len(first) >= ATOMIC or len(lines) == 1:
            return first
        parts = [first]
        size = len(first)
        for line in itertools.islice(lines, 1, None):
            if size + len(line) > ATOMIC:
                break
            parts.append(line)
            size += len(line)
        return b"".join(parts)

    def _consume(self, written: int) -> None:
        """Take ``written`` bytes off the front; a line written in part keeps its rest there."""
        lines = self._lines
        self._size -= written
        while written:
            first = lines[0]
            if written >= len(first):
                lines.popleft()
                written -= len(first)
            else:
                lines[0] = first[written:]
                written = 0

    def _arm(self) -> bool:
        """Try again on the running loop's timer; False without one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._retry = loop.call_later(RETRY, self._retry_now)
        self._retry_loop = loop
        return True

    def _wait_writable(self, deadline: float | None) -> bool:
        """Wait until the channel can take more; False if ``deadline`` came first."""
        timeout = None
        if deadline is not None:
            # In whole milliseconds, rounded up: the wait is never cut short of ``deadline``.
            timeout = max(0, math.ceil((deadline - time.monotonic()) * 1e3))
        poll = select.poll()  # not select(): a descriptor may be numbered past FD_SETSIZE
        try:
            poll.register(self._channel.fd, select.POLLOUT)
            return bool(poll.poll(timeout))
        except (OSError, ValueError):
            return False


class OutletHandler(logging.Handler):
    """A worker's diagnostics (``logging``), as lines through its ``Outlet``, in order with its
    access log. A record logged from another thread than the loop's is handed to the loop.
    Without a loop (the supervisor, which logs from its main thread alone), records are
    written where they are logged."""

    def __init__(self, outlet: Outlet, loop: asyncio.AbstractEventLoop | None) -> None:
        super().__init__()
        self._outlet = outlet
        self._loop = loop
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            self.handleError(record)
            return
        if self._loop is None or threading.get_ident() == self._thread:
            self._outlet.write((line,))
            return
        # A closed loop (RuntimeError): the worker is gone, and its outlet with it.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._outlet.write, (line,))
