"""The proxy's requests to a provider, and the answers it must cope with, byte by byte.

``proxy.http.upstream`` writes each request itself and ``proxy.http.connection`` reads the answer
with httptools' parser. The upstream here is a bare TCP server (no HTTP library), so that what
the proxy sends is seen as it is on the wire and the answers can be framed every way HTTP/1.1
allows, or not at all.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import socket
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from yarl import URL

from proxy.core.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from proxy.http.pool import KEEPALIVE, Pool
from proxy.http.upstream import Destination, Target, UpstreamClient, read_whole, request_head
from tests.support.harness import (
    TEAM_KEY,
    UPSTREAM_SECRET,
    Servers,
    collector_off,
    cyclic_garbage_of_ours,
    free_port,
)
from tests.support.replay import GOLDEN, Golden, check_stream, parse_frames
from tests.support.schema import validate

FIXTURES = Path(__file__).parents[1] / "fixtures" / "providers"
ANSWER = (FIXTURES / "openai.chat.json").read_bytes()
STREAM = (FIXTURES / "openai.chat.stream.sse").read_bytes()
CHAT = [{"role": "user", "content": "Hello"}]
AUTH = {"Authorization": f"Bearer {TEAM_KEY}"}


def _ok(headers: str, body: bytes) -> bytes:
    return f"HTTP/1.1 200 OK\r\n{headers}\r\n".encode() + body


def _chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


# Each answer by the first segment of the request's path: (bytes to send, close afterwards).
ANSWERS: dict[str, tuple[bytes, bool]] = {
    "length": (
        _ok(f"Content-Type: application/json\r\nContent-Length: {len(ANSWER)}\r\n", ANSWER),
        False,
    ),
    "chunked": (
        _ok(
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", _chunked(ANSWER, 97)
        ),
        False,
    ),
    "gzip": (
        _ok(
            "Content-Type: application/json; charset=utf-8\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(gzip.compress(ANSWER))}\r\n",
            gzip.compress(ANSWER),
        ),
        False,
    ),
    # RFC 9110's deflate is zlib's format; some servers send the raw stream instead.
    "deflate": (
        _ok(
            "Content-Type: application/json\r\nContent-Encoding: deflate\r\n"
            f"Content-Length: {len(zlib.compress(ANSWER))}\r\n",
            zlib.compress(ANSWER),
        ),
        False,
    ),
    "raw-deflate": (
        _ok(
            "Content-Type: application/json\r\nContent-Encoding: deflate\r\n"
            f"Content-Length: {len(zlib.compress(ANSWER)[2:-4])}\r\n",
            zlib.compress(ANSWER)[2:-4],
        ),
        False,
    ),
    "broken-gzip": (
        _ok(
            "Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(ANSWER)}\r\n",
            ANSWER,
        ),
        False,
    ),
    # A coding the proxy never asked for (it asks for gzip and deflate only).
    "brotli": (
        _ok(
            "Content-Type: application/json\r\nContent-Encoding: br\r\n"
            f"Content-Length: {len(ANSWER)}\r\n",
            ANSWER,
        ),
        False,
    ),
    # A head past the client's bound (64 KiB), in headers each of a size servers allow.
    "huge-head": (
        _ok(
            "Content-Type: application/json\r\n"
            + "".join(f"X-Filler-{i}: {'x' * 4000}\r\n" for i in range(20))
            + f"Content-Length: {len(ANSWER)}\r\n",
            ANSWER,
        ),
        True,
    ),
    # One header that never ends, and the connection left open: only the bound ends it.
    "endless-head": (b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * 70_000, False),
    # HTTP/1.0 style: the body ends where the connection does.
    "until-close": (_ok("Content-Type: application/json\r\n", ANSWER), True),
    "early-hints": (
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        + _ok(f"Content-Type: application/json\r\nContent-Length: {len(ANSWER)}\r\n", ANSWER),
        False,
    ),
    # Keep-alive by its headers, yet it hangs up after every answer.
    "close-after": (
        _ok(f"Content-Type: application/json\r\nContent-Length: {len(ANSWER)}\r\n", ANSWER),
        True,
    ),
    "stream": (
        _ok(
            "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n",
            _chunked(STREAM, 300),
        ),
        False,
    ),
    "not-http": (b"HELLO THERE\r\n\r\n", True),
    "no-answer": (b"", True),
    "truncated": (
        _ok("Content-Type: application/json\r\nContent-Length: 100000\r\n", ANSWER[:100]),
        True,
    ),
    "bad-chunk": (
        _ok("Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", b"zz\r\n"),
        True,
    ),
}


@functools.cache
def _large_answer(mib: int) -> bytes:
    """OpenAI's recorded answer with ``mib`` MiB of text."""
    answer = orjson.loads(ANSWER)
    answer["choices"][0]["message"]["content"] = "x" * (mib << 20)
    body = orjson.dumps(answer)
    return _ok(f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n", body)


# More than the proxy takes for a whole answer, as the tests below set it (server's
# max_response_bytes).
HUGE_MIB = 9


async def _huge(writer: asyncio.StreamWriter) -> None:
    """A JSON answer of HUGE_MIB MiB, chunked, one MiB at a time, while the proxy reads."""
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b" " * (1 << 20)
    try:
        for _ in range(HUGE_MIB):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass  # the proxy hung up once it had read its limit


async def _flood(writer: asyncio.StreamWriter) -> None:
    """An event stream sent as fast as the proxy takes it, until it hangs up."""
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    events = STREAM.split(b"\n\n")
    piece = events[1] + b"\n\n"
    try:
        writer.write(b"%x\r\n%s\r\n" % (len(events[0]) + 2, events[0] + b"\n\n"))
        while True:
            writer.write(b"%x\r\n%s\r\n" % (len(piece) * 64, piece * 64))
            await writer.drain()
    except ConnectionError:
        pass  # the proxy hung up


async def _oversized(writer: asyncio.StreamWriter) -> None:
    """An event stream whose second event never ends: over the proxy's bound for one (1 MiB)."""
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    first = STREAM.split(b"\n\n")[0] + b"\n\n"
    piece = b"data: " + b"x" * (64 * 1024)
    try:
        writer.write(b"%x\r\n%s\r\n" % (len(first), first))
        for _ in range(20):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass  # the proxy hung up


@dataclass
class Received:
    head: bytes
    body: bytes
    connection: int


@dataclass
class WireUpstream:
    """A bare TCP server speaking just enough HTTP/1.1: it records every request's head and
    body, and which connection it came on, and answers from ``ANSWERS`` (or, for "huge",
    with ``_huge``)."""

    port: int
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    live: set[asyncio.StreamWriter] = field(default_factory=set)  # its open connections

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        self.live.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the proxy closed the connection
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.received.append(Received(head, body, connection))
                scenario = head.split(b" ")[1].split(b"/")[1].decode()
                if scenario == "huge":
                    await _huge(writer)
                    return
                if scenario == "flood":
                    await _flood(writer)
                    return
                if scenario == "oversized":
                    await _oversized(writer)
                    return
                if scenario == "large":
                    writer.write(_large_answer(16))
                    await writer.drain()
                    continue
                answer, close = ANSWERS[scenario]
                writer.write(answer)
                await writer.drain()
                if close:
                    return
        finally:
            self.live.discard(writer)
            writer.close()

    def url(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.port}/{scenario}/v1"


@pytest.fixture
def wire(servers: Servers) -> Iterator[WireUpstream]:
    upstream = WireUpstream(free_port())
    server = servers.loop.call(
        lambda: asyncio.start_server(upstream.serve, "127.0.0.1", upstream.port)
    )
    yield upstream
    servers.loop.call(lambda: _stop(server, upstream))


async def _stop(server: asyncio.Server, upstream: WireUpstream) -> None:
    server.close()
    # The proxy keeps its connections to the upstream open (the pool), and from Python 3.12 on
    # wait_closed waits for every connection to end: the upstream ends them itself.
    for writer in list(upstream.live):
        writer.close()
    await server.wait_closed()


def proxy_for(servers: Servers, wire: WireUpstream, *scenarios: str, **provider: Any) -> str:
    providers = {
        name: {"base_url": wire.url(name), "api_key": UPSTREAM_SECRET, **provider}
        for name in scenarios
    }
    models = {name: {"provider": name, "model": f"up-{name}"} for name in scenarios}
    url, _ = servers.start_proxy(models, providers=providers)
    return url


async def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/chat/completions", json=body, headers=AUTH) as response,
    ):
        return response.status, await response.read()


def headers_of(head: bytes) -> dict[str, str]:
    fields = (line.partition(":") for line in head.decode().split("\r\n")[1:] if line)
    return {name.lower(): value.strip() for name, _, value in fields}


@pytest.mark.parametrize(
    ("url", "headers", "first_lines"),
    [
        # The default port is left out of Host, as aiohttp does; any other is kept.
        (
            "https://api.openai.com/v1/chat/completions",
            {},
            ["POST /v1/chat/completions HTTP/1.1", "Host: api.openai.com"],
        ),
        (
            "http://10.0.0.7:80/v1/chat/completions",
            {},
            ["POST /v1/chat/completions HTTP/1.1", "Host: 10.0.0.7"],
        ),
        (
            "http://127.0.0.1:8080/v1/completions",
            {},
            ["POST /v1/completions HTTP/1.1", "Host: 127.0.0.1:8080"],
        ),
        (
            "http://[::1]:8080/v1/chat/completions",
            {},
            ["POST /v1/chat/completions HTTP/1.1", "Host: [::1]:8080"],
        ),
        # A name in Unicode goes out in its ASCII form; a path and query percent-encoded.
        (
            "https://bücher.example/v1/chat/completions",
            {},
            ["POST /v1/chat/completions HTTP/1.1", "Host: xn--bcher-kva.example"],
        ),
        (
            "https://h/a b/chat/completions?api-version=2024 10",
            {},
            ["POST /a%20b/chat/completions?api-version=2024+10 HTTP/1.1", "Host: h"],
        ),
        # A configured Host replaces the URL's; configured headers come in their order.
        (
            "https://10.0.0.7/v1",
            {"Host": "api.example", "X-A": "1"},
            ["POST /v1 HTTP/1.1", "Host: api.example", "X-A: 1"],
        ),
    ],
)
def test_the_head_of_a_request(url: str, headers: dict[str, str], first_lines: list[str]) -> None:
    head = request_head(URL(url), headers)
    assert head.endswith(b"\r\n") and not head.endswith(b"\r\n\r\n")  # Content-Length follows
    lines = head.decode().split("\r\n")[:-1]
    assert lines[: len(first_lines)] == first_lines
    assert [line.partition(":")[0] for line in lines[len(first_lines) :]] == [
        "Accept",
        "Accept-Encoding",
        "User-Agent",
    ]


async def test_the_request_on_the_wire(servers: Servers, wire: WireUpstream) -> None:
    """Request line, Host, the provider's headers and query, the length and body, and what
    the defaults (the codings the proxy can undo, its User-Agent)."""
    providers = {
        "length": {
            "base_url": wire.url("length"),
            "api_key": UPSTREAM_SECRET,
            "headers": {"X-Team-Tag": "blue"},
            "query": {"api-version": "2024-10-21"},
        }
    }
    url, _ = servers.start_proxy({"m": {"provider": "length", "model": "up"}}, providers=providers)
    client = openai.AsyncOpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0)
    async with client:
        answer = await client.chat.completions.create(model="m", messages=CHAT)  # type: ignore[arg-type]
        assert answer.choices[0].message.content
        stream = await client.chat.completions.create(model="m", messages=CHAT, stream=True)  # type: ignore[arg-type]
        # "length" answers with JSON even so: the proxy makes that a stream for the client.
        chunks = [chunk async for chunk in stream]
        assert chunks
    whole, streamed = wire.received
    assert (
        whole.head.split(b"\r\n")[0]
        == b"POST /length/v1/chat/completions?api-version=2024-10-21 HTTP/1.1"
    )
    headers = headers_of(whole.head)
    assert headers["host"] == f"127.0.0.1:{wire.port}"
    assert headers["authorization"] == f"Bearer {UPSTREAM_SECRET}"
    assert headers["content-type"] == "application/json"
    assert headers["x-team-tag"] == "blue"
    assert headers["accept"] == "*/*"
    assert "gzip" in headers["accept-encoding"].split(", ")
    assert headers["user-agent"].startswith("llm-proxy/")
    assert int(headers["content-length"]) == len(whole.body)
    assert orjson.loads(whole.body) == {"model": "up", "messages": CHAT}
    assert headers_of(streamed.head)["accept"] == "text/event-stream"
    assert orjson.loads(streamed.body)["stream"] is True
    # Every header once: a configured header and a default must not both go out.
    names = [line.partition(b":")[0].lower() for line in whole.head.split(b"\r\n")[1:] if line]
    assert len(names) == len(set(names))


async def test_a_large_body_goes_out_whole(servers: Servers, wire: WireUpstream) -> None:
    """A body past the size that is written in one piece with the head (proxy.http.upstream)."""
    url = proxy_for(servers, wire, "length")
    messages = [{"role": "user", "content": "é" * 300_000}]  # 600 kB of UTF-8
    client = openai.AsyncOpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0)
    async with client:
        answer = await client.chat.completions.create(model="length", messages=messages)  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    (received,) = wire.received
    assert int(headers_of(received.head)["content-length"]) == len(received.body)
    assert orjson.loads(received.body) == {"model": "up-length", "messages": messages}


async def test_a_header_given_in_the_configuration_replaces_the_default(
    servers: Servers, wire: WireUpstream
) -> None:
    url = proxy_for(
        servers, wire, "length", headers={"User-Agent": "acme-gateway", "Host": "api.example"}
    )
    status, raw = await post(url, {"model": "length", "messages": CHAT})
    assert status == 200, raw
    headers = headers_of(wire.received[0].head)
    assert headers["user-agent"] == "acme-gateway"
    assert headers["host"] == "api.example"


@pytest.mark.parametrize(
    "scenario",
    ["length", "chunked", "gzip", "deflate", "raw-deflate", "until-close", "early-hints"],
)
async def test_every_framing_of_an_answer_is_read_whole(
    servers: Servers, wire: WireUpstream, scenario: str
) -> None:
    url = proxy_for(servers, wire, scenario)
    client = openai.AsyncOpenAI(base_url=url, api_key=TEAM_KEY, max_retries=0)
    async with client:
        answer = await client.chat.completions.create(model=scenario, messages=CHAT)  # type: ignore[arg-type]
    expected = orjson.loads(ANSWER)
    assert answer.choices[0].message.content == expected["choices"][0]["message"]["content"]
    assert answer.usage is not None
    assert answer.usage.total_tokens == expected["usage"]["total_tokens"]


async def test_a_chunked_event_stream_is_relayed(servers: Servers, wire: WireUpstream) -> None:
    """The recorded OpenAI stream, in chunks cut across its events: what the client gets is
    that recording's golden file."""
    url = proxy_for(servers, wire, "stream")
    async with aiohttp.ClientSession() as session:
        body = {"model": "stream", "messages": CHAT, "stream": True}
        async with session.post(url + "/chat/completions", json=body, headers=AUTH) as response:
            assert response.status == 200
            raw = await response.read()
    golden = Golden(
        "openai.chat.stream.sse",
        orjson.loads((GOLDEN / "openai.chat.stream.sse.json").read_bytes()),
    )
    check_stream(golden, parse_frames(raw), include_usage=False, created=None, model="stream")


async def test_connections_are_kept_alive_and_reused(servers: Servers, wire: WireUpstream) -> None:
    # Every framing in turn on the same connections: a pooled connection keeps its response
    # parser from one answer to the next (proxy.http.connection), so each answer must still be
    # read whole and right after any other.
    framings = ("length", "chunked", "gzip", "early-hints")
    url = proxy_for(servers, wire, *framings)
    expected = orjson.loads(ANSWER)["choices"][0]["message"]["content"]
    for model in framings * 3:
        status, raw = await post(url, {"model": model, "messages": CHAT})
        assert status == 200, raw
        assert orjson.loads(raw)["choices"][0]["message"]["content"] == expected, model
    by_scenario: dict[str, set[int]] = {}
    for received in wire.received:
        by_scenario.setdefault(received.head.split(b"/")[1].decode(), set()).add(
            received.connection
        )
    # One provider, one connection, request after request (the providers share a host and
    # port, so they may share one too).
    assert set(by_scenario) == set(framings)
    assert all(len(connections) == 1 for connections in by_scenario.values()), by_scenario


@pytest.mark.parametrize(("keepalive", "connections"), [(0.1, 2), (KEEPALIVE, 1)])
async def test_an_idle_connection_is_kept_for_the_pools_keep_alive(
    keepalive: float, connections: int
) -> None:
    # Past its keep-alive, an idle connection is not taken again (the pool's sweep closes it,
    # and the pool would not hand it out); within it, it is. KEEPALIVE itself is well past the
    # idle time here: that it outlasts uvicorn's 5 s is its value's to say, not a test's to wait.
    opened = 0
    writers: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal opened
        opened += 1
        writers.append(writer)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(ANSWERS["length"][0])
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool(keepalive)
    client = UpstreamClient(pool)
    destination = Destination(URL(f"http://127.0.0.1:{port}/v1/chat/completions"), {})
    target = Target({}, 5.0)
    try:
        for _ in range(2):
            response = await client.send(destination, target, b"{}", stream=False)
            assert await read_whole(response, 1 << 20) == ANSWER
            await asyncio.sleep(0.3)
    finally:
        await pool.close()
        for writer in writers:  # their handlers may not have seen the close yet
            writer.close()
        server.close()
        await server.wait_closed()
    assert opened == connections


def _resolving(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> list[str]:
    """Every name resolves to these IPv4 addresses, in this order (as a DNS answer lists them);
    returns the names asked for, one per lookup."""
    asked: list[str] = []
    loop = asyncio.get_running_loop()
    original = loop.getaddrinfo

    async def getaddrinfo(host: Any, port: Any, **kwargs: Any) -> Any:
        if not addresses:
            return await original(host, port, **kwargs)
        asked.append(host)
        return [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))
            for address in addresses
        ]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return asked


# (the host in the URL, the addresses a name resolves to)
_WAYS = [
    ("127.0.0.1", ()),  # an address
    ("upstream.test", ("127.0.0.1",)),  # a name with one address
    # Two addresses, the first refusing: the next is tried.
    ("upstream.test", ("127.0.0.2", "127.0.0.1")),
]


@pytest.mark.parametrize(("host", "addresses"), _WAYS)
async def test_a_new_connection_goes_to_the_first_address_that_takes_it(
    monkeypatch: pytest.MonkeyPatch, host: str, addresses: tuple[str, ...]
) -> None:
    """And a name is resolved once for both connections (the pool keeps its addresses)."""
    asked = _resolving(monkeypatch, *addresses)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                ANSWERS["length"][0].replace(b"200 OK\r\n", b"200 OK\r\nConnection: close\r\n")
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    destination = Destination(URL(f"http://{host}:{port}/v1/chat/completions"), {})
    target = Target({}, 5.0)
    try:
        for _ in range(2):  # each on a connection of its own (the upstream said close)
            response = await UpstreamClient(pool).send(destination, target, b"{}", stream=False)
            assert await read_whole(response, 1 << 20) == ANSWER
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()
    assert asked == ([host] if addresses else [])


def _full_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A port whose queue of connections is full: the kernel drops new SYNs, so a connect to it
    waits for as long as its caller lets it (as one to a host that is down or filtered)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    queued: list[socket.socket] = []
    for _ in range(8):
        filler = socket.socket()
        filler.settimeout(0.2)
        queued.append(filler)
        try:
            filler.connect(listener.getsockname())
        except TimeoutError:
            return listener, queued  # this one was dropped: the queue is full
    raise AssertionError("the listener's queue never filled up")


@pytest.mark.parametrize(("host", "addresses"), _WAYS)
@pytest.mark.parametrize("failure", ["refused", "no answer"])
async def test_an_upstream_that_cannot_be_reached_fails_the_connect(
    monkeypatch: pytest.MonkeyPatch, host: str, addresses: tuple[str, ...], failure: str
) -> None:
    """However many addresses: a refusal is a connect error, silence a timeout once the
    provider's connect timeout is up."""
    _resolving(monkeypatch, *addresses)
    if failure == "refused":
        listener, queued, port = None, [], free_port()
    else:
        listener, queued = _full_listener()
        port = listener.getsockname()[1]
    pool = Pool()
    destination = Destination(URL(f"http://{host}:{port}/v1/chat/completions"), {})
    target = Target({}, 0.3)
    started = time.monotonic()
    try:
        with pytest.raises(UpstreamError) as raised:
            await UpstreamClient(pool).send(destination, target, b"{}", stream=False)
    finally:
        await pool.close()
        for sock in [*queued, *([listener] if listener else [])]:
            sock.close()
    if failure == "refused":
        assert type(raised.value) is UpstreamConnectError
        assert raised.value.message.startswith("Could not reach the upstream (connect)")
    else:
        assert type(raised.value) is UpstreamTimeout
        assert raised.value.message == "The upstream did not answer in time (connect)"
        assert time.monotonic() - started < 5  # the connect timeout ended it, not a hang


async def test_an_event_over_the_bound_after_the_first_byte_leaves_no_cycle(
    servers: Servers, wire: WireUpstream
) -> None:
    """The stream ends in an error event; its request is freed by reference counts, not left
    to the cycle collector through the error's traceback (``proxy.core.errors.handled``)."""
    url = proxy_for(servers, wire, "oversized")
    with collector_off():
        for _ in range(2):
            status, raw = await post(url, {"model": "oversized", "messages": CHAT, "stream": True})
            assert status == 200
            assert b"larger than 1048576 bytes" in raw  # the stream's error event
        await asyncio.sleep(0.2)  # the observers are told after the answer (REPORT_DELAY)
        assert cyclic_garbage_of_ours() == []


async def test_a_connection_the_upstream_hung_up_is_not_reused(
    servers: Servers, wire: WireUpstream
) -> None:
    url = proxy_for(servers, wire, "close-after", "until-close")
    for model in ("close-after", "until-close", "close-after", "close-after"):
        status, raw = await post(url, {"model": model, "messages": CHAT})
        assert status == 200, raw
        await asyncio.sleep(0.05)  # the hang-up reaches the proxy before the next request
    assert len({received.connection for received in wire.received}) == 4


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ("not-http", "invalid HTTP response"),
        ("no-answer", "Could not reach the upstream"),
        ("truncated", "connection broke"),
        ("bad-chunk", "invalid HTTP response"),
        ("broken-gzip", "invalid HTTP response"),
        ("brotli", "invalid HTTP response"),
        ("huge-head", "invalid HTTP response"),
        ("endless-head", "invalid HTTP response"),
    ],
)
async def test_a_broken_answer_is_a_502(
    servers: Servers, wire: WireUpstream, scenario: str, message: str
) -> None:
    url = proxy_for(servers, wire, scenario)
    status, raw = await post(url, {"model": scenario, "messages": CHAT})
    assert status == 502, raw
    body = orjson.loads(raw)
    validate(body, "ErrorResponse")
    assert body["error"]["type"] == "upstream_error"
    assert message in body["error"]["message"]
    # And the proxy still serves: the broken connection went nowhere near the pool.
    url = proxy_for(servers, wire, "length")
    status, raw = await post(url, {"model": "length", "messages": CHAT})
    assert status == 200, raw


@pytest.mark.parametrize("scenario", ["huge", "large"])
async def test_an_answer_over_the_size_limit_is_a_502(
    servers: Servers, wire: WireUpstream, scenario: str
) -> None:
    # "huge" comes in chunks while the proxy reads; "large" (16 MiB) with its length, at once.
    limit = 8 << 20
    url, _ = servers.start_proxy(
        {scenario: {"provider": scenario, "model": "up"}},
        providers={scenario: {"base_url": wire.url(scenario), "api_key": UPSTREAM_SECRET}},
        server={"max_response_bytes": limit},
    )
    status, raw = await post(url, {"model": scenario, "messages": CHAT})
    assert status == 502, raw[:200]
    body = orjson.loads(raw)
    validate(body, "ErrorResponse")
    assert f"larger than {limit} bytes" in body["error"]["message"]


async def test_an_answer_under_the_size_limit_is_taken_whole(
    servers: Servers, wire: WireUpstream
) -> None:
    # 16 MiB under a limit of 17 MiB (the default's order of size is too slow and too large for
    # a test; tests/core/test_config.py checks the default against the largest answer).
    url, _ = servers.start_proxy(
        {"large": {"provider": "large", "model": "up"}},
        providers={"large": {"base_url": wire.url("large"), "api_key": UPSTREAM_SECRET}},
        server={"max_response_bytes": 17 << 20},
    )
    status, raw = await post(url, {"model": "large", "messages": CHAT})
    assert status == 200, raw[:200]
    assert len(orjson.loads(raw)["choices"][0]["message"]["content"]) == 16 << 20


def _take_answer(
    port: int,
    request: bytes,
    *,
    pause: float,
    rcvbuf: int | None = None,
    rate: int = 0,
    slow_for: float = 0.0,
) -> tuple[bytes, float]:
    """Send ``request``, read the answer's first bytes, wait ``pause``, then read until the
    connection ends: for ``slow_for`` seconds only ``rate`` bytes per 50 ms, then as fast as it
    comes. What came, and the seconds after the pause."""
    with socket.socket() as sock:
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.connect(("127.0.0.1", port))
        sock.sendall(request)
        received = sock.recv(4096)
        time.sleep(pause)
        sock.settimeout(10)
        started = time.monotonic()
        while time.monotonic() - started < slow_for:
            received += sock.recv(rate)
            time.sleep(0.05)
        while data := sock.recv(1 << 20):
            received += data
        return received, time.monotonic() - started


def _request(model: str, *, stream: bool = False) -> bytes:
    body = orjson.dumps({"model": model, "messages": CHAT, "stream": stream})
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TEAM_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


async def test_a_client_that_stops_reading_a_stream_is_let_go(
    servers: Servers, wire: WireUpstream
) -> None:
    """It is given the idle timeout to take what was written, then the proxy hangs up on it and
    on the upstream, holding neither: the stream's bytes wait in neither process meanwhile."""
    url = proxy_for(servers, wire, "flood", timeouts={"idle": 0.5, "total": 60})
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    stops = functools.partial(_take_answer, pause=3.0, rcvbuf=4096)  # six idle timeouts
    received, waited = await asyncio.to_thread(stops, port, _request("flood", stream=True))
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert not received.endswith(b"0\r\n\r\n")  # cut off, not ended
    assert waited < 5  # what the kernel held, then the end of the connection


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_client_that_stops_reading_a_large_answer_is_let_go(
    servers: Servers, wire: WireUpstream, stream: bool
) -> None:
    """A whole answer larger than the client's transport takes at once, sent as it is or as a
    stream (asked for one, the upstream answered whole): a client that takes nothing of it for
    the idle timeout is hung up on, and holds neither the connection nor the answer's 16 MiB in
    the proxy (aiohttp would have waited for it for good)."""
    url = proxy_for(servers, wire, "large", timeouts={"idle": 0.5, "total": 60})
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    stops = functools.partial(_take_answer, pause=3.0, rcvbuf=4096)
    received, waited = await asyncio.to_thread(stops, port, _request("large", stream=stream))
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    if stream:
        assert not body.endswith(b"0\r\n\r\n")  # cut off, not ended
    else:
        assert len(body) < int(headers_of(head)["content-length"])
    assert waited < 5  # what the kernel held, then the end of the connection


async def test_a_client_that_reads_a_large_answer_slowly_gets_all_of_it(
    servers: Servers, wire: WireUpstream
) -> None:
    """Taking longer than the idle timeout in all is no fault, as long as it keeps taking."""
    url = proxy_for(servers, wire, "large", timeouts={"idle": 0.5, "total": 60})
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    # Slowly enough that what it takes leaves the socket's send queue, not the transport.
    slowly = functools.partial(_take_answer, pause=0.0, rcvbuf=4096, rate=4096, slow_for=2.0)
    received, waited = await asyncio.to_thread(slowly, port, _request("large"))
    head, _, body = received.partition(b"\r\n\r\n")
    assert len(body) == int(headers_of(head)["content-length"])
    assert waited > 2.0
    answer = orjson.loads(body)
    validate(answer, "CreateChatCompletionResponse")
    assert len(answer["choices"][0]["message"]["content"]) == 16 << 20
