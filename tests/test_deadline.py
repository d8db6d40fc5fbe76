"""``proxy.deadline.Deadline`` on a real event loop: when it cancels, and what it tells after."""

from __future__ import annotations

import asyncio

import pytest

from proxy.deadline import Deadline


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
    timer = Deadline(loop)
    now = loop.time()
    for offset in moves:
        timer.move(now + offset)
    assert await _guarded(timer, wait) == outcome
    timer.close()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_closed_deadline_never_fires() -> None:
    loop = asyncio.get_running_loop()
    timer = Deadline(loop)
    timer.move(loop.time() + 0.01)
    timer.close()
    await asyncio.sleep(0.05)  # not cancelled
    assert not timer.fired


async def test_a_cancel_from_outside_is_not_the_deadline() -> None:
    async def guarded() -> str:
        timer = Deadline(asyncio.get_running_loop())
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
            Deadline(loop)
        except RuntimeError as exc:
            outcome.set_result(exc)
        else:
            outcome.set_result(None)

    loop.call_soon(outside_any_task)
    error = await outcome
    assert isinstance(error, RuntimeError) and "guards the waits of a task" in str(error)
