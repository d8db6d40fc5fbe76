"""``proxy.http.deadline.Deadline`` on a real event loop: when it cancels, what it tells after."""

from __future__ import annotations

import asyncio

import pytest

from proxy.http.deadline import TICK, Deadline, Deadlines


async def _guarded(timer: Deadline, wait: float) -> str:
    try:
        await asyncio.sleep(wait)
    except asyncio.CancelledError:
        if not timer.expired():
            raise
        return "expired"
    return "done"


@pytest.mark.parametrize(
    ("moves", "wait", "outcome"),
    [
        ([0.05], 0.01, "done"),  # the wait ends first
        ([0.01], 1.0, "expired"),
        ([0.01, 0.08], 0.04, "done"),  # moved later before the first limit: the timer re-arms
        ([0.08, 0.01], 1.0, "expired"),  # moved earlier: armed again at the earlier time
        ([0.01, 0.03], 1.0, "expired"),  # moved later, and that limit passes too
    ],
)
async def test_expires_at_the_latest_move(moves: list[float], wait: float, outcome: str) -> None:
    loop = asyncio.get_running_loop()
    timer = Deadline(Deadlines(loop))
    now = loop.time()
    for offset in moves:
        timer.move(now + offset)
    assert await _guarded(timer, wait) == outcome
    timer.close()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_closed_deadline_never_fires() -> None:
    loop = asyncio.get_running_loop()
    timer = Deadline(Deadlines(loop))
    timer.move(loop.time() + 0.01)
    timer.close()
    await asyncio.sleep(0.05)  # not cancelled
    assert not timer.fired


async def test_a_cancel_from_outside_is_not_the_deadline() -> None:
    async def guarded() -> str:
        timer = Deadline(Deadlines(asyncio.get_running_loop()))
        timer.move(asyncio.get_running_loop().time() + 10)
        try:
            return await _guarded(timer, 10)
        finally:
            timer.close()

    task = asyncio.ensure_future(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_needs_a_task() -> None:
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[BaseException | None] = loop.create_future()

    def outside_any_task() -> None:
        try:
            Deadline(Deadlines(loop))
        except RuntimeError as exc:
            outcome.set_result(exc)
        else:
            outcome.set_result(None)

    loop.call_soon(outside_any_task)
    error = await outcome
    assert isinstance(error, RuntimeError) and "guards the waits of a task" in str(error)


def _timers(loop: asyncio.AbstractEventLoop) -> int:
    """The loop timers pending on asyncio's own loop (what the tests run on)."""
    assert isinstance(loop, asyncio.BaseEventLoop)
    scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    return len([handle for handle in scheduled if not handle.cancelled()])


async def test_deadlines_closed_within_a_tick_share_one_timer() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    before = _timers(loop)
    timers = [Deadline(deadlines) for _ in range(100)]
    for timer in timers:
        timer.move(loop.time() + 60)
    assert _timers(loop) == before + 1  # the tick's, for all of them
    for timer in timers:
        timer.close()
    await asyncio.sleep(TICK * 3)
    assert _timers(loop) == before  # none of them got a timer of its own
    assert not any(timer.fired for timer in timers)


async def test_a_deadline_open_past_a_tick_gets_its_own_timer() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    before = _timers(loop)
    timer = Deadline(deadlines)
    timer.move(loop.time() + 60)
    await asyncio.sleep(TICK * 3)
    assert _timers(loop) == before + 1  # its own, at its limit
    timer.move(loop.time() + 0.01)  # earlier: armed again
    assert await _guarded(timer, 1.0) == "expired"
    assert _timers(loop) == before


async def test_a_deadline_shorter_than_a_tick_fires_within_a_tick() -> None:
    loop = asyncio.get_running_loop()
    timer = Deadline(Deadlines(loop))
    started = loop.time()
    timer.move(started + TICK / 10)
    assert await _guarded(timer, 1.0) == "expired"
    # A tick late at most, and whatever a busy machine adds to the loop's own timers.
    assert loop.time() - started < TICK + 0.2


async def test_closing_the_deadlines_hands_the_open_ones_their_own_timers() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    before = _timers(loop)
    done, still_open = Deadline(deadlines), Deadline(deadlines)
    done.move(loop.time() + 60)
    done.close()
    still_open.move(loop.time() + 0.05)
    deadlines.close()
    assert _timers(loop) == before + 1  # the open one's own; the shared one is gone
    assert await _guarded(still_open, 1.0) == "expired"
    assert not done.fired
    assert _timers(loop) == before
