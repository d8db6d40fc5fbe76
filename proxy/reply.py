"""``JsonReply``: a whole JSON response, its head and body written to the client at once.

Every answer the proxy gives whole (a completion, an error, the model list) is a JSON body
with a handful of headers. aiohttp's ``Response`` makes each one through a header multidict,
its writer's serializer, four coroutine levels and a list of buffers, for a head that differs
from one answer to the next only in its length, date and request id. This one builds the head
as aiohttp would (same headers, same order: tests/test_reply.py compares them byte for byte)
and writes it with the body in one ``transport.write``. It is still a ``StreamResponse`` to
aiohttp's server, which calls ``prepare`` then ``write_eof`` once the handler has returned,
and reads ``keep_alive``: it keeps the private fields of ``StreamResponse`` that those read
(``_eof_sent``, ``_keep_alive``, ``_payload_writer``) as aiohttp's own would be; the tests hold
what reaches the wire, and whether the connection stays open, to aiohttp's. It serves
measurably more requests, for less CPU each (docs/performance.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client_exceptions import ClientConnectionResetError
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion10, HttpVersion11

__all__ = ["JsonReply"]

# Control characters but tab (RFC 9110 section 5.5, RFC 9112 section 4), as aiohttp refuses.
_FORBIDDEN: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class JsonReply(web.StreamResponse):
    """A whole ``application/json`` response; ``headers`` are the extra ones (more may be
    added through ``headers`` until it is prepared)."""

    def __init__(
        self, body: bytes, *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(status=status, headers=headers)
        # After ``headers``, before any added later: where aiohttp's Response puts it.
        self._headers["Content-Type"] = "application/json"
        self.body = body
        self._head = b""

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._eof_sent:
            return None
        if self._payload_writer is not None:
            return self._payload_writer
        self._req = request
        writer = self._payload_writer = request._payload_writer
        keep_alive = self._keep_alive
        if keep_alive is None:
            keep_alive = self._keep_alive = request.keep_alive
        version = request.version
        fields = [f"{name}: {value}" for name, value in self._headers.items()]
        # aiohttp's serializer refuses the same: a header must never end the head early. One
        # search for them all, joined by a tab, the one control character a header may hold.
        if _FORBIDDEN.search("\t".join(fields)):
            raise ValueError("Forbidden control character in a response header")
        # Content-Length even for HEAD, which gets no body: that of the GET it stands for.
        head = (
            f"HTTP/{version.major}.{version.minor} {self._status} {self._reason}\r\n"
            + "\r\n".join(fields)
            + f"\r\nContent-Length: {len(self.body)}\r\n"
            f"Date: {rfc822_formatted_time()}\r\n"
            f"Server: {SERVER_SOFTWARE}\r\n"
        )
        if keep_alive:
            if version == HttpVersion10:
                head += "Connection: keep-alive\r\n"
        elif version == HttpVersion11:
            head += "Connection: close\r\n"
        self._head = (head + "\r\n").encode()
        return writer

    async def write_eof(self, data: bytes = b"") -> None:
        if self._eof_sent:
            return
        request, writer = self._req, self._payload_writer
        assert request is not None and writer is not None, "Response has not been started"
        assert not data, "JsonReply has its body already"
        body = b"" if request.method == "HEAD" else self.body
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ClientConnectionResetError("Cannot write to closing transport")
        out = self._head + body  # one write, one system call: a copy of a few KiB costs less
        transport.write(out)
        self._eof_sent = True
        self._body_length = len(out)  # head included, as aiohttp's writer counts it
        self._req = None
        self._payload_writer = None
        # As aiohttp's writer does: the next answer on this connection waits for a client that
        # has not taken this one (the transport asked to pause), rather than pile up behind it.
        # Asked first: drain() is a coroutine of aiohttp's, interpreted, that would otherwise be
        # made and run for every answer to find nothing to wait for.
        if request.protocol.writing_paused:
            await writer.drain()
