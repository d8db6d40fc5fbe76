"""Running the proxy: one worker in this process, or N worker processes on one port.

Workers share the listening port through SO_REUSEPORT, so the kernel spreads connections over
them and no process hands sockets around. The parent only supervises: it starts the workers,
restarts one that dies, and passes SIGTERM/SIGINT (drain and stop) and SIGHUP (reload) on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from proxy.app import STATE, Observer, build_app
from proxy.config import Config, load_config

log = logging.getLogger("proxy.server")


@dataclass(frozen=True, slots=True)
class Listen:
    config_path: Path
    host: str
    port: int
    workers: int


def run(loop_main: Callable[[], Any]) -> Any:
    """Run a coroutine function on uvloop where it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return asyncio.run(loop_main())
    return uvloop.run(loop_main())


def make_observers(config: Config) -> list[Observer]:
    """The observers every worker runs with (metrics and the access log)."""
    return []


async def serve_worker(
    listen: Listen, *, reuse_port: bool, ready: Callable[[], None] | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then drain in-flight requests and stop."""
    config = load_config(listen.config_path)
    app = build_app(config, observers=make_observers(config))
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=config.server.drain_seconds,
    )
    await runner.setup()
    site = web.TCPSite(
        runner, listen.host, listen.port, reuse_port=reuse_port or None, backlog=2048
    )
    await site.start()
    log.info("worker %d listening on http://%s:%d", os.getpid(), listen.host, listen.port)
    if ready is not None:
        ready()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        app[STATE].ready = False
        log.info("worker %d draining", os.getpid())
        await runner.cleanup()


def _worker_main(listen: Listen) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        run(lambda: serve_worker(listen, reuse_port=True))


def serve(listen: Listen) -> int:
    """Serve with ``listen.workers`` workers; returns the exit status."""
    if listen.workers == 1:
        with contextlib.suppress(KeyboardInterrupt):
            run(lambda: serve_worker(listen, reuse_port=False))
        return 0
    return _supervise(listen)


def _supervise(listen: Listen) -> int:
    # spawn, not fork: a worker must not inherit the parent's state (or a prometheus registry).
    context = multiprocessing.get_context("spawn")
    workers: list[multiprocessing.process.BaseProcess] = []
    stopping = False

    def start_worker() -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_worker_main, args=(listen,), daemon=False)
        process.start()
        return process

    def on_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for process in workers:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    workers.extend(start_worker() for _ in range(listen.workers))
    while not stopping:
        time.sleep(0.2)
        for i, process in enumerate(workers):
            if not process.is_alive() and not stopping:
                log.warning(
                    "worker %s exited with %s; starting a new one", process.pid, process.exitcode
                )
                workers[i] = start_worker()
    status = 0
    for process in workers:
        process.join()
        if process.exitcode not in (0, -signal.SIGTERM):
            status = 1
    return status
