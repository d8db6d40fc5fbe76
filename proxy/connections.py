"""``Connections``: the upstream connections of one process, opened by aiohttp's connector and
kept here between requests.

aiohttp's connector takes back every connection whose answer has ended and hands it out again
on the next ``connect``: two coroutines, a new ``Connection``, a set and a deque each way, all
of it interpreted, a measurable share of a worker's time under load. Here a connection stays
acquired from the connector for its whole life: an answer that ends cleanly puts it on its
place's ``Shelf`` and the next request to the same place takes it back, in a few compiled steps
(docs/performance.md says what it buys).

What the connector did for its idle connections, this does too:

- A connection idle for longer than ``keepalive`` is never taken again, and a sweep on a loop
  timer closes it (aiohttp's ``_cleanup``).
- One the upstream has closed while idle is closed and passed over, not taken; so is one that
  received anything while idle, or holds unread data (an answer nobody asked for).
- One whose answer did not end cleanly (the parser or a pipe still holds it, the upstream said
  ``Connection: close``) is closed, not kept: ``should_close``, as aiohttp judges it.
- The connector's limit counts every connection open, idle ones included. aiohttp's idle
  connections never made a new one wait, so at the limit the idle connection unused the
  longest is closed first; and while a request waits for the limit, a connection whose answer
  has ended goes back to the connector, which hands it to the request (or lets it open one
  elsewhere), as before.
- ``close`` closes them all through the connector, which waits until they are.

A shelf hands out the connection put back last: the one the upstream is least likely to have
closed meanwhile (servers close idle connections after their own timeout, uvicorn's 5 s among
them), and when traffic falls, those it no longer needs are left to age out rather than kept
warm in turn (aiohttp takes the oldest first).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Final

import aiohttp
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.connector import Connection

__all__ = ["SWEEP_SPACING", "Connections", "Shelf", "Slots"]

# The least time between two sweeps: connections whose idle times end close together go in one.
SWEEP_SPACING: Final = 1.0


class Shelf:
    """The idle connections to one place (host, port, TLS settings), taken newest first."""

    __slots__ = ("connections", "idle")

    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        # (connection, when it was put back, on the loop's clock), oldest first.
        self.idle: collections.deque[tuple[Connection, float]] = collections.deque()

    def take(self) -> Connection | None:
        """The connection put back last that is still open and within its keep-alive."""
        idle = self.idle
        if not idle:
            return None
        connections = self.connections
        expired = connections.loop.time() - connections.keepalive
        while idle:
            connection, since = idle.pop()
            protocol = connection.protocol
            # Not one that got anything while idle, or holds what came with its last answer:
            # that would be taken for the next answer (should_close, as aiohttp judges it).
            if (
                since > expired
                and protocol is not None
                and protocol.is_connected()
                and not protocol.should_close
            ):
                return connection
            connections.discard(connection)
        return None

    def put(self, connection: Connection) -> None:
        """Keep ``connection``, whose answer has been read to its end, for the next request;
        close it instead if it cannot be used again."""
        connections = self.connections
        protocol = connection.protocol
        if connections.closed or protocol is None or protocol.should_close:
            connections.discard(connection)
            return
        if connections.waiting:
            # A request waits in the connector for the limit: its own pool takes this one back
            # and wakes it, to take this one if it goes to the same place, else to open one.
            connections.opened -= 1
            connection.release()
            return
        now = connections.loop.time()
        self.idle.append((connection, now))
        if connections.sweeper is None:
            connections.sweep_at(now + connections.keepalive)


class Connections:
    """The connections of one process to its providers: ``open`` new ones through ``connector``
    (its DNS cache, TLS and limit), ``discard`` those done with, and a ``Shelf`` per place for
    those kept idle up to ``keepalive`` seconds."""

    __slots__ = (
        "_shelves",
        "closed",
        "connecting",
        "connector",
        "keepalive",
        "loop",
        "opened",
        "sweeper",
        "waiting",
    )

    def __init__(self, connector: aiohttp.BaseConnector, keepalive: float) -> None:
        self.connector = connector
        self.keepalive = keepalive
        self.loop = asyncio.get_running_loop()
        self._shelves: dict[ConnectionKey, Shelf] = {}
        # Connections the connector has handed out and this has not closed since: in use or idle.
        self.opened = 0
        self.connecting = 0  # asked of the connector, not yet there
        self.waiting = 0  # of those, asked for at the limit: waiting for one to be given back
        self.sweeper: asyncio.TimerHandle | None = None
        self.closed = False

    def shelf(self, key: ConnectionKey) -> Shelf:
        """The shelf of the place ``key`` names (made on first use, kept for the process)."""
        shelf = self._shelves.get(key)
        if shelf is None:
            shelf = self._shelves[key] = Shelf(self)
        return shelf

    async def open(
        self,
        request: aiohttp.ClientRequest,
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (the connector's, for connecting)
    ) -> Connection:
        """A new connection to where ``request`` goes, from the connector: at its limit, once
        an idle one has been closed, or one in use has been given back."""
        limit = self.connector.limit
        if limit and self.opened + self.connecting >= limit:
            self._close_longest_idle()
        waits = bool(limit) and self.opened + self.connecting >= limit
        self.connecting += 1
        self.waiting += waits
        try:
            connection = await self.connector.connect(request, [], timeout)
        finally:
            self.connecting -= 1
            self.waiting -= waits
        self.opened += 1
        return connection

    def discard(self, connection: Connection) -> None:
        """Close ``connection`` (once: a closed one has no protocol)."""
        if connection.protocol is not None:
            connection.close()
            self.opened -= 1

    def sweep_at(self, when: float) -> None:
        self.sweeper = self.loop.call_at(when, self._sweep)

    def _sweep(self) -> None:
        """Close the connections idle past their keep-alive; come back when the next will be."""
        self.sweeper = None
        expired = self.loop.time() - self.keepalive
        next_expiry: float | None = None
        for shelf in self._shelves.values():
            idle = shelf.idle
            while idle and idle[0][1] <= expired:
                self.discard(idle.popleft()[0])
            if idle and (next_expiry is None or idle[0][1] < next_expiry):
                next_expiry = idle[0][1]
        if next_expiry is not None:
            spacing = min(SWEEP_SPACING, self.keepalive)
            self.sweep_at(max(next_expiry + self.keepalive, self.loop.time() + spacing))

    def _close_longest_idle(self) -> None:
        oldest: Shelf | None = None
        for shelf in self._shelves.values():
            if shelf.idle and (oldest is None or shelf.idle[0][1] < oldest.idle[0][1]):
                oldest = shelf
        if oldest is not None:
            self.discard(oldest.idle.popleft()[0])

    async def close(self) -> None:
        """Close every connection, idle or in use, through the connector, which waits until
        they are closed (an idle one is still acquired from it)."""
        self.closed = True
        if self.sweeper is not None:
            self.sweeper.cancel()
            self.sweeper = None
        await self.connector.close()
        for shelf in self._shelves.values():
            while shelf.idle:
                self.discard(shelf.idle.popleft()[0])  # closed already: let go of it


class Slots:
    """At most ``limit`` requests of one provider hold an upstream connection at once, so that
    one provider's load (streams held open by one team, say) cannot take the connections every
    other provider's requests need. A request over the limit waits for one to come free, in
    order, within its own first-byte deadline."""

    __slots__ = ("_waiters", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take(self) -> bool:
        """Take a slot if one is free now (the usual case: no waiting, no future)."""
        if self.used < self.limit and not self._waiters:
            self.used += 1
            return True
        return False

    async def wait(self) -> None:
        """Wait until a slot is handed over (``release``); cancelled, it leaves the queue, and
        gives back a slot it was handed meanwhile."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed over as it was cancelled: pass it on
            else:
                self._waiters.remove(future)
            raise

    def release(self) -> None:
        """Give a slot back: to the longest waiting request, else to the pool of free ones."""
        waiters = self._waiters
        while waiters:
            future = waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
        if self.used > 0:
            self.used -= 1
