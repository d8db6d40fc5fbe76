"""Writing a recording, or a fault in its place, to the client.

Waits here are plain asyncio sleeps, some of them endless: the server cancels every response
still running when it shuts down (see ``server``), so none outlives it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from types import MappingProxyType
from typing import Final, NoReturn

from aiohttp import web

from proxy.emulator.endless import endless_event
from proxy.emulator.endpoint import Endpoint
from proxy.emulator.envelope import ErrorInfo, error_body, error_headers
from proxy.emulator.fault import Fault
from proxy.emulator.recording import Recording, content_type, recording_exception

# With no chunk_delay, endless output is paced at 1 ms so it cannot starve the event loop.
ENDLESS_INTERVAL: Final = 0.001
_ENDLESS_LINE: Final = b"x" * 8192
_RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
_ERROR_TYPES: Final = MappingProxyType(
    {
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "rate_limit_error",
    }
)


@dataclass(frozen=True)
class Playback:
    request: web.Request
    endpoint: Endpoint
    model: str
    recording: Recording | None
    chunk_delay: float
    """Seconds between a stream's events."""
    ending: str = ".stream.sse"
    """How the name of a recording streaming this request ends (``endpoint.stream_ending``):
    the form the ``endless`` fault writes in."""


def error_response(
    error: ErrorInfo, *, dialect: str = "openai", headers: dict[str, str] | None = None
) -> web.Response:
    """A response with ``error`` in ``dialect``'s error envelope (see ``envelope``)."""
    return web.Response(
        status=error.status,
        body=error_body(dialect, error),
        headers={
            "Content-Type": "application/json",
            **error_headers(dialect, error),
            **(headers or {}),
        },
    )


async def play(playback: Playback, fault: Fault | None) -> web.StreamResponse:
    """Answer with ``playback``'s recording, or with ``fault`` instead."""
    try:
        if fault is None:
            return await _play_recording(playback)
        return await _FAULTS[fault.kind](playback, fault)
    except ConnectionError:
        # The client has gone. aiohttp fails to write this to the closed connection with
        # another ConnectionError, which it takes as the end of the connection.
        return web.Response()


async def _play_recording(playback: Playback) -> web.StreamResponse:
    recording = _recording(playback)
    if not recording.streamed:
        headers = {"Content-Type": recording.content_type}
        if recording.status >= 400:
            # Bedrock's error type rides in a header: the recording's name gives it.
            code = recording_exception(recording.name)
            error = ErrorInfo(recording.status, "", code=code)
            headers |= error_headers(playback.endpoint.dialect, error)
        return web.Response(status=recording.status, body=recording.body, headers=headers)
    response = await _start(playback.request, recording.status, recording.content_type)
    for index, event in enumerate(recording.events):
        if index and playback.chunk_delay:
            await asyncio.sleep(playback.chunk_delay)
        await response.write(event)
    await response.write_eof()
    return response


async def _play_status(playback: Playback, fault: Fault) -> web.StreamResponse:
    status = fault.count
    fallback = "server_error" if status >= 500 else "invalid_request_error"
    # Providers send Retry-After with these two; the proxy's retry logic is tested against it.
    # Bedrock does not: its throttling carries no delay.
    retry_after = status in _RETRY_AFTER_STATUSES and playback.endpoint.dialect != "bedrock"
    headers = {"Retry-After": "1"} if retry_after else {}
    error = ErrorInfo(
        status, f"emulated fault: status {status}", _ERROR_TYPES.get(status, fallback)
    )
    return error_response(error, dialect=playback.endpoint.dialect, headers=headers)


async def _play_html(playback: Playback, fault: Fault) -> web.StreamResponse:
    # What a load balancer in front of a provider answers with, e.g. nginx's 502 page.
    title = f"{fault.count} {_reason(fault.count)}"
    page = (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n"
        "</body>\r\n</html>\r\n"
    )
    return web.Response(
        status=fault.count, body=page.encode(), headers={"Content-Type": "text/html"}
    )


async def _play_reset_after(playback: Playback, fault: Fault) -> web.StreamResponse:
    response = await _start_partial(playback, fault.count)
    _abort(playback.request)  # No terminating chunk and no FIN: the transfer is cut off.
    return response


async def _play_stall_after(playback: Playback, fault: Fault) -> web.StreamResponse:
    await _start_partial(playback, fault.count)
    await _wait_until_cancelled()


async def _play_hang(playback: Playback, fault: Fault) -> web.StreamResponse:
    await _wait_until_cancelled()


async def _play_slow_first_byte(playback: Playback, fault: Fault) -> web.StreamResponse:
    await asyncio.sleep(fault.arg or 0.0)
    return await _play_recording(playback)


async def _play_garbage(playback: Playback, fault: Fault) -> web.StreamResponse:
    # Seeded, so a failure replays identically; 0xFF never occurs in UTF-8 (RFC 3629, 1).
    noise = random.Random(fault.count).randbytes(fault.count)
    body = (b"\xff" + noise)[: fault.count]
    response = await _start(playback.request, 200, "text/event-stream")
    await response.write(body)
    await response.write_eof()
    return response


async def _play_endless(playback: Playback, fault: Fault) -> web.StreamResponse:
    response = await _start(playback.request, 200, content_type(playback.ending))
    interval = playback.chunk_delay or ENDLESS_INTERVAL
    index = 0
    while True:
        event = endless_event(playback.endpoint, playback.ending, playback.model, index)
        await response.write(event)
        await asyncio.sleep(interval)
        index += 1


async def _play_no_newline(playback: Playback, fault: Fault) -> web.StreamResponse:
    response = await _start(playback.request, 200, "text/event-stream")
    await response.write(b"data: ")
    interval = playback.chunk_delay or ENDLESS_INTERVAL
    while True:
        await response.write(_ENDLESS_LINE)
        await asyncio.sleep(interval)


async def _play_not_object(playback: Playback, fault: Fault) -> web.StreamResponse:
    return web.Response(body=b"[1,2,3]", headers={"Content-Type": "application/json"})


async def _play_wrong_type(playback: Playback, fault: Fault) -> web.StreamResponse:
    return web.Response(body=b"hello", headers={"Content-Type": "text/plain"})


_FAULTS: Final[
    MappingProxyType[str, Callable[[Playback, Fault], Awaitable[web.StreamResponse]]]
] = MappingProxyType(
    {
        "status": _play_status,
        "html": _play_html,
        "reset-after": _play_reset_after,
        "stall-after": _play_stall_after,
        "hang": _play_hang,
        "slow-first-byte": _play_slow_first_byte,
        "garbage": _play_garbage,
        "endless": _play_endless,
        "no-newline": _play_no_newline,
        "not-object": _play_not_object,
        "wrong-type": _play_wrong_type,
    }
)


async def _start(request: web.Request, status: int, content_type: str) -> web.StreamResponse:
    response = web.StreamResponse(
        status=status, headers={"Content-Type": content_type, "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


async def _start_partial(playback: Playback, size: int) -> web.StreamResponse:
    """Send the headers and the first ``size`` bytes of the recording, and no more."""
    recording = _recording(playback)
    response = web.StreamResponse(
        status=recording.status, headers={"Content-Type": recording.content_type}
    )
    if not recording.streamed:
        # Announce the whole body so the client can tell that it was cut short.
        response.content_length = len(recording.body)
    await response.prepare(playback.request)
    await response.write(recording.body[:size])
    return response


def _recording(playback: Playback) -> Recording:
    if playback.recording is None:
        raise AssertionError("the handler resolves the recording for faults that need one")
    return playback.recording


async def _wait_until_cancelled() -> NoReturn:
    await asyncio.Event().wait()  # Nobody else holds the event: only cancellation ends this.
    raise AssertionError("unreachable")


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
