"""A scripted upstream on raw asyncio: no HTTP library between the test and the wire.

Each request is answered by the script named by the first segment of its path
(``http://127.0.0.1:<port>/<script>/v1``): a coroutine given the request's bytes (head and
body) that writes whatever it likes, as slowly as it likes, to the proxy's connection, and
returns True to keep the connection for another request. The upstream counts the requests each
script received, so a test can tell whether the proxy tried again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import orjson

from proxy.http.app import Gateway
from tests.support.harness import Servers

Script = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool | None]]

# With Connection: close, as an honest server says when it closes after one answer (a proxy
# that took the connection back for another request would race the close).
EVENT_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def text_event(text: str, index: int = 0) -> bytes:
    """One OpenAI chat chunk event carrying ``text`` for choice ``index``."""
    payload = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1764600000,
        "model": "hostile",
        "choices": [{"index": index, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class HostileUpstream:
    """Serves ``scripts`` by name on loopback; ``received`` counts requests per script."""

    def __init__(self, scripts: Mapping[str, Script]) -> None:
        self.scripts = dict(scripts)
        self.received: Counter[str] = Counter()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._live: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def url(self, script: str) -> str:
        return f"http://127.0.0.1:{self.port}/{script}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._live):
            writer.close()
        # Scripts still sleeping mid-answer end here, not with the loop.
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Until a script returns anything but True: it may leave its answer unfinished.
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._live.add(writer)
        try:
            keep: bool | None = True
            while keep is True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                script = head.split(b" ")[1].split(b"/")[1].decode()
                self.received[script] += 1
                try:
                    keep = await self.scripts[script](head + body, writer)
                except ConnectionError:
                    return
        finally:
            self._tasks.discard(task)
            self._live.discard(writer)
            writer.close()


@contextmanager
def proxied(
    servers: Servers,
    scripts: Mapping[str, Script],
    *,
    provider: Mapping[str, Any] | None = None,
    metrics: bool = False,
    **extra: Any,
) -> Iterator[tuple[HostileUpstream, str, Gateway]]:
    """A hostile upstream serving ``scripts`` on the servers' loop, and a proxy in front of it
    with one provider and one model per script, each named after it (``provider``: the
    providers' other settings; ``extra``: the configuration's other sections)."""
    upstream = HostileUpstream(scripts)
    servers.loop.call(upstream.start)
    try:
        providers = {name: {"base_url": upstream.url(name), **(provider or {})} for name in scripts}
        models = {name: {"provider": name, "model": "up"} for name in scripts}
        url, _, gateway = servers.start_app(models, metrics=metrics, providers=providers, **extra)
        yield upstream, url, gateway
    finally:
        servers.loop.call(upstream.stop)
