"""Work held for a loop turn or a few milliseconds (``proxy.http.batch``), and the metrics that use
it: what the requests of that while add is written once, and a reader never sees a request out
of flight before it is counted."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from proxy.core.exchange import Exchange
from proxy.core.usage import Usage
from proxy.http.batch import Batch
from proxy.ops.metrics import FLUSH_DELAY, Exposition, ProxyMetrics
from tests.support.metrics import read_samples, total


async def test_one_flush_per_loop_turn() -> None:
    flushes: list[int] = []
    batch = Batch(lambda: flushes.append(1))
    for _ in range(5):
        batch.touch()
    assert flushes == []  # held until the turn ends
    await asyncio.sleep(0)
    assert flushes == [1]
    batch.touch()
    await asyncio.sleep(0)
    assert flushes == [1, 1]
    await asyncio.sleep(0)
    assert flushes == [1, 1]  # nothing touched, nothing flushed


async def test_a_delayed_batch_flushes_once_after_its_delay() -> None:
    flushes: list[int] = []
    batch = Batch(lambda: flushes.append(1), delay=0.05)
    for _ in range(5):
        batch.touch()
    await asyncio.sleep(0)
    assert flushes == []  # not at the end of the turn: after the delay
    await asyncio.sleep(0.1)
    assert flushes == [1]
    batch.touch()
    batch.flush_now()  # a stopping worker does not wait, and the timer is cancelled
    assert flushes == [1, 1]
    await asyncio.sleep(0.1)
    assert flushes == [1, 1]


def test_without_a_loop_touch_flushes_at_once() -> None:
    flushes: list[int] = []
    Batch(lambda: flushes.append(1)).touch()
    assert flushes == [1]


def test_a_batch_outlives_the_loop_it_last_ran_on() -> None:
    """It keeps the loop of its last touch (asking for the running one costs a system call on
    Python 3.11): once that loop has stopped, it uses the next one, or flushes at once."""
    flushes: list[str] = []
    batch = Batch(lambda: flushes.append("flushed"))

    async def touch_then_turn(name: str) -> None:
        batch.touch()
        flushes.append(name)  # held until the turn ends
        await asyncio.sleep(0)

    for name in ("first loop", "second loop"):
        with asyncio.Runner() as runner:
            runner.run(touch_then_turn(name))
        batch.touch()  # no loop running: at once
    assert flushes == ["first loop", "flushed", "flushed", "second loop", "flushed", "flushed"]


def _exchange(i: int) -> Exchange:
    exchange = Exchange(f"req-{i}", "chat", 1.0, team="alpha", model="llama", provider="emu")
    exchange.status = 200
    exchange.usage = Usage(3, 2, 5)
    exchange.ended = 1.25
    return exchange


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return total(read_samples(Exposition(registry).render().decode()), name, **labels)


async def _after_the_delay() -> None:
    await asyncio.sleep(FLUSH_DELAY * 2)


async def test_metrics_are_held_for_the_delay_then_written_together() -> None:
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry, ["emu"])
    long_running = _exchange(0)
    metrics.started(long_running)
    await asyncio.sleep(0)
    assert _value(registry, "llm_proxy_requests_in_flight") == 0  # held
    await _after_the_delay()
    assert _value(registry, "llm_proxy_requests_in_flight") == 1

    for i in range(1, 4):  # three requests that start and end within the delay
        exchange = _exchange(i)
        metrics.started(exchange)
        metrics.finished(exchange)
    assert _value(registry, "llm_proxy_requests_total") == 0
    assert _value(registry, "llm_proxy_request_duration_seconds_count") == 0  # tallied, held
    await _after_the_delay()
    assert _value(registry, "llm_proxy_requests_total", team="alpha", status_class="2xx") == 3
    assert _value(registry, "llm_proxy_request_duration_seconds_count") == 3
    assert _value(registry, "llm_proxy_overhead_seconds_count") == 3
    assert _value(registry, "llm_proxy_tokens_total", type="prompt") == 9
    assert _value(registry, "llm_proxy_tokens_total", type="completion") == 6
    assert _value(registry, "llm_proxy_requests_in_flight") == 1  # theirs never moved it

    metrics.finished(long_running)
    metrics.flush()  # a scrape is about to read: written now
    assert _value(registry, "llm_proxy_requests_total") == 4
    assert _value(registry, "llm_proxy_requests_in_flight") == 0

    metrics.started(_exchange(5))
    metrics.close()  # a stopping worker writes what it holds without waiting
    assert _value(registry, "llm_proxy_requests_in_flight") == 1


async def test_counts_are_written_before_in_flight_moves() -> None:
    """A reader that sees a request no longer in flight also sees it counted (tests rely on it,
    and so does anyone reading the two together)."""
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry, ["emu"])
    exchange = _exchange(0)
    metrics.started(exchange)
    metrics.flush()
    seen: list[tuple[float, float]] = []
    gauge = metrics.requests_in_flight("chat")
    move = gauge.inc

    def watched(amount: float = 1) -> None:
        seen.append((_value(registry, "llm_proxy_requests_total"), amount))
        move(amount)

    gauge.inc = watched  # type: ignore[method-assign]
    metrics.finished(exchange)
    await _after_the_delay()
    assert seen == [(1, -1)]
