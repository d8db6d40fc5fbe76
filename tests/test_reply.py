"""``proxy.reply.JsonReply`` on the wire: byte for byte what aiohttp's ``Response`` sends.

One aiohttp low-level server answers ``/reply`` with a ``JsonReply`` and ``/aiohttp`` with the
``web.Response`` the proxy used to make (``content_type="application/json"``), both with the
status, extra headers and body the query asks for. A raw socket client sends each request of
the table to both and compares what comes back: the head (its Date aside), the body, and
whether the connection stays open for the next request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from proxy.reply import JsonReply
from tests.harness import free_port

_DATE = re.compile(rb"\r\nDate: [^\r]*\r\n")


def _body(size: int) -> bytes:
    # Not only ASCII: the body is bytes as the normalizer made them, never re-encoded.
    text = ("é" * size)[: max(0, size // 2)]
    return b'{"text":"' + text.encode() + b'"}'


async def _handler(request: web.BaseRequest) -> web.StreamResponse:
    query = request.query
    status = int(query.get("status", "200"))
    body = _body(int(query.get("size", "40")))
    # As the proxy makes them: some headers given at once (Allow, Retry-After), the request id
    # added afterwards.
    headers = {}
    if "allow" in query:
        headers["Allow"] = query["allow"]
    if "bad" in query:
        headers["X-Bad"] = "a\r\nSet-Cookie: stolen=1"
    if "wait" in query:
        await asyncio.sleep(float(query["wait"]))
    response: web.StreamResponse
    if request.path == "/reply":
        response = JsonReply(body, status=status, headers=headers)
    else:
        response = web.Response(
            body=body, status=status, content_type="application/json", headers=headers
        )
    response.headers["X-Request-Id"] = "req-1"
    if "close" in query:
        response.force_close()
    return response


@pytest.fixture
async def port() -> AsyncIterator[int]:
    runner = web.ServerRunner(web.Server(_handler), access_log=None)
    await runner.setup()
    chosen = free_port()
    await web.TCPSite(runner, "127.0.0.1", chosen).start()
    try:
        yield chosen
    finally:
        await runner.cleanup()


@dataclass
class Reply:
    head: bytes  # Date's value blanked
    body: bytes
    next_head: bytes | None  # the answer to a second request on the connection, if any


async def _read_reply(reader: asyncio.StreamReader, method: str) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    match = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
    assert match is not None, head
    body = b"" if method == "HEAD" else await reader.readexactly(int(match[1]))
    return _DATE.sub(b"\r\nDate: -\r\n", head), body


async def _exchange(port: int, method: str, target: str, version: str, extra: str) -> Reply:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = f"{method} {target} HTTP/{version}\r\nHost: x\r\n{extra}"
        writer.write(f"{request}Content-Length: 0\r\n\r\n".encode())
        head, body = await _read_reply(reader, method)
        # The next request on the same connection: answered if it was kept open.
        writer.write(f"GET {target} HTTP/{version}\r\nHost: x\r\n{extra}\r\n".encode())
        try:
            next_head: bytes | None = (await _read_reply(reader, "GET"))[0]
        except (asyncio.IncompleteReadError, ConnectionError):
            next_head = None
        return Reply(head, body, next_head)
    finally:
        writer.close()


CASES = {
    "HTTP/1.1": ("POST", "", "1.1", ""),
    "HTTP/1.1, Connection: close": ("POST", "", "1.1", "Connection: close\r\n"),
    "HTTP/1.0": ("POST", "", "1.0", ""),
    "HTTP/1.0, keep-alive": ("POST", "", "1.0", "Connection: keep-alive\r\n"),
    "HEAD, 404": ("HEAD", "status=404", "1.1", ""),
    "405 with Allow": ("GET", "status=405&allow=POST", "1.1", ""),
    "429": ("POST", "status=429", "1.1", ""),
    "500": ("POST", "status=500", "1.1", ""),
    "forced close": ("POST", "status=400&close=1", "1.1", ""),
    "forced close, HTTP/1.0 keep-alive": ("POST", "close=1", "1.0", "Connection: keep-alive\r\n"),
    "empty body": ("POST", "size=0", "1.1", ""),
    # Past the transport's high-water mark: write_eof waits for the client to take it.
    "400 KiB": ("POST", "size=409600", "1.1", ""),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_the_same_bytes_as_aiohttp(port: int, case: tuple[str, str, str, str]) -> None:
    method, query, version, extra = case
    ours = await _exchange(port, method, f"/reply?{query}", version, extra)
    theirs = await _exchange(port, method, f"/aiohttp?{query}", version, extra)
    assert ours == theirs
    assert ours.head.startswith(f"HTTP/{version} ".encode())
    # Nothing left over (a body sent after HEAD's head would start the next answer).
    assert ours.next_head is None or ours.next_head.startswith(b"HTTP/")
    assert b"\r\nContent-Type: application/json\r\n" in ours.head


async def test_pipelined_requests_answered_in_order(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /reply?size=10 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
            b"POST /reply?size=30&status=404 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
        first_head, first = await _read_reply(reader, "POST")
        second_head, second = await _read_reply(reader, "POST")
    finally:
        writer.close()
    assert first_head.startswith(b"HTTP/1.1 200 OK\r\n") and first == _body(10)
    assert second_head.startswith(b"HTTP/1.1 404 Not Found\r\n") and second == _body(30)


async def test_a_header_with_a_newline_is_never_sent(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """As with aiohttp's own: no response at all (the connection closes), nothing injected;
    aiohttp logs the refusal."""
    for path in ("/reply", "/aiohttp"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"GET {path}?bad=1 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()
    refusals = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(refusals) == 2
    assert all("control character" in str(r.exc_info[1]) for r in refusals if r.exc_info)


async def test_a_client_gone_before_the_reply(port: int, caplog: pytest.LogCaptureFixture) -> None:
    """The write finds the transport closing: aiohttp's server takes it as the client's
    disconnection (no error logged), and goes on serving others."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /reply?wait=0.2 HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.4)
    again = await _exchange(port, "POST", "/reply?", "1.1", "")
    assert again.head.startswith(b"HTTP/1.1 200 OK\r\n") and again.next_head is not None
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_the_next_answer_waits_for_a_client_that_takes_nothing() -> None:
    """As aiohttp's writer does, ``write_eof`` waits while the transport asks to (past its
    high-water mark): a client that sends requests and reads none of the answers holds up the
    next one, rather than have them pile up in the proxy's memory."""
    size = 16 * 1024 * 1024  # more than the kernel's socket buffers take on loopback
    waiting: list[int] = []  # what each handler found still unsent on its connection

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        assert request.transport is not None
        waiting.append(request.transport.get_write_buffer_size())
        return JsonReply(_body(size))

    runner = web.ServerRunner(web.Server(handler), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            one = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
            writer.write(one * 2)
            await asyncio.sleep(0.3)
            assert len(waiting) == 1  # the second waits for the client
            for _ in range(2):
                _, body = await _read_reply(reader, "POST")
                assert body == _body(size)
        finally:
            writer.close()
    finally:
        await runner.cleanup()
    assert len(waiting) == 2 and waiting[1] <= 64 * 1024
