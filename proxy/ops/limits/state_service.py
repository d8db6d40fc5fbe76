"""The supervisor's state store: the limits and ledger that the workers of one server share when
there is no Redis (docs/limits.md).

One ``MemoryStore`` in the supervisor, served on a Unix socket in a directory of the run's own
(mode 0700: no other user reaches it) by a thread with an event loop of its own. Each worker
keeps one connection (``proxy.http.limits.stores.WorkerStore``) and sends orjson lines; every
line is answered in order, and one at a time, so each call is atomic as a Redis script is. The
lines that arrive together are answered in one write. Its counters
live as long as the supervisor: a worker that restarts finds them, a restart of the server
starts them afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Final, cast

import orjson

from proxy.core.limits.memory import MemoryStore
from proxy.http.limits.stores import LINE_LIMIT, PURGE_EVERY

log = logging.getLogger("proxy.server")

# A Unix socket's path must fit in sockaddr_un (108 bytes on Linux, with its terminator).
_PATH_MAX: Final = 100


class StateService:
    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="llm-proxy-state-")
        self.path = str(Path(self.directory) / "state.sock")
        if len(self.path) > _PATH_MAX:  # a long TMPDIR
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = tempfile.mkdtemp(prefix="llm-proxy-state-", dir="/tmp")
            self.path = str(Path(self.directory) / "state.sock")
        self.store = MemoryStore()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    def start(self) -> None:
        """Serve from a thread; returns once the socket listens (or raises what stopped it)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as exc:  # told to the thread that waits in start()
                failure.append(exc)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name="state-service", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    def stop(self) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(5)
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _serve(self, ready: threading.Event) -> None:
        self._stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        server = await loop.create_unix_server(lambda: _Worker(self), self.path)
        os.chmod(self.path, 0o600)
        purging = asyncio.create_task(self._purge())
        ready.set()
        try:
            await self._stopped.wait()
        finally:
            purging.cancel()
            server.close()
            await server.wait_closed()

    async def _purge(self) -> None:
        while True:
            await asyncio.sleep(PURGE_EVERY)
            self.store.purge(time.time())

    def answer(self, line: bytes | bytearray) -> bytes:
        """The reply line to one message line."""
        try:
            message = orjson.loads(line)
            if not isinstance(message, list):
                raise ValueError("a message is a JSON array")
            reply: dict[str, object] = {"ok": self.store.call(message, time.time())}
        except ValueError as exc:  # orjson.JSONDecodeError is one
            reply = {"error": str(exc)}
        return orjson.dumps(reply) + b"\n"


class _Worker(asyncio.Protocol):
    """One worker's connection: the lines it sent, answered in order."""

    def __init__(self, service: StateService) -> None:
        self.service = service
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        end = buffer.rfind(b"\n")
        if end < 0:
            if len(buffer) > LINE_LIMIT and self._transport is not None:
                log.warning("state service: a worker sent a line past %d bytes", LINE_LIMIT)
                self._transport.close()
            return
        lines = buffer[:end].split(b"\n")
        del buffer[: end + 1]
        if self._transport is not None:
            self._transport.write(b"".join([self.service.answer(line) for line in lines]))
