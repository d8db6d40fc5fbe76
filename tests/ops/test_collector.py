"""The cycle collector on a loop timer (proxy.ops.collector): its schedule as a table, then a real
loop collecting real cycles, young and old."""

from __future__ import annotations

import asyncio
import gc
import os
import weakref
from collections.abc import Iterator

import pytest

from proxy.ops.collector import Collector, Schedule, peak_rss

# (seconds since the last full collection, peak memory against the one after it) -> in full?
SCHEDULE = [
    (0.0, 1000, False),
    (59.9, 1000, False),
    (60.0, 1000, True),  # time is up
    (61.0, 900, True),
    (1.0, 1100, False),  # grown by a tenth exactly: not yet
    (1.0, 1101, True),  # grown by more
    (0.1, 5000, True),
]


@pytest.mark.parametrize(("elapsed", "peak", "full"), SCHEDULE)
def test_schedule(elapsed: float, peak: int, full: bool) -> None:
    schedule = Schedule(100.0, 1000, full_every=60.0, growth=0.1)
    assert schedule.full(100.0 + elapsed, peak) is full


def test_schedule_counts_from_the_last_full_collection() -> None:
    schedule = Schedule(0.0, 1000, full_every=60.0, growth=0.1)
    assert schedule.full(70.0, 1000)
    schedule.collected_full(70.0, 2000)
    assert not schedule.full(129.0, 2200)
    assert schedule.full(129.0, 2201)
    assert schedule.full(130.0, 2000)


class Node:
    """A cycle: it refers to itself, so only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def watched(node: Node) -> tuple[weakref.ref[Node], asyncio.Event]:
    freed = asyncio.Event()
    return weakref.ref(node, lambda _: freed.set()), freed


@pytest.fixture
def automatic() -> Iterator[None]:
    # Each test starts with CPython's collector on, as a process has it, and leaves it so.
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


class Pauses:
    """What a collector reports; ``seen`` is set once ``wanted`` pauses of the kind came."""

    def __init__(self, full: bool, wanted: int = 1) -> None:
        self.full = full
        self.wanted = wanted
        self.seconds: list[float] = []
        self.others = 0
        self.seen = asyncio.Event()

    def __call__(self, full: bool, seconds: float) -> None:
        if full != self.full:
            self.others += 1
            return
        self.seconds.append(seconds)
        if len(self.seconds) >= self.wanted:
            self.seen.set()


@pytest.mark.usefixtures("automatic")
async def test_ticks_free_young_cycles_and_report_each_pause() -> None:
    pauses = Pauses(full=False, wanted=3)
    collector = Collector(asyncio.get_running_loop(), 0.02, observe=pauses)
    collector.start()
    try:
        assert not gc.isenabled()  # CPython's own schedule is off while the timer runs
        young, freed = watched(Node())
        async with asyncio.timeout(5):
            await freed.wait()
            await pauses.seen.wait()
        assert young() is None
        assert pauses.others == 0 and all(0 <= seconds < 1 for seconds in pauses.seconds)
    finally:
        collector.close()
    assert gc.isenabled()
    counted = len(pauses.seconds)
    await asyncio.sleep(0.1)
    assert len(pauses.seconds) == counted  # closed: no tick after


@pytest.mark.usefixtures("automatic")
async def test_without_ticks_a_cycle_would_stay() -> None:
    # The test above proves the ticks, not the collector being off: here no tick runs.
    collector = Collector(asyncio.get_running_loop(), 10.0)
    collector.start()
    try:
        young, _ = watched(Node())
        await asyncio.sleep(0.1)
        assert young() is not None
    finally:
        collector.close()
    gc.collect()
    assert young() is None


def promoted() -> Node:
    """A cycle moved to the oldest generation: once dropped, garbage only a full collection
    finds."""
    node = Node()
    gc.collect(1)  # young and middle survivors go to the oldest generation
    assert any(held is node for held in gc.get_objects(generation=2))
    return node


@pytest.mark.usefixtures("automatic")
async def test_old_cycles_wait_for_a_full_collection_when_time_is_up() -> None:
    fulls = Pauses(full=True)
    collector = Collector(asyncio.get_running_loop(), 0.02, full_every=2.0, observe=fulls)
    collector.start()
    try:
        old, freed = watched(promoted())
        await asyncio.sleep(0.1)  # several young ticks, which do not walk it
        # Unless the loop was held up past full_every (a loaded machine): then the full
        # collection may have come already, and freed it rightly.
        assert old() is not None or fulls.seen.is_set()
        async with asyncio.timeout(10):
            await freed.wait()
        assert fulls.seen.is_set()
    finally:
        collector.close()


def ballast_past_peak() -> bytes:
    """Bytes that take resident memory a fifth past its peak: written, so that their pages are
    resident (ru_maxrss is in KiB on Linux, statm in pages)."""
    with open("/proc/self/statm") as statm:
        resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return b"x" * (peak_rss() * 1024 * 6 // 5 - resident)


@pytest.mark.usefixtures("automatic")
async def test_a_full_collection_follows_memory_growth() -> None:
    fulls = Pauses(full=True)
    # Growth by a tenth, not the default doubling: the test process may be large.
    loop = asyncio.get_running_loop()
    collector = Collector(loop, 0.02, full_every=3600.0, growth=0.1, observe=fulls)
    collector.start()
    try:
        old, freed = watched(promoted())
        await asyncio.sleep(0.1)
        assert old() is not None and not fulls.seen.is_set()
        ballast = ballast_past_peak()
        async with asyncio.timeout(5):
            await freed.wait()
        del ballast
        assert len(fulls.seconds) == 1
    finally:
        collector.close()
