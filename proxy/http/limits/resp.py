"""``RespConnection``: one pipelined connection to Redis, speaking RESP2 on asyncio's Protocol.

Its calls are pipelined (``proxy.http.limits.channel``): written at once, each turn of the loop, and
answered in order. Through the ``redis`` package's
asyncio client one EVALSHA took more CPU than the rest of a request (docs/performance.md), which
limits on the hot path cannot afford. What is spoken is the protocol's stable core (RESP2, as
Redis 2.6 and every later version answers it): commands as arrays of bulk strings; replies as
simple strings, errors, integers, bulk strings and arrays.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias
from urllib.parse import parse_qs, unquote, urlsplit

from proxy.http.limits.channel import Incomplete, Pipelined, ProtocolError

# A reply is refused past this size: a read of every team's ledger is far below it.
REPLY_MAX: Final = 64 * 2**20


class ReplyError(Exception):
    """An error reply (``-ERR ...``, ``-NOSCRIPT ...``): the command's, not the connection's."""

    @property
    def kind(self) -> str:
        return str(self).split(" ", 1)[0]


Arg: TypeAlias = str | int | float | bytes
Reply: TypeAlias = "bytes | int | list[Reply] | ReplyError | None"


_SIMPLE, _ERROR, _INTEGER, _BULK, _ARRAY = b"+-:$*"


def pack(command: Sequence[Arg]) -> bytes:
    """A command as RESP2's array of bulk strings."""
    return b"*%d\r\n" % len(command) + pack_args(command)


def pack_args(args: Sequence[Arg]) -> bytes:
    """Arguments as RESP2's bulk strings, to follow an array's header: a caller that sends
    the same first arguments again and again may pack them once."""
    parts = []
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        else:
            data = repr(arg).encode() if isinstance(arg, float) else b"%d" % arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def pack_texts(texts: Sequence[str]) -> bytes:
    """``pack_args`` of strings, at one encoding for all of them (what a request adds to a
    command packed ahead)."""
    joined = "".join([f"${len(text)}\r\n{text}\r\n" for text in texts])
    data = joined.encode()
    # A length counts bytes: past ASCII, characters are not bytes.
    return data if len(data) == len(joined) else pack_args(texts)


def parse(buffer: bytes | bytearray, start: int) -> tuple[Reply, int]:
    """One reply from ``buffer[start:]`` and where the next begins; ``Incomplete`` if it has
    not all come yet."""
    end = buffer.find(b"\r\n", start)
    if end < 0:
        raise Incomplete
    kind, line = buffer[start], buffer[start + 1 : end]
    after = end + 2
    if kind == _INTEGER:
        return int(line), after
    if kind == _BULK:
        size = int(line)
        if size < 0:
            return None, after
        if size > REPLY_MAX:
            raise ProtocolError(f"a bulk string of {size} bytes")
        if len(buffer) < after + size + 2:
            raise Incomplete
        return bytes(buffer[after : after + size]), after + size + 2
    if kind == _SIMPLE:
        return bytes(line), after
    if kind == _ERROR:
        return ReplyError(bytes(line).decode(errors="replace")), after
    if kind == _ARRAY:
        count = int(line)
        if count < 0:
            return None, after
        items: list[Reply] = []
        find, size = buffer.find, len(buffer)
        for _ in range(count):
            if after < size and buffer[after] == _INTEGER:
                # The scripts' replies are arrays of integers: read here, not by recursion.
                end = find(b"\r\n", after)
                if end < 0:
                    raise Incomplete
                items.append(int(buffer[after + 1 : end]))
                after = end + 2
            else:
                item, after = parse(buffer, after)
                items.append(item)
        return items, after
    raise ProtocolError(f"not a RESP2 reply: {bytes(buffer[start : start + 16])!r}")


@dataclass(frozen=True, slots=True)
class Address:
    """Where a Redis URL points, and how to log in (docs/limits.md gives the forms)."""

    host: str | None
    port: int
    path: str | None  # a Unix socket
    tls: bool
    username: str | None
    password: str | None
    db: int


def address(url: str) -> Address:
    """``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or
    ``unix:///path[?db=N&password=...]``; ``ValueError`` otherwise."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    if "password" in query:
        password = query["password"][0]
    db = int(query["db"][0]) if "db" in query else 0
    if parts.scheme == "unix":
        return Address(None, 0, parts.path, False, username, password, db)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"not a Redis URL: {parts.scheme}://")
    if parts.path.strip("/"):
        db = int(parts.path.strip("/"))
    return Address(
        parts.hostname or "localhost",
        parts.port or 6379,
        None,
        parts.scheme == "rediss",
        username,
        password,
        db,
    )


class RespConnection(Pipelined[Reply]):
    """Redis, on one pipelined connection (``Pipelined``): ``timeout`` bounds each call."""

    name = "Redis"

    def __init__(self, timeout: float = 1.0) -> None:
        super().__init__(timeout, REPLY_MAX)

    def parse(self, buffer: bytearray, start: int) -> tuple[Reply, int]:
        return parse(buffer, start)

    @classmethod
    async def open(cls, where: Address, wait: float) -> RespConnection:
        """Connected, logged in and on its database (within the caller's timeout); ``wait``:
        the most each call may wait for its reply."""
        loop = asyncio.get_running_loop()
        if where.path is not None:
            _, connection = await loop.create_unix_connection(lambda: cls(wait), where.path)
        else:
            context = ssl.create_default_context() if where.tls else None
            host = where.host or "localhost"
            _, connection = await loop.create_connection(
                lambda: cls(wait), host, where.port, ssl=context
            )
        setup: list[list[Arg]] = []
        if where.password is not None:
            setup.append(["AUTH", *([where.username] if where.username else []), where.password])
        if where.db:
            setup.append(["SELECT", where.db])
        if setup:
            for reply in await connection.call(setup):
                if isinstance(reply, ReplyError):
                    connection.close()
                    raise reply
        return connection

    def call(self, commands: Sequence[Sequence[Arg]]) -> asyncio.Future[list[Reply]]:
        """The replies to ``commands``, in order, written now (an error reply is its
        ``ReplyError``; a connection lost fails the future with ``ConnectionError``)."""
        return self.send(b"".join([pack(command) for command in commands]), len(commands))
