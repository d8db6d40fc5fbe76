"""``Pool``: the upstream connections of one process, opened on asyncio's public API and kept
between requests; ``Slots``: a provider's share of them.

- A connection idle for longer than ``keepalive`` is never taken again, and a sweep on a loop
  timer closes it.
- One the upstream has closed while idle, or that received anything while idle (an answer
  nobody asked for), is closed and passed over, not taken.
- One whose answer did not end cleanly (cut short, ``Connection: close``, not read to its end)
  is closed, not kept.
- ``limit`` counts every connection open, idle ones included: at the limit the one idle the
  longest is closed to make way; with none idle, a request waits for one to be given back.
- A place's idle connections are handed out newest first: the one the upstream is least likely
  to have closed meanwhile (servers close idle connections after their own timeout, uvicorn's
  5 s among them); when traffic falls, those no longer needed age out rather than stay warm.

Names are resolved with the loop's ``getaddrinfo`` and the answers kept ``DNS_TTL`` seconds; a
host's addresses are tried in the order the resolver gave them.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from typing import Final, NamedTuple

from proxy.http.connection import UpstreamConnection

__all__ = ["DNS_TTL", "KEEPALIVE", "LIMIT", "SWEEP_SPACING", "Origin", "Pool", "Slots"]

# How long an idle upstream connection is kept for the next request: nginx's upstream default
# (reqwest's, which TensorZero uses, is 90 s). Traffic comes in bursts, and a burst that finds
# the pool emptied by a quiet spell opens its connections anew, in front of its requests.
KEEPALIVE: Final = 60.0
# The most upstream connections one process has open at once, over all providers (each of which
# has a limit of its own, its max_connections).
LIMIT: Final = 4096
# How long a name's addresses are kept (aiohttp's default, which the proxy had before).
DNS_TTL: Final = 300.0
# The least time between two sweeps: connections whose idle times end close together go in one.
SWEEP_SPACING: Final = 1.0


class Origin(NamedTuple):
    """Where connections go: connections to one origin serve each other's requests."""

    host: str
    port: int
    tls: bool


class Pool:
    """The connections of one process to its providers."""

    __slots__ = (
        "_addresses",
        "_idle",
        "_open",
        "_sweeper",
        "_tls",
        "_waiters",
        "closed",
        "keepalive",
        "limit",
        "loop",
    )

    def __init__(self, keepalive: float = KEEPALIVE, *, limit: int = LIMIT) -> None:
        self.keepalive = keepalive
        self.limit = limit
        self.loop = asyncio.get_running_loop()
        # Idle connections per origin, oldest first (each knows when it went idle).
        self._idle: dict[Origin, collections.deque[UpstreamConnection]] = {}
        self._open: set[UpstreamConnection] = set()  # in use or idle
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._addresses: dict[tuple[str, int], tuple[float, list[tuple[int, str]]]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._tls: ssl.SSLContext | None = None
        self.closed = False

    @property
    def opened(self) -> int:
        """Connections open, in use or idle."""
        return len(self._open)

    @property
    def waiting(self) -> int:
        """Requests waiting at the limit for a connection to be given back or closed."""
        return len(self._waiters)

    def take(self, origin: Origin) -> UpstreamConnection | None:
        """The idle connection to ``origin`` put back last that is still fit for a request."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        expired = self.loop.time() - self.keepalive
        while idle:
            connection = idle.pop()
            if connection.released_at > expired and connection.idle_usable:
                return connection
            self.discard(connection)
        return None

    async def connect(self, origin: Origin) -> UpstreamConnection:
        """An idle connection to ``origin``, or a new one (waiting at the limit for one to be
        given back or closed)."""
        connection = self.take(origin)
        if connection is not None:
            return connection
        while self.limit and len(self._open) >= self.limit:
            if self._close_longest_idle():
                continue
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            connection = self.take(origin)
            if connection is not None:
                return connection
        if self.closed:
            raise ConnectionError("the pool of upstream connections is closed")
        connection = UpstreamConnection()
        self._open.add(connection)  # counted while it connects, as it takes its place already
        try:
            await self._open_connection(connection, origin)
        except BaseException:
            self._open.discard(connection)
            connection.close()
            self._wake()
            raise
        return connection

    async def _open_connection(self, connection: UpstreamConnection, origin: Origin) -> None:
        tls: ssl.SSLContext | None = None
        if origin.tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        failure: OSError | None = None
        for family, address in await self._resolve(origin.host, origin.port):
            try:
                await self.loop.create_connection(
                    lambda: connection,
                    address,
                    origin.port,
                    family=family,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                )
            except OSError as exc:
                failure = exc
                continue
            return
        assert failure is not None
        raise failure

    async def _resolve(self, host: str, port: int) -> list[tuple[int, str]]:
        now = self.loop.time()
        known = self._addresses.get((host, port))
        if known is not None and known[0] > now:
            return known[1]
        infos = await self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys((int(info[0]), str(info[4][0])) for info in infos))
        if not addresses:
            raise OSError(f"{host} has no address")
        self._addresses[(host, port)] = (now + DNS_TTL, addresses)
        return addresses

    def put(self, connection: UpstreamConnection, origin: Origin) -> None:
        """Keep ``connection``, whose answer has been read to its end, for the next request;
        close it instead if it cannot be used again."""
        if self.closed or not connection.idle_usable or connection not in self._open:
            self.discard(connection)
            return
        now = self.loop.time()
        connection.released_at = now
        idle = self._idle.get(origin)
        if idle is None:
            idle = self._idle[origin] = collections.deque()
        idle.append(connection)
        if self._sweeper is None:
            self._sweeper = self.loop.call_at(now + self.keepalive, self._sweep)
        self._wake()  # a request waiting at the limit may take it, or close it for its own

    def discard(self, connection: UpstreamConnection) -> None:
        """Close ``connection`` and count it no more."""
        connection.close()
        if connection in self._open:
            self._open.discard(connection)
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close the connections idle past their keep-alive; come back when the next will be."""
        self._sweeper = None
        expired = self.loop.time() - self.keepalive
        next_expiry: float | None = None
        for idle in self._idle.values():
            while idle and idle[0].released_at <= expired:
                self.discard(idle.popleft())
            if idle and (next_expiry is None or idle[0].released_at < next_expiry):
                next_expiry = idle[0].released_at
        if next_expiry is not None:
            spacing = min(SWEEP_SPACING, self.keepalive)
            when = max(next_expiry + self.keepalive, self.loop.time() + spacing)
            self._sweeper = self.loop.call_at(when, self._sweep)

    def _close_longest_idle(self) -> bool:
        oldest: collections.deque[UpstreamConnection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].released_at < oldest[0].released_at):
                oldest = idle
        if oldest is None:
            return False
        self.discard(oldest.popleft())
        return True

    async def close(self) -> None:
        """Close every connection, idle or in use, and wait a moment for them to be closed."""
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            idle.clear()
        connections = list(self._open)
        self._open.clear()
        for connection in connections:
            connection.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        # The transports call connection_lost on the loop's next turns; TLS ones may take more.
        for _ in range(3):
            if all(connection.closed for connection in connections):
                break
            await asyncio.sleep(0)


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
