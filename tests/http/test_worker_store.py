"""The supervisor's store as a worker reaches it: ``WorkerStore`` against a real
``StateService`` (its thread and Unix socket), and against servers that answer byte by byte,
never, or wrongly. Every failure is ``StoreUnavailable``, within the store's timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from proxy.core.limits.admission import Budget, Limits, Reservation, reserve, settle
from proxy.core.limits.ledger import entry
from proxy.core.limits.tally import Tally
from proxy.core.usage import Usage
from proxy.http.limits.stores import StoreUnavailable, WorkerStore
from proxy.ops.limits.state_service import StateService

LIMITS = Limits(requests_per_minute=2, concurrency=5, budget=Budget("tokens", 10_000, "day"))


def ask(limits: Limits = LIMITS, lease: str = "l") -> Reservation:
    return reserve("t", limits, prompt_tokens=10, max_tokens=90, price=None, lease_id=lease,
                   lease_seconds=30, now=time.time())  # fmt: skip


@pytest.fixture
def service() -> object:
    started = StateService()
    started.start()
    yield started
    started.stop()


def test_reservations_settlements_and_reads_go_through_the_service(service: StateService) -> None:
    async def run() -> None:
        store = WorkerStore(service.path, 0.5)
        try:
            first, second, third = ask(lease="a"), ask(lease="b"), ask(lease="c")
            decisions = [await store.reserve(r, time.time()) for r in (first, second, third)]
            assert [d.admitted for d in decisions] == [True, True, False]
            assert decisions[2].code == "requests_per_minute"
            assert [d.in_flight for d in decisions] == [0, 1, 2]
            now = time.time()
            line = entry("t", "m", Usage(10, 5, 15), None, now)
            settled = settle(first, Usage(10, 5, 15), None, now)
            await store.settle_many(Tally.of([("t", settled, line)]))
            assert first.lease is not None
            keys = [c.key for c in first.charges]
            snapshot = await store.read(keys, [first.lease.key], list(line.keys), time.time())
            # Two requests, their tokens (one settled at 15 of its 100), and one lease left.
            assert snapshot.values == (2, 115)
            assert snapshot.in_flight == (1,)
            assert snapshot.hashes[0]["m|requests"] == 1
        finally:
            await store.close()

    asyncio.run(run())


def test_reservations_made_together_are_one_message_admitted_in_turn(
    service: StateService,
) -> None:
    # What a worker's reservations made ahead are (proxy.core.limits.prefetch): one message, a run
    # admitted in turn up to the first refused, answered with the counters the first saw.
    async def run() -> tuple[int, bool, tuple[int, ...], int, int]:
        store = WorkerStore(service.path, 0.5)
        try:
            first = ask(lease="m0")
            assert first.lease is not None
            alike = [first._replace(lease=first.lease._replace(member=f"m{i}")) for i in range(3)]
            count, decision = await store.reserve_run(alike, time.time())
            snapshot = await store.read([], [first.lease.key], [], time.time())
            return (
                count,
                decision.admitted,
                decision.used,
                decision.in_flight,
                snapshot.in_flight[0],
            )
        finally:
            await store.close()

    assert asyncio.run(run()) == (2, True, (0, 0), 0, 2)


def test_a_new_concurrency_limit_is_the_one_enforced(service: StateService) -> None:
    """A reloaded configuration's limits, though the team has no counter to change."""

    async def run() -> list[bool]:
        store = WorkerStore(service.path, 0.5)
        admitted = []
        try:
            for limits in (Limits(concurrency=1), Limits(concurrency=3)):
                for lease in "ab":
                    r = ask(limits, lease=f"{limits.concurrency}{lease}")
                    admitted.append((await store.reserve(r, time.time())).admitted)
        finally:
            await store.close()
        return admitted

    assert asyncio.run(run()) == [True, False, True, True]


def test_a_malformed_line_is_answered_with_an_error(service: StateService) -> None:
    async def run() -> list[object]:
        reader, writer = await asyncio.open_unix_connection(service.path)
        writer.write(b'["nothing"]\n{not json\n["reserve",["k"]]\n')
        replies = [orjson.loads(await reader.readline()) for _ in range(3)]
        writer.close()
        await writer.wait_closed()
        return replies

    replies = asyncio.run(run())
    assert all(set(reply) == {"error"} for reply in replies)  # type: ignore[arg-type]


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def served(
    tmp_path: Path, handler: Handler, call: Callable[[WorkerStore], Awaitable[object]]
) -> object:
    """``call`` on a store whose supervisor is ``handler``."""

    async def run() -> object:
        path = str(tmp_path / "state.sock")
        server = await asyncio.start_unix_server(handler, path)
        store = WorkerStore(path, 0.3)
        try:
            return await call(store)
        finally:
            await store.close()
            server.close()
            await server.wait_closed()
            await asyncio.sleep(0.05)  # the handler sees the store's end and closes its side

    return asyncio.run(run())


def test_a_reply_that_comes_byte_by_byte_is_read_whole(tmp_path: Path) -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        for byte in b'{"ok":[1,0,7,0,3]}\n':
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.001)
        await reader.read()  # until the store closes
        writer.close()

    async def call(store: WorkerStore) -> object:
        return await store.reserve(ask(), time.time())

    decision = served(tmp_path, slow, call)
    assert decision == (True, (0, 7, 0), 3, None, 0, "")


@pytest.mark.parametrize(
    "answer", [None, b"nonsense\n", b'{"error":"broken"}\n', b'{"ok":"yes"}\n', b'{"ok":[1,"0"]}\n']
)
def test_a_supervisor_that_fails_is_unavailable_in_time(
    tmp_path: Path, answer: bytes | None
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        if answer is not None:
            writer.write(answer)
        await reader.read()  # until the store closes
        writer.close()

    async def call(store: WorkerStore) -> object:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as failed:
            await store.reserve(ask(), time.time())
        return failed.value.sent, time.monotonic() - started

    sent, took = served(tmp_path, handler, call)  # type: ignore[misc]
    # Unanswered, answered with no reply, or with an error (its batch's other messages were
    # applied): not to be sent again.
    assert sent is (answer in (None, b"nonsense\n", b'{"error":"broken"}\n'))
    assert took < 0.3 + 0.2
