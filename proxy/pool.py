"""The pool of upstream connections: aiohttp's connector and response protocol, as
``proxy.upstream`` uses them, and ``connection_pool``, which puts them together with
``proxy.connections`` (which keeps the idle ones).

Apart from ``proxy.upstream`` and left interpreted (docs/deployment.md, "The compiled
build"): these classes extend aiohttp's, and mypyc cannot compile a class whose base has
``__slots__`` (the import fails). ``proxy.upstream``, which writes every request and reads its
answer, is compiled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import cached_property, partial
from typing import Any, Final, Protocol, cast

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.connector import NEEDS_CLEANUP_CLOSED, AddrInfoType
from aiohttp.helpers import ceil_timeout

from proxy.connections import Connections


class PoolKey(aiohttp.ClientRequest):
    """A request standing for its destination with aiohttp's connector, which reads its
    connection key on every connect: here the key is built once (from the URL's host and port
    and the TLS and proxy settings, which never change)."""

    @cached_property
    def connection_key(self) -> ConnectionKey:
        return super().connection_key


class Sink(Protocol):
    """What takes an upstream connection's reads instead of aiohttp's parser (``proxy.pipe``)."""

    def received(self, data: bytes) -> None: ...


class UpstreamProtocol(ResponseHandler):
    """aiohttp's response protocol, but for a resume that has nothing to resume, and with a
    ``sink`` that may take its reads.

    aiohttp's reader asks its protocol to resume reading after every read that leaves its
    buffer low, paused or not, and the protocol then feeds its parser nothing (to parse what a
    pause left over) and resumes the transport: once per event of a stream. Only a pause
    (``pause_reading``, which sets ``_reading_paused`` and pauses the parser) leaves anything
    over, and only its resume clears the flag, so an unpaused protocol has nothing to do.
    Skipping that resume makes every stream measurably cheaper in CPU (docs/performance.md).

    While ``sink`` is set, every read goes to it, not to the parser: ``proxy.pipe`` takes a
    started stream's body that way, and gives the parser back what it must see (``parse``).
    """

    sink: Sink | None = None
    # Between the end of an answer and the next request (``proxy.upstream``): whatever arrives
    # then answers nobody's request, and would be taken for the next one's answer, another
    # team's perhaps. The connection is closed instead, never reused.
    idle: bool = False

    def data_received(self, data: bytes) -> None:
        if self.idle:
            self.force_close()
            if self.transport is not None:
                self.transport.close()
            return
        sink = self.sink
        if sink is None:
            self.parse(data)
        else:
            sink.received(data)

    def parse(self, data: bytes) -> None:
        """Feed aiohttp's parser ``data``, as a read does without a sink."""
        body = self._payload
        super().data_received(data)
        # aiohttp's parser refused what came (a malformed chunk, say): it tells the protocol
        # and closes the connection, but not the body's reader, which would wait for the idle
        # timeout and report the wrong failure.
        failure = self._exception
        if (
            failure is not None
            and body is not None
            and body.exception() is None
            and not body.is_eof()
        ):
            body.set_exception(failure)

    @property
    def should_close(self) -> bool:
        # A body taken by a sink is not over for aiohttp's parser: the connection cannot be
        # reused (aiohttp's own test, a body not yet at its end, says so too).
        return self.sink is not None or super().should_close

    def resume_reading(self, resume_parser: bool = True) -> None:
        if self._reading_paused:
            super().resume_reading(resume_parser)


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, opening its connections with ``UpstreamProtocol``: the factory is the
    connector's own attribute, which tests/test_pipe.py checks is still used."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        # cast: typeshed's partial is invariant, and aiohttp types its factory by the base class.
        self._factory = cast("partial[ResponseHandler]", partial(UpstreamProtocol, loop=self._loop))

    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: list[AddrInfoType],
        req: aiohttp.ClientRequest,
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
        client_error: type[Exception] = aiohttp.ClientConnectorError,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, ResponseHandler]:
        """A plain TCP connection to the one address a host has, opened by the loop itself.

        aiohttp opens every connection through aiohappyeyeballs, which makes the socket in
        Python (a ``socket.socket`` and its enum conversions) before the loop connects it: a
        new connection takes measurably more CPU that way than this one (docs/performance.md).
        That is a burst's price after a quiet spell has emptied the pool, paid by a provider
        on a plain-HTTP address of its own (vLLM, llama.cpp, Ollama beside the proxy). Several
        addresses still race as aiohttp races them, and TLS, a local address or a socket
        factory go aiohttp's way; either way the failures are aiohttp's own.
        """
        if (
            len(addr_infos) != 1
            or len(args) != 1  # the protocol factory
            or kwargs.get("ssl")  # aiohttp passes ssl=None and server_hostname=None for HTTP
            or kwargs.keys() - {"ssl", "server_hostname"}
            or self._local_addr_infos
            or self._socket_factory is not None
        ):
            return await super()._wrap_create_connection(
                *args, addr_infos=addr_infos, req=req, timeout=timeout,
                client_error=client_error, **kwargs,
            )  # fmt: skip
        factory: Callable[[], ResponseHandler] = args[0]
        family, _, proto, _, address = addr_infos[0]
        try:
            async with ceil_timeout(timeout.sock_connect, ceil_threshold=timeout.ceil_threshold):
                return await self._loop.create_connection(
                    factory, str(address[0]), int(address[1]), family=family, proto=proto
                )
        except OSError as exc:
            if exc.errno is None and isinstance(exc, TimeoutError):
                raise  # the timeout above: aiohttp's callers take it as it is
            raise client_error(req.connection_key, exc) from exc


# How long an idle upstream connection is kept for the next request: nginx's upstream default
# (reqwest's, which TensorZero uses, is 90 s), not aiohttp's 15 s. Traffic comes in bursts, and
# a burst that finds the pool emptied by a quiet spell opens its connections anew, each taking
# three turns of a loop that is busy with the burst, in front of the requests that wait for it.
KEEPALIVE: Final = 60.0
# The most upstream connections one process has open at once, over all providers (each of which
# has a limit of its own, its max_connections); those proxy.connections keeps idle count too,
# until it closes one to make way for a new one.
LIMIT: Final = 4096


def connection_pool(
    keepalive: float = KEEPALIVE,
    *,
    resolver: AbstractResolver | None = None,
    limit: int = LIMIT,
) -> Connections:
    """The upstream connections of one process: opened by aiohttp's connector (any number per
    host, at most ``limit`` in all, DNS answers kept five minutes, names resolved by
    ``resolver``, aiohttp's default being the system's resolver in a thread), kept ``keepalive``
    seconds when idle (``proxy.connections``)."""
    connector = _Connector(
        resolver=resolver,
        limit=limit,
        limit_per_host=0,
        ttl_dns_cache=300,
        # For those given back to it while a request waits at the limit (proxy.connections keeps
        # the others idle itself, as long).
        keepalive_timeout=keepalive,
        # aiohttp's cleanup of TLS transports left open (by Pythons before 3.12.8 and 3.13.1),
        # only where it is needed: asked for elsewhere, aiohttp warns (DeprecationWarning).
        enable_cleanup_closed=NEEDS_CLEANUP_CLOSED,
    )
    return Connections(connector, keepalive)
