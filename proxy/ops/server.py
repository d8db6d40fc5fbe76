"""Running the proxy: one worker in this process, or N worker processes on one port.

Workers share the listening port through SO_REUSEPORT, so the kernel spreads connections over
them and no process hands sockets around. The parent only supervises: it starts the workers,
restarts one that dies (later each time one dies young: ``Restarts``), and passes SIGTERM/SIGINT
(drain and stop) and SIGHUP (reload) on. Each worker reloads its configuration by itself
(``reload_config``); a worker started later reads the file as it is then.

Metrics with several workers use prometheus_client's multiprocess mode: the parent makes a fresh
directory for the run and names it in PROMETHEUS_MULTIPROC_DIR before it starts any worker, so
every worker (a spawned interpreter, importing prometheus_client anew) keeps its values in files
there; any worker's /metrics merges them all. The directory is removed when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Container, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import mark_process_dead

from proxy.core.config import Config, load_config
from proxy.core.errors import ConfigError, InvalidRequest, ProxyError, error_body
from proxy.core.telemetry_config import Otlp
from proxy.http.app import Gateway, Observer, Runtime, State
from proxy.http.cloud import cloud_problems, warm
from proxy.http.reply import JsonReply
from proxy.ops.access_log import AccessLog
from proxy.ops.collector import Collector
from proxy.ops.limits.metrics import LimitMetrics
from proxy.ops.limits.state_service import StateService
from proxy.ops.metrics import Exposition, ProxyMetrics, metrics_app, metrics_routes
from proxy.ops.outlet import Outlet, OutletHandler

if TYPE_CHECKING:
    from proxy.ops.telemetry.setup import Telemetry

log = logging.getLogger("proxy.server")


@dataclass(frozen=True, slots=True)
class Listen:
    config_path: Path
    host: str
    port: int
    workers: int
    watch: float | None = None  # reload when the file changes, checking every this many seconds


def run(loop_main: Callable[[], Any]) -> Any:
    """Run a coroutine function on uvloop where it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return asyncio.run(loop_main())
    return uvloop.run(loop_main())


def make_observers(
    config: Config, registry: CollectorRegistry | None = None, outlet: Outlet | None = None
) -> list[Observer]:
    """The observers every worker runs with: metrics (on ``registry``) and the access log
    (through ``outlet``, the worker's stderr unless a test reads it elsewhere; one made for
    stderr if none is given)."""
    observers: list[Observer] = []
    if config.metrics.enabled:
        registry = registry if registry is not None else CollectorRegistry()
        deployments = [
            (name, deployment.provider, deployment.model)
            for name, model in config.models.items()
            for deployment in model.deployments
        ]
        observers.append(ProxyMetrics(registry, config.providers, deployments))
        observers.append(LimitMetrics(registry, config.teams.values()))
    if config.access_log:
        observers.append(AccessLog(outlet if outlet is not None else Outlet(2)))
    return observers


class _RequestHandler(web.RequestHandler):
    """aiohttp's handler of one connection, answering what it could not parse (a bad request
    line, headers too large, a Content-Length that is no number) in the shape of
    docs/canonical-output.md section 4 instead of aiohttp's plain text."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # Not aiohttp's own, which logs the parser's traceback and message: they quote the bytes
        # that failed, an Authorization value among them. One short line, no raw bytes.
        log.warning(
            "malformed HTTP request from %s: %s (answered %d)",
            request.remote,
            type(exc).__name__ if exc is not None else "error",
            status,
        )
        if request.writer.output_size > 0:
            # As aiohttp's own: a response has begun, another cannot follow.
            raise ConnectionError("Response is sent already, cannot send another response")
        error: ProxyError
        if status < 500:
            # The parser's message is not echoed either: it may hold a credential.
            error = InvalidRequest(
                "Malformed HTTP request: its request line, a header or its framing could not"
                " be parsed",
                code="invalid_http",
            )
        else:
            error = ProxyError("The proxy failed to handle the request")
        response = JsonReply(orjson.dumps(error_body(error)), status=status)
        response.force_close()  # what follows on this connection cannot be trusted either
        return response


class _Server(web.Server):
    """aiohttp's low-level server, making a ``_RequestHandler`` for each connection."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        *,
        handler_cancellation: bool,
        **settings: Any,
    ) -> None:
        super().__init__(handler, handler_cancellation=handler_cancellation, **settings)
        # Our own copy of the connections' settings: aiohttp keeps its copy in private
        # attributes, which a minor release may rename.
        self.connection_settings = settings

    def __call__(self) -> web.RequestHandler:
        # aiohttp's Server.__call__ (the protocol factory, called on the running loop), with
        # the handler above.
        return _RequestHandler(self, loop=asyncio.get_running_loop(), **self.connection_settings)


class ProxyRunner(web.ServerRunner):
    """The runner of the proxy's listener: aiohttp's low-level server calling
    ``gateway.handle``, with the server-side limits of its ``config.server``, and the gateway's
    lifetime (its upstream session opens on setup and closes once requests have drained)."""

    def __init__(self, gateway: Gateway) -> None:
        # The configuration it starts with: server settings change only with a restart.
        config = gateway.state.runtime.config
        server = _Server(
            gateway.handle,
            # A client that goes away cancels its handler, which closes the upstream request.
            handler_cancellation=True,
            access_log=None,  # ours is proxy.ops.access_log, one JSON line per API request
            # aiohttp closes a connection that has not sent a whole request (its headers) within
            # the keep-alive timeout, from the moment it opens: this bounds a slow client's
            # headers as read_timeout bounds its body, and idle keep-alive connections alike.
            keepalive_timeout=config.server.read_timeout,
        )
        super().__init__(server, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        self.gateway = gateway
        self.drain_seconds = config.server.drain_seconds

    async def setup(self) -> None:
        await self.gateway.start()
        try:
            await super().setup()
        except BaseException:
            await self.gateway.close()
            raise

    async def cleanup(self) -> None:
        """Stop listening, drain, close. The drain is the gateway's, within drain_seconds:
        aiohttp's own waits its shutdown timeout twice (for the handlers, then again once it
        has cancelled them), which a Kubernetes grace period computed from drain_seconds would
        cut short with SIGKILL, mid-drain and unmetered."""
        try:
            for site in list(self.sites):
                await site.stop()
            if self.server is not None:
                self.server.pre_shutdown()  # connections close once their request is answered
            await self.gateway.drain(self.drain_seconds)
            await super().cleanup()  # idle connections closed; nothing left in flight
        finally:
            await self.gateway.close()


async def serve_worker(
    listen: Listen,
    *,
    reuse_port: bool,
    ready: Callable[[], None] | None = None,
    metrics_dir: str | None = None,
    parent: int | None = None,
    state_socket: str | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain in-flight requests and stop.

    ``metrics_dir`` is the run's multiprocess directory when this is one of several workers,
    ``parent`` the pid of their supervisor (when it is gone, the worker stops too), and
    ``state_socket`` where the supervisor's state store listens (``state_service``).
    """
    loaded = _signature(listen.config_path)
    config = load_config(listen.config_path)
    exposition = Exposition(CollectorRegistry(), metrics_dir)
    # The worker's stderr, for its access log and its diagnostics alike: never waited for.
    outlet = Outlet(2)
    gateway = _worker_gateway(config, exposition, outlet, state_socket)
    state = gateway.state
    loop = asyncio.get_running_loop()
    async with AsyncExitStack() as stack:
        # Left after the observers' close (last in, first out), which hands it their last lines.
        stack.enter_context(_logging_to(outlet, loop))
        # Left last but for the logging (last in, first out): once the listeners are down, the
        # requests over and reported (the gateway's close), the observers write out what they
        # hold.
        stack.callback(_close_observers, state.observers)
        # Started first, so cleaned up last (last in, first out): scrapes keep working while
        # requests drain.
        await _serve_metrics(stack, config, exposition, reuse_port=reuse_port)
        await _serve_api(stack, gateway, listen, reuse_port=reuse_port)
        _settle_memory(stack, loop, config, state)
        if ready is not None:
            ready()
        stop, reload_pending = _handle_signals(loop, state, listen.config_path)
        if parent is not None:
            orphaned = asyncio.create_task(_orphaned(parent, stop))
            stack.callback(orphaned.cancel)
        if not reload_pending and _signature(listen.config_path) != loaded:
            # Changed while this worker started, and no SIGHUP says so (or one found no
            # handler, as a single worker ignores it until here): reload once.
            reload_config(state, listen.config_path)
        if listen.watch is not None:
            watcher = asyncio.create_task(_watch(state, listen.config_path, listen.watch))
            stack.callback(watcher.cancel)
        try:
            await stop.wait()
        finally:
            # Not ready from now on; the runner's cleanup (on leaving the stack) then closes the
            # listener and gives requests in flight up to drain_seconds to finish.
            state.ready = False
            loop.remove_signal_handler(signal.SIGHUP)
        delay = config.server.shutdown_delay  # server settings change only with a restart
        if delay:
            log.info("worker %d not ready; closing its listener in %g s", os.getpid(), delay)
            await asyncio.sleep(delay)
        log.info("worker %d draining (up to %g s)", os.getpid(), config.server.drain_seconds)


def _start_telemetry(otlp: Otlp, observers: Sequence[Observer]) -> Telemetry:
    """The worker's telemetry (the SDK is imported only now), its lost spans told to
    ``observers``. The supervisor checked its settings already (``telemetry_problems``)."""
    from proxy.ops.telemetry.setup import BatchSettingsError, start_telemetry

    try:
        return start_telemetry(
            otlp, asyncio.get_running_loop(), partial(_tell_spans_dropped, observers)
        )
    except BatchSettingsError as exc:
        raise SystemExit(f"telemetry: {exc}") from None


def _tell_spans_dropped(observers: Sequence[Observer], count: int) -> None:
    for observer in observers:
        observer.spans_dropped(count)


def _worker_gateway(
    config: Config, exposition: Exposition, outlet: Outlet, state_socket: str | None
) -> Gateway:
    """The worker's gateway, its observers on ``exposition``'s registry and ``outlet``, with
    /metrics among its routes unless the metrics have a port of their own."""
    metrics = config.metrics
    on_main = metrics.enabled and metrics.port is None
    observers = make_observers(config, exposition.registry, outlet)
    tracing = None
    if config.telemetry is not None:
        telemetry = _start_telemetry(config.telemetry, observers)
        observers.append(telemetry)
        tracing = telemetry.tracing
    gateway = Gateway(
        config,
        observers=observers,
        extra_routes=metrics_routes(exposition, metrics.token) if on_main else None,
        worker_socket=state_socket,
        tracing=tracing,
    )
    outlet.on_dropped = partial(_tell_dropped, gateway.state.observers)
    return gateway


async def _serve_metrics(
    stack: AsyncExitStack, config: Config, exposition: Exposition, *, reuse_port: bool
) -> None:
    """Listen for scrapes on the metrics port, if there is one, until ``stack`` is left. Every
    worker binds it, as it binds the main port."""
    metrics = config.metrics
    if not metrics.enabled or metrics.port is None:
        return
    runner = web.AppRunner(metrics_app(exposition, metrics.token), access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, metrics.host, metrics.port, reuse_port=reuse_port or None).start()
    log.info(
        "worker %d serving metrics on http://%s:%d/metrics", os.getpid(), metrics.host, metrics.port
    )


async def _serve_api(
    stack: AsyncExitStack, gateway: Gateway, listen: Listen, *, reuse_port: bool
) -> None:
    """Listen for API requests until ``stack`` is left, then drain them (``ProxyRunner``)."""
    runner = ProxyRunner(gateway)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(
        runner, listen.host, listen.port, reuse_port=reuse_port or None, backlog=2048
    )
    await site.start()
    log.info("worker %d listening on http://%s:%d", os.getpid(), listen.host, listen.port)


def _settle_memory(
    stack: AsyncExitStack, loop: asyncio.AbstractEventLoop, config: Config, state: State
) -> None:
    """Freeze what the worker has loaded, and collect cycles on the worker's own schedule
    (``server.gc_interval``) until ``stack`` is left."""
    # What is loaded by now (modules, configuration, the app) lives as long as the process:
    # frozen, a full collection no longer walks it, and pauses about half as long.
    gc.collect()
    gc.freeze()
    if config.server.gc_interval:
        collector = Collector(
            loop, config.server.gc_interval, observe=partial(_tell_collected, state)
        )
        collector.start()
        # Left before the drain: CPython's own schedule is as good for the last requests.
        stack.callback(collector.close)


def _handle_signals(
    loop: asyncio.AbstractEventLoop, state: State, path: Path
) -> tuple[asyncio.Event, bool]:
    """SIGTERM and SIGINT set the event returned, SIGHUP reloads ``path``; and whether a SIGHUP
    came while the worker started."""
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload_config, state, path)
    # Blocked by the supervisor from before this process began (its default action ends
    # a process): a SIGHUP sent meanwhile is pending, and reloads once unblocked.
    pending = signal.SIGHUP in signal.sigpending()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    return stop, pending


async def _orphaned(parent: int, stop: asyncio.Event) -> None:
    """Stop (drain, then exit) once the supervisor is gone (``kill -9``): its workers would
    otherwise serve on with the configuration they have, beside a new server's."""
    while True:  # polled: portable, and one getppid a second costs nothing
        await asyncio.sleep(PARENT_CHECK)
        if os.getppid() != parent:
            break
    log.warning("worker %d: its supervisor %d is gone; stopping", os.getpid(), parent)
    stop.set()


def _tell_collected(state: State, full: bool, seconds: float) -> None:
    for observer in state.observers:
        observer.collected(full, seconds)


def _tell_dropped(observers: Sequence[Observer], count: int) -> None:
    for observer in observers:
        observer.lines_dropped(count)


@contextlib.contextmanager
def _logging_to(outlet: Outlet, loop: asyncio.AbstractEventLoop | None) -> Iterator[None]:
    """The process's diagnostics through ``outlet`` while the worker (on ``loop``) or the
    supervisor (no loop) runs; the handlers it had before, and ``outlet`` closed (its last lines
    written, for a while), after."""
    root = logging.getLogger()
    before = root.handlers[:]
    handler = OutletHandler(outlet, loop)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.handlers[:] = [handler]
    try:
        yield
    finally:
        root.handlers[:] = before
        outlet.close()


def _close_observers(observers: Sequence[Observer]) -> None:
    # Every request has been reported by now (ProxyRunner.cleanup closed the gateway).
    for observer in observers:
        observer.close()


# Settings that belong to the listener or the process: a reload cannot change them.
_RESTART_ONLY = ("server", "metrics", "access_log", "state")
# What aiohttp's shutdown waits for requests after the gateway's drain: none is left by then.
_SHUTDOWN_TIMEOUT: Final = 1.0
# How often a worker checks that its supervisor is still there (``_orphaned``).
PARENT_CHECK: Final = 1.0


def _cache_backend(config: Config) -> str | None:
    # The cache's store is made at start (docs/cache.md); its other settings apply on reload.
    return None if config.cache is None else config.cache.backend


def reload_config(state: State, path: Path) -> bool:
    """Load ``path`` and, if it is valid, serve every request from now on with it.

    Requests in flight finish with the configuration they started with. An invalid file is
    refused, its problems logged; the configuration in force stays.
    """
    try:
        config = load_config(path)
        if problems := cloud_problems(config):
            raise ConfigError(problems)
    except ConfigError as error:
        log.error("reload of %s refused, the configuration in force stays:", path)
        for problem in error.problems:
            log.error("  %s", problem)
        ok = False
    else:
        previous = state.runtime.config
        stale = [name for name in _RESTART_ONLY if getattr(config, name) != getattr(previous, name)]
        if _cache_backend(config) != _cache_backend(previous):
            stale.append("cache.backend (and whether there is a cache)")
        if stale:
            log.warning("reload: %s change only with a restart", ", ".join(stale))
        before = state.runtime
        state.runtime = Runtime.from_config(config, previous=before)
        _warm_new_signers(state, before)
        log.info("worker %d reloaded %s", os.getpid(), path)
        ok = True
    for observer in state.observers:
        observer.reloaded(ok)
    return ok


def _warm_new_signers(state: State, before: Runtime) -> None:
    """Read the identities a reload added, in threads, as a worker's start does: parsing a
    service account's key at a request's time would stall the loop."""
    kept = {id(target.signer) for target in before.targets.values()}
    new = [t.signer for t in state.runtime.targets.values() if id(t.signer) not in kept]
    if any(signer is not None for signer in new):
        state.warming = asyncio.get_running_loop().create_task(warm(new))


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        # stat follows links: a Kubernetes ConfigMap volume swaps a symlink to publish a change.
        info = path.stat()
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_ino, info.st_size)


async def _watch(state: State, path: Path, every: float) -> None:
    """Reload when the file changes (``serve --watch``): polled, which works on every
    filesystem and volume kind, at the cost of one stat per period."""
    seen = _signature(path)
    while True:
        await asyncio.sleep(every)
        current = _signature(path)
        if current is not None and current != seen:
            seen = current
            reload_config(state, path)


def _worker_main(
    listen: Listen, metrics_dir: str, parent: int, state_socket: str | None = None
) -> None:
    # Until serve_worker installs its handler, a reload signal must not end the worker (its
    # default action): blocked from the start (the supervisor's mask), and ignored from here;
    # serve_worker then reloads if the file changed meanwhile.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    logging.getLogger().setLevel(logging.INFO)
    # Until serve_worker's outlet takes over, and after it: an outlet that never waits for long,
    # as the supervisor's. Blocked in write(2) on a stderr nobody reads, a worker that cannot
    # start would not exit until someone read it, and the supervisor, which starts a worker
    # once the last one has exited, would start none in its place meanwhile.
    with _logging_to(Outlet(2, patient=False), None):
        try:
            with contextlib.suppress(KeyboardInterrupt):
                run(
                    lambda: serve_worker(
                        listen,
                        reuse_port=True,
                        metrics_dir=metrics_dir,
                        parent=parent,
                        state_socket=state_socket,
                    )
                )
        except ConfigError as exc:
            # A worker started after the file was broken (the others serve on with what they
            # read): one clear line, not a traceback, and the supervisor waits longer each time.
            log.error("worker %d cannot start: %s: %s", os.getpid(), listen.config_path, exc)
            raise SystemExit(2) from None


def serve(listen: Listen) -> int:
    """Serve with ``listen.workers`` workers; returns the exit status."""
    if listen.workers == 1:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until serve_worker's handler is in place
        with contextlib.suppress(KeyboardInterrupt):
            run(lambda: serve_worker(listen, reuse_port=False))
        return 0
    return _supervise(listen)


def _supervise(listen: Listen) -> int:
    # spawn, not fork: a worker must not inherit the parent's state (or a prometheus registry).
    context = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        try:
            # A fresh directory per run: counters start at zero and no file of an earlier run is
            # merged.
            metrics_dir = _run_directory()
            stack.callback(shutil.rmtree, metrics_dir, ignore_errors=True)
            # The workers' shared limits when there is no Redis: served by this process for as
            # long as the run lasts, whichever worker dies and starts again.
            service = StateService()
        except OSError as exc:
            # A read-only root without a tmpfs at /tmp (docker run --read-only): one clear line.
            log.error(_NO_TEMPORARY_DIRECTORY, listen.workers, exc)
            return 2
        stack.callback(service.stop)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        # Its lines (a worker died) through an outlet that never waits: waiting on a stderr nobody
        # reads, the supervisor started no worker in place of a dead one (it says so first), and
        # did not exit on SIGTERM (tests/ops/test_outlet.py).
        with _logging_to(Outlet(2, patient=False), None):
            service.start()
            return _run_workers(listen, context, metrics_dir, service.path)


_NO_TEMPORARY_DIRECTORY: Final = (
    "cannot serve with %d workers: they need a writable temporary directory, for their shared"
    " metrics files and state socket (%s). Point TMPDIR at a writable directory, or mount one at"
    " /tmp (docker run --tmpfs /tmp; in Kubernetes, an emptyDir volume), or serve with --workers 1."
)


def _run_directory() -> str:
    """A fresh directory for the run's metrics files, in $TMPDIR when it is set: there or not at
    all (tempfile would quietly take /tmp in place of a TMPDIR that does not work), else in the
    first usable one of /tmp, /var/tmp and /usr/tmp."""
    return tempfile.mkdtemp(prefix="llm-proxy-metrics-", dir=os.environ.get("TMPDIR") or None)


# A worker that dies within STABLE_SECONDS of its start is started again after a delay, doubled
# each time it happens again, up to RESTART_DELAY_MAX; one that ran longer, at once. Restarted
# every 0.2 s, a worker that could not start (its packages broken, its configuration file broken
# since the others read it) took the supervisor and the kernel most of a core for as long as
# nobody noticed.
STABLE_SECONDS: Final = 10.0
RESTART_DELAY_MIN: Final = 0.5
RESTART_DELAY_MAX: Final = 30.0


@dataclass(slots=True)
class Restarts:
    """One worker slot's restarts: how long to wait before starting it again (pure)."""

    delay: float = 0.0

    def after(self, lived: float) -> float:
        """The wait before starting again a worker that died after ``lived`` seconds."""
        if lived >= STABLE_SECONDS:
            self.delay = 0.0
        else:
            self.delay = min(max(2 * self.delay, RESTART_DELAY_MIN), RESTART_DELAY_MAX)
        return self.delay


@dataclass(slots=True)
class _Slot:
    process: multiprocessing.process.BaseProcess | None
    started: float
    restarts: Restarts
    start_at: float = 0.0  # when a process is None: when to start one


class _Workers:
    """The supervisor's worker processes, one per slot: started, told of signals, started again
    when they die (``Restarts``), and waited for at the end."""

    __slots__ = ("context", "listen", "metrics_dir", "slots", "state_socket", "stopping", "told")

    def __init__(
        self,
        listen: Listen,
        context: multiprocessing.context.SpawnContext,
        metrics_dir: str,
        state_socket: str | None,
    ) -> None:
        self.listen = listen
        self.context = context
        self.metrics_dir = metrics_dir
        self.state_socket = state_socket
        self.slots: list[_Slot] = []
        self.stopping = False
        self.told: set[int] = set()  # the workers sent SIGTERM

    def start(self) -> multiprocessing.process.BaseProcess:
        process = self.context.Process(
            target=_worker_main,
            args=(self.listen, self.metrics_dir, os.getpid(), self.state_socket),
            daemon=False,
        )
        # The new process starts with SIGHUP blocked (the mask is inherited) until its handler
        # is in place: a reload sent while it starts must not end it.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return process

    def signal(self, signum: int, skip: Container[int] = ()) -> None:
        for slot in self.slots:
            process = slot.process
            if (
                process is not None
                and process.pid is not None
                and process.pid not in skip
                and process.is_alive()
            ):
                os.kill(process.pid, signum)
                if signum == signal.SIGTERM:
                    self.told.add(process.pid)

    def on_stop(self, signum: int, frame: object) -> None:
        self.stopping = True
        self.signal(signal.SIGTERM)

    def on_reload(self, signum: int, frame: object) -> None:
        self.signal(signal.SIGHUP)

    def tend(self, slot: _Slot, now: float) -> None:
        """Start the slot's worker if its delay is over, or, if it died, again (or later)."""
        process = slot.process
        if process is None:  # waiting out its delay
            if now >= slot.start_at:
                slot.process, slot.started = self.start(), now
            return
        if process.is_alive():
            return
        lived = now - slot.started
        delay = slot.restarts.after(lived)
        log.warning(
            "worker %s exited with %s; starting a new one%s",
            process.pid,
            process.exitcode,
            f" in {delay:g} s (it ran {lived:.1f} s)" if delay else "",
        )
        # Its requests are no longer in flight; its counter files stay, so totals never go
        # backwards.
        if process.pid is not None:
            mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        if delay:
            slot.process, slot.start_at = None, now + delay
        else:
            slot.process, slot.started = self.start(), now

    def join(self) -> int:
        """Wait for every worker to exit; 1 if one exited other than by SIGTERM, else 0."""
        status = 0
        for slot in self.slots:
            if slot.process is None:
                continue
            slot.process.join()
            if slot.process.exitcode not in (0, -signal.SIGTERM):
                status = 1
        return status


def _run_workers(
    listen: Listen,
    context: multiprocessing.context.SpawnContext,
    metrics_dir: str,
    state_socket: str | None = None,
) -> int:
    workers = _Workers(listen, context, metrics_dir, state_socket)
    signal.signal(signal.SIGTERM, workers.on_stop)
    signal.signal(signal.SIGINT, workers.on_stop)
    signal.signal(signal.SIGHUP, workers.on_reload)
    slots = workers.slots
    slots.extend(
        _Slot(workers.start(), time.monotonic(), Restarts()) for _ in range(listen.workers)
    )
    while not workers.stopping:
        time.sleep(0.2)
        for slot in slots:
            if workers.stopping:
                break
            workers.tend(slot, time.monotonic())
    # A SIGTERM that came while a worker was being started found its slot still holding the dead
    # one: the new worker was not told, and the join below would wait for it for good (seen in
    # tests/ops/test_outlet.py under load). Only those not told: a second SIGTERM could end a worker
    # in its last writes.
    workers.signal(signal.SIGTERM, skip=workers.told)
    return workers.join()
