"""A stream's response headers leave with its first event, in one write (proxy.relay).

aiohttp sends a StreamResponse's headers in a write of their own unless the response holds them
(a flag of aiohttp's, which ``_EventStream`` sets). Through the proxy the first event follows
the headers at once, so the two cannot be told apart on the wire; here a handler waits between
``prepare`` and the first write, and the client must see nothing until the write. Should aiohttp
rename its flag, this fails, and the saving (a system call per stream) is gone.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from proxy.relay import _EventStream
from tests.harness import free_port, start_site

PAUSE = 0.3


async def test_headers_wait_for_the_first_event() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = _EventStream(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(PAUSE)
        await response.write(b"data: {}\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    port = free_port()
    runner = await start_site(app, port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        sent = loop.time()
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        first = await reader.read(65536)
        waited = loop.time() - sent
        writer.close()
    finally:
        await runner.cleanup()
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"data: {}" in first  # the headers and the event, in the first read
    assert waited >= PAUSE * 0.9
