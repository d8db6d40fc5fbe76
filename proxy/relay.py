"""The I/O loop of one completion: upstream bytes → decoder → normalizer → client.

Headers go to the client only once the normalizer has something to say, so that anything that
fails before the first byte (the upstream's status, a timeout, an error event first thing)
is still a proper HTTP error (CANONICAL.md section 4). After that, failures become one error
event. Upstream reads are bounded by the provider's first-byte, idle and total timeouts, client
writes by the idle timeout; a client that goes away closes the upstream request at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Final

import aiohttp
import orjson
from aiohttp import web

from proxy.config import Timeouts
from proxy.errors import ProxyError, UpstreamError, UpstreamProtocolError, UpstreamTimeout
from proxy.exchange import Exchange
from proxy.normalize import ApiFamily, RequestContext, StreamNormalizer
from proxy.normalize.convert import frames_from_response, response_from_frames
from proxy.sse import SSEDecoder
from proxy.upstream import mapped_errors, read_whole

# The largest whole response accepted from an upstream (a long completion is a few MB at most).
RESPONSE_LIMIT: Final = 64 * 1024 * 1024
_STREAM_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    # Tell nginx-style buffering proxies in front of us to pass events on as they come.
    "X-Accel-Buffering": "no",
}


def _is_event_stream(response: aiohttp.ClientResponse) -> bool:
    return response.content_type == "text/event-stream"


def _deadline(loop: asyncio.AbstractEventLoop, seconds: float, limit: float) -> float:
    return min(loop.time() + seconds, limit)


async def relay_whole(
    upstream: aiohttp.ClientResponse,
    family: ApiFamily,
    ctx: RequestContext,
    exchange: Exchange,
    timeouts: Timeouts,
    deadline: float,
) -> web.Response:
    """A non-streamed answer: read it whole (bounded), normalize it, send it."""
    if _is_event_stream(upstream):
        return await _stream_as_whole(upstream, family, ctx, exchange, timeouts, deadline)
    loop = asyncio.get_running_loop()
    waited = loop.time()
    try:
        async with asyncio.timeout_at(deadline):
            raw = await read_whole(upstream, RESPONSE_LIMIT)
    except TimeoutError as exc:
        raise UpstreamTimeout(
            f"The upstream did not finish its answer within {timeouts.total:g} s"
        ) from exc
    finally:
        exchange.upstream_wait += loop.time() - waited
        upstream.release()
    normalized = family.response(raw, ctx)
    exchange.usage = normalized.usage
    exchange.fixes = normalized.fixes
    return web.Response(body=normalized.body, content_type="application/json")


async def _stream_as_whole(
    upstream: aiohttp.ClientResponse,
    family: ApiFamily,
    ctx: RequestContext,
    exchange: Exchange,
    timeouts: Timeouts,
    deadline: float,
) -> web.Response:
    """A whole answer was asked for but the upstream streamed: collect the stream, then answer."""
    normalizer = family.stream(replace(ctx, include_usage=True))
    decoder = SSEDecoder()
    frames: list[bytes] = []
    loop = asyncio.get_running_loop()
    waited = loop.time()
    try:
        async with asyncio.timeout_at(deadline):
            while not normalizer.ended:
                with mapped_errors("stream"):
                    data = await upstream.content.readany()
                for event in decoder.feed(data) if data else decoder.close():
                    frames += normalizer.feed(event)
                if not data:
                    frames += normalizer.finish()
    except TimeoutError as exc:
        raise UpstreamTimeout(
            f"The upstream did not finish its answer within {timeouts.total:g} s"
        ) from exc
    finally:
        exchange.upstream_wait += loop.time() - waited
        exchange.usage = normalizer.usage
        exchange.fixes = frozenset(normalizer.fixes)
        upstream.close()
    if normalizer.error is not None:
        raise normalizer.error
    usage = orjson.loads(frames[-2][6:-2])["usage"]  # the usage chunk before [DONE]
    return web.Response(body=response_from_frames(frames, usage), content_type="application/json")


async def relay_stream(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    family: ApiFamily,
    ctx: RequestContext,
    exchange: Exchange,
    timeouts: Timeouts,
    deadline: float,
    headers: dict[str, str],
) -> web.StreamResponse:
    """A streamed answer, relayed event by event as it arrives."""
    if not _is_event_stream(upstream):
        return await _whole_as_stream(
            request, upstream, family, ctx, exchange, timeouts, deadline, headers
        )
    normalizer = family.stream(ctx)
    try:
        return await _pump(request, upstream, normalizer, exchange, timeouts, deadline, headers)
    finally:
        exchange.usage = normalizer.usage
        exchange.fixes = frozenset(normalizer.fixes)
        upstream.close()


async def _pump(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    normalizer: StreamNormalizer,
    exchange: Exchange,
    timeouts: Timeouts,
    deadline: float,
    headers: dict[str, str],
) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    decoder = SSEDecoder()
    response: web.StreamResponse | None = None
    content = upstream.content
    wait = timeouts.first_byte
    while not normalizer.ended:
        frames: list[bytes] = []
        events = []
        started = loop.time()
        try:
            async with asyncio.timeout_at(min(started + wait, deadline)):
                with mapped_errors("stream"):
                    data = await content.readany()
            events = decoder.feed(data) if data else decoder.close()
        except TimeoutError:
            data = b"-"  # not the end of the body: the failure ends the stream
            gap = (
                "total"
                if loop.time() >= deadline
                else ("first byte" if response is None else "idle")
            )
            seconds = {"total": timeouts.total, "first byte": timeouts.first_byte}.get(
                gap, timeouts.idle
            )
            frames = normalizer.fail(
                UpstreamTimeout(f"The upstream sent nothing within {seconds:g} s ({gap})")
            )
        except UpstreamError as exc:
            data = b"-"
            frames = normalizer.fail(exc)
        finally:
            exchange.upstream_wait += loop.time() - started
        wait = timeouts.idle
        for event in events:
            frames += normalizer.feed(event)
            if normalizer.ended:
                break
        if not data and not normalizer.ended:
            frames += normalizer.finish()
        if not frames:
            continue
        if response is None:
            if normalizer.error is not None and len(frames) == 1:
                # The failure is all there is to say, and nothing was sent: an HTTP error.
                raise normalizer.error
            response = web.StreamResponse(status=200, headers={**_STREAM_HEADERS, **headers})
            exchange.status = 200
            await response.prepare(request)
            exchange.first_token_at = loop.time()
        if normalizer.error is not None:
            exchange.error_type = normalizer.error.error_type
            if isinstance(normalizer.error, UpstreamError):
                exchange.upstream_error = normalizer.error.kind
        started = loop.time()
        try:
            async with asyncio.timeout_at(started + timeouts.idle):
                await response.write(b"".join(frames) if len(frames) > 1 else frames[0])
        except (ConnectionResetError, TimeoutError):
            # The client went away or stopped reading: nothing more can reach it.
            exchange.client_disconnected = True
            return response
        finally:
            exchange.client_wait += loop.time() - started
    assert response is not None  # the loop ends only once the normalizer has said its last
    await response.write_eof()
    return response


async def _whole_as_stream(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    family: ApiFamily,
    ctx: RequestContext,
    exchange: Exchange,
    timeouts: Timeouts,
    deadline: float,
    headers: dict[str, str],
) -> web.StreamResponse:
    """A stream was asked for but the upstream answered with one JSON body: stream that."""
    if upstream.content_type != "application/json":
        upstream.close()
        raise UpstreamProtocolError(
            f"The upstream answered a stream request with content type '{upstream.content_type}'"
        )
    whole = await relay_whole(upstream, family, ctx, exchange, timeouts, deadline)
    assert isinstance(whole.body, bytes)
    response = web.StreamResponse(status=200, headers={**_STREAM_HEADERS, **headers})
    exchange.status = 200
    await response.prepare(request)
    exchange.first_token_at = asyncio.get_running_loop().time()
    try:
        await response.write(b"".join(frames_from_response(whole.body, ctx)))
        await response.write_eof()
    except ConnectionResetError:
        exchange.client_disconnected = True
    return response


__all__ = ["ProxyError", "relay_stream", "relay_whole"]
