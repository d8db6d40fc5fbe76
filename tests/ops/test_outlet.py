"""The worker's stderr (``proxy.ops.outlet``): lines in order and whole, and a reader that stalls
never stalls the event loop: what it cannot take waits, then is dropped and counted."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from proxy.ops.outlet import RETRY, Outlet, OutletHandler
from tests.support.metrics import (
    ALPHA_KEY,
    CLI,
    ROOT,
    Stage,
    free_port,
    stage,
    wait_for,
    write_config,
)


def _line(i: int, size: int = 100) -> bytes:
    head = b"line %06d " % i
    return head + b"x" * (size - len(head) - 1) + b"\n"


def _read_all(fd: int) -> bytes:
    """What the pipe holds now (its writing end may still be open)."""
    out = bytearray()
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        out.extend(chunk)
    return bytes(out)


def _in_a_thread(work: Callable[[], object], seconds: float = 20, what: str = "the write") -> None:
    """Run ``work`` in a thread; fail (rather than hang) if it blocks, and with what it raised."""
    failure: list[BaseException] = []

    def main() -> None:
        try:
            work()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{what} blocked"
    if failure:
        raise failure[0]


def _in_a_loop_of_its_own(work: Callable[[], object], seconds: float = 20) -> None:
    """Run ``work`` on an event loop in a thread; fail (rather than hang) if it blocks."""

    async def run() -> None:
        work()

    _in_a_thread(lambda: asyncio.run(run()), seconds, "the write, and the event loop with it,")


async def test_a_pipe_nobody_reads_never_blocks_the_loop_and_what_it_drops_is_counted() -> None:
    read_end, write_end = os.pipe()
    dropped: list[int] = []
    outlet = Outlet(write_end, backlog=64 * 1024, on_dropped=dropped.append)
    try:
        # 1 MB of lines: about eight times what the pipe (64 KiB) and the backlog hold together.
        lines = [_line(i) for i in range(10_000)]
        _in_a_loop_of_its_own(
            lambda: [outlet.write(lines[i : i + 50]) for i in range(0, 10_000, 50)]
        )
        assert 0 < outlet.backlog <= 64 * 1024
        outlet.write([])  # this test's loop takes over from the one that is gone
        # The reader comes back: the loop's timer writes the backlog as the pipe empties.
        received = bytearray()
        deadline = time.monotonic() + 20
        while outlet.backlog and time.monotonic() < deadline:
            received += _read_all(read_end)
            await asyncio.sleep(RETRY)
        assert outlet.backlog == 0
        outlet.write([b"after\n"])
        received += _read_all(read_end)
    finally:
        os.close(read_end)  # first: a write that would block fails now (EPIPE) instead
        outlet.close()
        os.close(write_end)
    got = bytes(received).splitlines(keepends=True)
    kept = [line for line in got if line.startswith(b"line ")]
    # Whole lines, the oldest kept, in order; every line either received or counted dropped.
    assert kept == lines[: len(kept)]
    assert len(kept) + sum(dropped) == len(lines)
    # Where the hole is, one line says how big it is.
    assert got[len(kept) :] == [
        b"proxy: %d log lines dropped: stderr was not being read\n" % sum(dropped),
        b"after\n",
    ]


def test_without_a_loop_a_full_non_blocking_socket_loses_no_line() -> None:
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with reader, writer:
        writer.setblocking(False)  # as some supervisors make stderr
        writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        outlet = Outlet(writer.fileno())
        received = bytearray()

        def drain() -> None:  # a slow reader: the outlet finds the buffer full many times
            while chunk := reader.recv(1024):
                received.extend(chunk)
                time.sleep(0.001)

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        for i in range(200):
            outlet.write([_line(i)])  # no loop: each written at once, waiting if need be
        outlet.close()
        writer.shutdown(socket.SHUT_WR)  # the reader's end of input
        thread.join(10)
    assert bytes(received) == b"".join(_line(i) for i in range(200))


def test_an_impatient_outlet_leaves_what_a_full_pipe_cannot_take_to_its_next_write() -> None:
    """Without a loop, as the supervisor writes: a full pipe keeps its lines in the backlog,
    in order, rather than waiting; a later write sends them once the reader is back."""
    read_end, write_end = os.pipe()
    try:
        outlet = Outlet(write_end, patient=False)
        lines = [_line(i) for i in range(2_000)]  # 200 KB: three times a pipe's 64 KiB
        _in_a_thread(lambda: outlet.write(lines))
        assert outlet.backlog > 0
        received = bytearray(_read_all(read_end))
        for _ in range(100):  # each write sends what the pipe has room for now
            outlet.write([])
            received.extend(_read_all(read_end))
            if not outlet.backlog:
                break
        assert outlet.backlog == 0
        _in_a_thread(outlet.close)
        received.extend(_read_all(read_end))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert bytes(received) == b"".join(lines)


async def test_lines_stay_whole_and_in_order_through_partial_writes() -> None:
    # A stream socket takes what fits, often part of a write: the rest of a line goes next.
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    lines = [_line(i, size=50 + (i * 397) % 6000) for i in range(40)]  # some > PIPE_BUF
    received = bytearray()
    written = threading.Event()

    def drain() -> None:
        written.wait(10)  # a reader that is late: the socket's buffer fills first
        while chunk := reader.recv(1 << 16):
            received.extend(chunk)

    with reader, writer:
        writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # parts of a line
        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        outlet = Outlet(writer.fileno())
        for i in range(0, 40, 7):
            outlet.write(lines[i : i + 7])
        assert outlet.backlog > 0
        written.set()
        await _until(lambda: outlet.backlog == 0)  # the loop's timer writes the rest
        outlet.close()
        writer.shutdown(socket.SHUT_WR)
        thread.join(10)
    assert bytes(received) == b"".join(lines)


async def _until(predicate: Callable[[], bool], seconds: float = 20) -> None:
    for _ in range(int(seconds / RETRY)):
        if predicate():
            return
        await asyncio.sleep(RETRY)
    raise AssertionError("timed out")


def test_close_waits_a_while_for_a_stalled_reader_then_counts_what_is_left() -> None:
    read_end, write_end = os.pipe()
    dropped: list[int] = []
    outlet = Outlet(write_end, on_dropped=dropped.append)
    lines = [_line(i) for i in range(2_000)]  # 200 kB: the pipe takes 64
    try:
        _in_a_loop_of_its_own(lambda: outlet.write(lines))
        assert dropped == []  # all of it fits in the backlog
        started = time.monotonic()
        outlet.close(wait=0.2)
        waited = time.monotonic() - started
        received = _read_all(read_end)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert waited >= 0.2
    got = received.splitlines(keepends=True)
    assert got == lines[: len(got)]
    assert len(got) + sum(dropped) == len(lines) and sum(dropped) > 0


async def test_a_reader_gone_or_a_closed_descriptor_fails_nothing() -> None:
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    reader.close()  # the reading end gone: EPIPE
    with writer:
        outlet = Outlet(writer.fileno())
        outlet.write([b"lost\n"])
        outlet.close()
    outlet = Outlet(-1)  # EBADF
    outlet.write([b"lost\n"])
    outlet.close()
    outlet.write([b"after close: ignored\n"])


def test_the_shared_pipe_descriptor_stays_blocking() -> None:
    # O_NONBLOCK belongs to an open file, which a worker shares with its parent and siblings:
    # the outlet writes through one of its own, so theirs stays as it was.
    read_end, write_end = os.pipe()
    try:
        outlet = Outlet(write_end)
        outlet.write([b"one\n"])
        assert os.get_blocking(write_end)
        outlet.close()
        assert os.read(read_end, 100) == b"one\n"
    finally:
        os.close(write_end)
        os.close(read_end)


async def test_messages_logged_from_another_thread_go_out_through_the_loop() -> None:
    read_end, write_end = os.pipe()
    outlet = Outlet(write_end)
    handler = OutletHandler(outlet, asyncio.get_running_loop())
    log = logging.getLogger("tests.outlet")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("from the loop")
        thread = threading.Thread(target=log.warning, args=("from a thread",))
        thread.start()
        thread.join(10)
        assert _read_all(read_end) == b"from the loop\n"  # the thread's waits for the loop
        await asyncio.sleep(0)
        assert _read_all(read_end) == b"from a thread\n"
    finally:
        log.removeHandler(handler)
        log.propagate = True
        outlet.close()
        os.close(write_end)
        os.close(read_end)


@pytest.fixture(scope="module")
def running() -> Iterator[Stage]:
    with stage() as built:
        yield built


def test_a_worker_whose_stderr_nobody_reads_keeps_answering(running: Stage, tmp_path: Path) -> None:
    # Before the outlet, the worker's loop waited in write(2) once the pipe was full: in a lab
    # with the demo's configuration, nothing was answered any more after 118 requests.
    models = {"llama": {"provider": "emu", "model": "friendli"}}
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, models, access_log=True)
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [*CLI, "serve", "--config", str(config), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,  # read by nobody until the requests are over
    )
    requests = 1_000
    try:
        wait_for(lambda: _status(port, "GET", "/readyz") == 200, "the proxy to be ready")
        body = orjson.dumps({"model": "llama", "messages": [{"role": "user", "content": "hi"}]})
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(requests):
            connection.request("POST", "/v1/chat/completions", body, _HEADERS)
            response = connection.getresponse()
            response.read()
            assert response.status == 200
        connection.close()
        assert _status(port, "GET", "/healthz") == 200
        # Now read: every line was kept for the reader (none dropped), in its backlog.
        assert process.stderr is not None
        stderr = process.stderr.fileno()
        received = bytearray()

        def every_line() -> bool:
            received.extend(_read_all(stderr))
            return received.count(b'"request_id"') >= requests

        wait_for(every_line, "every access line")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
            if process.stderr is not None:
                process.stderr.close()
    assert b"log lines dropped" not in received


_HEADERS = {"Authorization": f"Bearer {ALPHA_KEY}", "Content-Type": "application/json"}


def _status(port: int, method: str, path: str) -> int:
    """The status of a request; 0 if the proxy does not listen yet."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request(method, path, headers=_HEADERS)
        response = connection.getresponse()
        response.read()
        return response.status
    except ConnectionRefusedError:
        return 0
    finally:
        connection.close()


def _workers(supervisor: int) -> list[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    try:
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    except FileNotFoundError:
        return []
    workers = []
    for child in children:
        with contextlib.suppress(FileNotFoundError):
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(int(child))
    return workers


@contextlib.contextmanager
def _supervisor(config: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``serve --workers 2`` with a stderr read by nobody until the test reads it; stopped (and
    its workers with it, should it be stuck) at the end."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [*CLI, "serve", "--config", str(config), "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr = process.stderr.fileno()
    said = bytearray()

    def both_listen() -> bool:
        said.extend(_read_all(stderr))
        return said.count(b" listening on ") == 2

    try:
        # Both have read the file and listen (a file broken before a worker had read it would
        # fail that worker too).
        wait_for(both_listen, "both workers to listen")
        assert len(_workers(process.pid)) == 2
        yield process
    finally:
        if process.poll() is None:  # stuck: its workers would outlive it
            for worker in _workers(process.pid):
                os.kill(worker, signal.SIGKILL)
            process.kill()
            process.wait(10)
        assert process.stderr is not None
        process.stderr.close()


def _fill_stderr(process: subprocess.Popen[bytes]) -> None:
    """Fill the pipe that is the supervisor's (and its workers') stderr to its last byte: no
    line fits any more."""
    filler = os.open(f"/proc/{process.pid}/fd/2", os.O_WRONLY | os.O_NONBLOCK)
    try:
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(filler, b"." * 4096)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(filler, b".")
    finally:
        os.close(filler)


def _stop_and_read(process: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM, and everything the stderr pipe brings meanwhile, until its writers are gone."""
    assert process.stderr is not None
    stderr = process.stderr.fileno()
    received = bytearray()
    reader = threading.Thread(target=lambda: received.extend(_read_to_end(stderr)))
    reader.start()
    process.send_signal(signal.SIGTERM)
    process.wait(20)
    reader.join(20)
    return bytes(received)


def test_a_supervisor_whose_stderr_nobody_reads_replaces_a_dead_worker_and_stops(
    running: Stage, tmp_path: Path
) -> None:
    """Blocked in write(2) on a full stderr, the supervisor would start no worker in place of a
    dead one (it logs the death first), and on SIGTERM would stop its workers but never exit."""
    models = {"llama": {"provider": "emu", "model": "friendli"}}
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, models)
    with _supervisor(config, free_port()) as process:
        _fill_stderr(process)
        dead = _workers(process.pid)[0]
        os.kill(dead, signal.SIGKILL)
        wait_for(
            lambda: dead not in (alive := _workers(process.pid)) and len(alive) == 2,
            "a new worker in place of the dead one",
        )
        # The reader comes back: what the supervisor said meanwhile waited for it.
        received = _stop_and_read(process)
    assert b"worker %d exited with -9; starting a new one" % dead in received


def test_a_worker_that_cannot_start_exits_though_its_stderr_is_full(
    running: Stage, tmp_path: Path
) -> None:
    """A worker that cannot start (its file broken since the others read it) says so and exits,
    for the supervisor to try again later. Before its own outlet it wrote to stderr blocking:
    with the pipe full it waited in write(2) until the pipe was read, and no worker took its
    place meanwhile, even once the file was mended."""
    models = {"llama": {"provider": "emu", "model": "friendli"}}
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, models)
    good = config.read_text()
    port = free_port()
    with _supervisor(config, port) as process:
        first = _workers(process.pid)
        _fill_stderr(process)
        config.write_text("providers: [not, a, mapping]\n")
        os.kill(first[0], signal.SIGKILL)
        started: set[int] = set()

        def one_came_and_went() -> bool:
            alive = set(_workers(process.pid))
            started.update(alive - set(first))
            return any(pid not in alive for pid in started)

        # It waits up to CLOSE_WAIT (2 s) for a reader, then exits.
        wait_for(one_came_and_went, "a worker that cannot start to exit", seconds=30)
        config.write_text(good)
        # The reader comes back, and the next worker, started from the mended file, says it
        # listens.
        assert process.stderr is not None
        stderr = process.stderr.fileno()
        said = bytearray()

        def one_listens() -> bool:
            said.extend(_read_all(stderr))
            return b" listening on " in said

        wait_for(one_listens, "a worker started from the mended file to listen", seconds=30)
        assert len(_workers(process.pid)) == 2
        said.extend(_stop_and_read(process))
    assert b"exited with 2; starting a new one in" in said, said[-2000:]


def _read_to_end(fd: int) -> bytes:
    """Everything the pipe brings until its last writer closes it."""
    out = bytearray()
    while chunk := os.read(fd, 1 << 16):
        out.extend(chunk)
    return bytes(out)
