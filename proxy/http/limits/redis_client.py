"""``RedisClient``: the ``redis`` package's asyncio client, as the limits use it (docs/limits.md).

A server named by URL (``redis://``, ``rediss://`` for TLS, ``unix://``; ACL user and password
in it), or the master that Sentinel names (``state.sentinel``), asked again whenever a connection
is made: after a failover, the next call reaches the new master. Calls go out as pipelines
(``transaction=False``: the scripts are atomic each, and one team's refused call must not undo
the others').

The client's exceptions become ``StoreUnavailable`` here, and nowhere else. Nothing is retried
by the client: the limiter's failure policy decides, within the timeout, and a pipeline sent
again after its connection was lost under it would count its reservations twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final, TypeAlias

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

from proxy.core.limits.config import SentinelConfig
from proxy.http.limits.stores import unavailable

Command: TypeAlias = tuple[str | int | bytes, ...]

# The error replies of a server that serves nobody now: whatever the call, it was not run, and
# may be sent again once the server answers. The client reads some as exceptions of their own
# (and strips their prefix); the others keep Redis's prefix.
_DOWN_REPLIES: Final = (
    AskError,  # and MOVED
    ClusterDownError,  # and MASTERDOWN
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    TryAgainError,
)
_DOWN_PREFIXES: Final = frozenset(
    {"ASK", "BUSY", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "MISCONF", "MOVED", "NOAUTH",
     "NOPERM", "NOREPLICAS", "NOSCRIPT", "OOM", "READONLY", "TRYAGAIN", "WRONGPASS"}
)  # fmt: skip


def down(error: ResponseError) -> bool:
    """An error reply that is the server's failure, not the call's."""
    return isinstance(error, _DOWN_REPLIES) or str(error).split(" ", 1)[0] in _DOWN_PREFIXES


class RedisClient:
    """``where``: a URL, or Sentinel's; ``timeout`` bounds each call, connecting included."""

    name = "Redis"

    def __init__(self, where: str | SentinelConfig, timeout: float) -> None:
        self.timeout = timeout
        self._sentinel: Sentinel | None = None
        # No retries. ``pipeline`` bounds each call whole: no socket_timeout, which would cost
        # every write a task of its own (the client's wait_for). RESP2, whatever the client's
        # version's default: the replies read are the same, from any server.
        retry = Retry(NoBackoff(), 0)
        common: dict[str, Any] = {"socket_connect_timeout": timeout, "retry": retry, "protocol": 2}
        if isinstance(where, str):
            # A rediss:// URL makes the connection TLS; the certificate's name is checked,
            # whatever the client's version's default.
            checked = {"ssl_check_hostname": True} if where.startswith("rediss:") else {}
            self._redis = Redis.from_url(where, **common, **checked)
            return
        # TLS to the sentinels and to the master alike (a connection without takes no ssl_*).
        tls: dict[str, Any] = {"ssl": True, "ssl_check_hostname": True} if where.tls else {}
        # The sentinels are asked in turn: one that does not answer leaves time for the next.
        each = timeout / len(where.hosts)
        self._sentinel = Sentinel(
            where.hosts,
            sentinel_kwargs={
                **common,
                "socket_connect_timeout": each,
                "socket_timeout": each,
                **tls,
            },
        )
        self._redis = self._sentinel.master_for(
            where.service,
            db=where.db,
            username=where.username,
            password=where.password,
            **common,
            **tls,
        )

    async def pipeline(self, commands: Sequence[Command]) -> list[object]:
        """The replies to ``commands``, sent at once (an error reply is its ``ResponseError``);
        ``StoreUnavailable`` if they do not come within the timeout."""
        if not commands:
            return []
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        try:
            async with asyncio.timeout(self.timeout):
                pipe = self._redis.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)  # queued: a pipeline's, not awaited
                replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            # Not only RedisError: a server that speaks wrongly can make the client raise
            # anything (an AttributeError in its handshake), still the store's failure. The
            # client has dropped the connection (a late reply would be taken for the next
            # call's): the next call makes one again, to Sentinel's master of the moment.
            raise unavailable(self.name, exc, sent=not _unsent(exc)) from None
        if task is not None and task.cancelling() > cancelling:
            # Cancelled as the replies came, and the client returned them all the same (seen
            # with redis 8 on Python 3.11): a task being closed must not go on as if it were
            # not (tests/integration/test_prefetch_redis.py, a worker closing, hung).
            raise asyncio.CancelledError
        return replies

    async def close(self) -> None:
        await self._redis.aclose()
        if self._sentinel is not None:
            for sentinel in self._sentinel.sentinels:
                await sentinel.aclose()


def _unsent(exc: BaseException) -> bool:
    # No connection was made (refused, no master known): nothing was written. The client
    # says so in its message alone ("Error 111 connecting to ...", "Timeout connecting").
    return isinstance(exc, MasterNotFoundError) or "connecting" in str(exc)
