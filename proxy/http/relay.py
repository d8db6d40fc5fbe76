"""The I/O loop of one completion: upstream bytes → decoder → normalizer → client.

Headers go to the client only once the normalizer has something to say, so that anything that
fails before the first byte (the upstream's status, a timeout, an error event first thing)
is still a proper HTTP error (docs/canonical-output.md section 4), and still worth another
deployment: a ``ProxyError`` raised from here means the client has received nothing. After the first
byte, failures become one error event. Upstream reads are bounded by the provider's first-byte, idle
and total timeouts, client writes by the idle timeout; a client that goes away closes the upstream
request at once (aiohttp cancels the handler, and every path closes the upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import struct
import termios
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import Final, TypeVar

import orjson
from aiohttp import hdrs, web

from proxy.core.config import Timeouts
from proxy.core.errors import (
    ProxyError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    handled,
)
from proxy.core.exchange import Exchange
from proxy.core.framing import Decoder, decoder_for
from proxy.core.usage import Usage
from proxy.http.deadline import Deadline
from proxy.http.pipe import Pipe, Relays, frames_for
from proxy.http.reply import JsonReply
from proxy.http.state import Collecting, Observer
from proxy.http.upstream import (
    TRANSPORT_ERRORS,
    UpstreamResponse,
    mapped_errors,
    read_arrived,
    read_whole,
    upstream_error_for,
)
from proxy.normalize import ApiFamily, RequestContext, StreamNormalizer
from proxy.normalize.convert import Collector, frames_from_response
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.keep import Kept
from proxy.normalize.present import EventStream, Presenter

T = TypeVar("T")

log = logging.getLogger("proxy.relay")

USAGE_SOURCE: Final = "X-Usage-Source"

_STREAM_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    # Tell nginx-style buffering proxies in front of us to pass events on as they come.
    "X-Accel-Buffering": "no",
}


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class Answer:
    """An upstream's 200 answer, and what relaying it needs."""

    response: UpstreamResponse
    family: ApiFamily
    ctx: RequestContext
    timeouts: Timeouts
    deadline: float  # loop time by which the whole exchange must be over
    timer: Deadline  # the attempt's, moved to each wait's limit and closed when relayed
    relays: Relays  # the loop's (proxy.http.pipe)
    # How the client sees the canonical chat answer, when it asked in another API's shape.
    presenter: Presenter | None
    limit: int  # the most bytes of a whole answer taken (server.max_response_bytes)
    # The most bytes of an answer collected from a stream (server.max_collected_bytes), and
    # what the worker's collected answers hold at once, bounded by ``limit`` together.
    collected: int
    collecting: Collecting
    # Where the canonical whole answer is kept for the response cache; None: not cached.
    kept: Kept | None = None

    def decoder(self, *, stream: bool) -> Decoder | None:
        """The decoder of this answer's events; None when it is one whole JSON body.

        ``stream``: the client asked for a stream, so a dialect's JSON array is a stream too."""
        dialect = DIALECTS[self.ctx.dialect]
        json_array = stream and dialect.json_array_stream
        decoder = decoder_for(self.response.content_type, json_array=json_array)
        if decoder is not None and dialect.messages is not None and not self.family.chat:
            # A Messages call passed through at the dialect's own paths (Claude on Bedrock):
            # its frames carry Anthropic's events.
            return dialect.messages.decoder(decoder)
        return decoder


def whole_arrived(
    response: UpstreamResponse,
    family: ApiFamily,
    ctx: RequestContext,
    exchange: Exchange,
    limit: int,
    presenter: Presenter | None = None,
    kept: Kept | None = None,
) -> JsonReply | None:
    """A non-streamed answer that came whole with its headers (the usual small one), normalized
    into the client's response without a coroutine; None for any other (``relay_whole``)."""
    if decoder_for(response.content_type, json_array=False) is not None:
        return None
    raw = read_arrived(response, limit)
    if raw is None:
        return None
    # Nothing to wait for or to bound; the connection went back to the pool at the body's end.
    response.close()
    return _normalized(raw, family, ctx, exchange, presenter, kept)


async def relay_whole(answer: Answer, exchange: Exchange, *, present: bool = True) -> JsonReply:
    """A non-streamed answer that ``whole_arrived`` did not take (not all of it came with its
    headers, or it is an event stream): read it whole (bounded), normalize it, send it.

    ``present``: shown as the client asked (``answer.presenter``); else canonical chat."""
    presenter = answer.presenter if present else None
    decoder = answer.decoder(stream=False)
    if decoder is not None:
        if not answer.family.chat:
            answer.response.close()
            raise UpstreamProtocolError("The upstream streamed an answer asked for whole")
        return await _stream_as_whole(answer, exchange, decoder, presenter)
    raw = await _read_within_total(answer, exchange, read_whole(answer.response, answer.limit))
    return _normalized(raw, answer.family, answer.ctx, exchange, presenter, answer.kept)


# The ioctl that tells how much a socket's send queue holds (Linux's SIOCOUTQ), if there is one.
_OUTQ: Final = getattr(termios, "TIOCOUTQ", None)
# A whole answer up to this size goes into the client's transport in one write and never waits
# for the client: uvloop's and asyncio's high-water mark, past which a transport asks to wait.
SENT_AT_ONCE: Final = 64 * 1024


async def send_large(
    request: web.BaseRequest, response: JsonReply, exchange: Exchange, idle: float
) -> None:
    """Send a whole answer larger than ``SENT_AT_ONCE`` here, within bounds, rather than leave
    it to aiohttp once the handler has returned: aiohttp waits for the client to take it with no
    limit, so a client that never reads would hold the connection and the answer for good."""

    async def send() -> None:
        await response.prepare(request)
        await response.write_eof()

    await _taken(request, exchange, idle, send())


async def _taken(
    request: web.BaseRequest, exchange: Exchange, idle: float, write: Awaitable[None]
) -> None:
    """Await ``write`` (of more than the client's transport takes at once) for as long as the
    client keeps taking what was written; one that takes nothing of it for ``idle`` seconds is
    hung up on (``_let_go``), as one that stops reading a stream is."""
    transport = request.transport
    waited = perf_counter()
    sending = asyncio.ensure_future(write)
    try:
        await asyncio.sleep(0)  # its first step puts everything into the transport
        held = _unsent(transport)
        while not sending.done():
            await asyncio.wait((sending,), timeout=idle)
            if sending.done():
                break
            left = _unsent(transport)
            if left >= held:
                _let_go(request, exchange)  # nothing taken for ``idle`` seconds
                return
            held = left
        sending.result()
    except ConnectionResetError:
        exchange.client_disconnected = True
    finally:
        exchange.client_wait += perf_counter() - waited
        if not sending.done():
            sending.cancel()
        # Its end (cancelled, or the connection gone) is told above or not worth telling.
        sending.add_done_callback(_retrieved)


def _unsent(transport: asyncio.Transport | None) -> int:
    """The bytes written to a client that it has not taken yet: those in the transport and, on
    Linux, those in the socket's send queue, which it holds for a client that reads slowly (a
    transport's own buffer may stay as it is for a while when the client reads, but slowly)."""
    if transport is None:
        return 0
    unsent = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None and _OUTQ is not None:
        with contextlib.suppress(OSError):  # not a socket it can ask this of
            unsent += struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
    return unsent


def _retrieved(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


def _normalized(
    raw: bytes,
    family: ApiFamily,
    ctx: RequestContext,
    exchange: Exchange,
    presenter: Presenter | None = None,
    kept: Kept | None = None,
) -> JsonReply:
    try:
        normalized = family.response(raw, ctx)
    except orjson.JSONEncodeError:
        # orjson writes less deep a document than it reads (deep logprobs, say).
        raise UpstreamProtocolError(
            "The upstream's answer is nested too deeply to pass on"
        ) from None
    exchange.usage = normalized.usage
    exchange.fixes = normalized.fixes
    if exchange.trace is not None:
        exchange.answered = normalized.answered
    if kept is not None:
        kept.whole(normalized.body, normalized.usage)
    body = normalized.body if presenter is None else presenter.whole(normalized.body)
    return _whole_reply(body, normalized.usage)


def _whole_reply(body: bytes, usage: Usage) -> JsonReply:
    # Whether the counts are the upstream's or the proxy's estimate
    # (docs/canonical-output.md section 3).
    return JsonReply(body, headers={USAGE_SOURCE: usage.source})


async def relay_stream(
    request: web.BaseRequest,
    answer: Answer,
    exchange: Exchange,
    headers: dict[str, str],
    observers: Sequence[Observer],
) -> web.StreamResponse:
    """A streamed answer, relayed event by event as it arrives."""
    opening = _Opening(request, exchange, headers, observers)
    try:
        decoder = answer.decoder(stream=True)
        if decoder is None:
            return await _whole_as_stream(answer, exchange, opening)
        chat = answer.family.stream(answer.ctx)
        if answer.kept is not None and isinstance(chat, StreamNormalizer):
            chat = answer.kept.recording(chat)
        normalizer: EventStream = (
            chat if answer.presenter is None else answer.presenter.stream(chat)
        )
        try:
            return await _pump(answer, decoder, normalizer, exchange, opening)
        finally:
            exchange.usage = normalizer.usage
            exchange.fixes = frozenset(normalizer.fixes)
            if exchange.trace is not None:
                exchange.answered = normalizer.answered
            answer.response.close()
    except Exception:
        if opening.started is None:
            raise  # nothing sent yet: the gateway answers it as an HTTP error
        # A bug of ours after the first byte: another HTTP answer would land inside the body,
        # so the connection is aborted, which tells the client the stream is cut.
        log.exception("request %s failed after its first byte", exchange.request_id)
        exchange.failure = UpstreamProtocolError("The proxy failed while relaying the stream")
        _let_go(request, exchange)
        return opening.started


async def _read_within_total(answer: Answer, exchange: Exchange, read: Awaitable[T]) -> T:
    """``read`` (a whole answer), bounded by the attempt's total timeout, its wait metered;
    the upstream response is closed afterwards, whatever happened."""
    waited = perf_counter()
    timer = answer.timer
    timer.move(answer.deadline)
    try:
        return await read
    except asyncio.CancelledError:
        if not timer.expired():
            raise
        raise _total_timeout(answer) from None
    finally:
        timer.close()
        exchange.upstream_wait += perf_counter() - waited
        answer.response.close()


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class _Opening:
    """What starting a stream's response takes: once the first frame is ready, never before."""

    request: web.BaseRequest
    exchange: Exchange
    headers: dict[str, str]
    observers: Sequence[Observer]
    # The response, once its headers have gone out.
    started: web.StreamResponse | None = field(default=None, init=False)

    def response(self) -> web.StreamResponse:
        return web.StreamResponse(status=200, headers={**_STREAM_HEADERS, **self.headers})

    async def open(self, response: web.StreamResponse) -> None:
        """Send the stream's headers; from now on the request is a stream in flight."""
        exchange = self.exchange
        for observer in self.observers:
            observer.stream_started(exchange)
        await response.prepare(self.request)
        self.started = response
        exchange.status = 200
        exchange.first_token_at = perf_counter()


def _total_timeout(answer: Answer) -> UpstreamTimeout:
    seconds = answer.timeouts.total
    return UpstreamTimeout(f"The upstream did not finish its answer within {seconds:g} s")


# After [DONE], how long to wait for the end of the upstream's body (its last chunk usually comes
# in the same read): a body read to its end lets the connection be reused for the next request.
_REUSE_WAIT: Final = 0.1
_REUSE_BYTES: Final = 64 * 1024


async def _read_to_end(response: UpstreamResponse) -> None:
    content = response.content
    left = _REUSE_BYTES
    try:
        while left > 0 and not content.is_eof():
            chunk = await content.readany()
            if not chunk:
                return
            left -= len(chunk)
    except TRANSPORT_ERRORS:
        return


async def _pump(
    answer: Answer,
    decoder: Decoder,
    normalizer: EventStream,
    exchange: Exchange,
    opening: _Opening,
) -> web.StreamResponse:
    loop = answer.timer.loop
    response: web.StreamResponse | None = None
    # Once the response has started, the rest is relayed in the loop's callbacks (proxy.http.pipe).
    pipe: Pipe | None = None
    read = answer.response.content.readany
    timeouts = answer.timeouts
    deadline = answer.deadline
    # Until its first frame, by the first-byte limit: comments and empty events, which make
    # none, do not count as an answer.
    first_frame_by = loop.time() + timeouts.first_byte
    timer = answer.timer
    waiting = "upstream"  # what the deadline was for, if it expires
    data = b""
    try:
        while not normalizer.ended:
            # Two clocks: the loop's for deadlines (what its timers run on), perf_counter for
            # the waits metered (see Exchange).
            limit = first_frame_by if response is None else loop.time() + timeouts.idle
            timer.move(min(limit, deadline))
            waiting = "upstream"
            if pipe is not None:
                frames = await pipe.flow()  # it meters its waits for the upstream itself
                data = pipe.data
                now = perf_counter()
                if not frames:
                    # The client's transport is full: wait until it has taken some.
                    timer.move(loop.time() + timeouts.idle)
                    waiting = "client"
                    await opening.request.writer.drain()
                    exchange.client_wait += perf_counter() - now
                    continue
            else:
                data, frames = await _read_frames(read, decoder, normalizer, exchange)
                now = perf_counter()
            if not frames:
                continue
            if response is None:
                response = await _first_frames(opening, normalizer, frames)
            if normalizer.error is not None:
                _failed_after_first_byte(exchange, normalizer.error)
            timer.move(loop.time() + timeouts.idle)
            waiting = "client"
            body = b"".join(frames) if len(frames) > 1 else frames[0]
            if normalizer.ended:
                # The last frames and the end of the body in one write (with the headers too,
                # when the whole stream came in one read).
                await response.write_eof(body)
            else:
                await response.write(body)
                if pipe is None:
                    pipe = _pipe(answer, decoder, normalizer, exchange, opening.request, response)
            exchange.client_wait += perf_counter() - now
        # The loop ends once the normalizer has said its last, and every way of ending says
        # something (a finish, usage and [DONE], or an error event): the body's end went out
        # with it, above.
        assert response is not None
        if not data:
            pass  # the upstream's body ended: its connection is back in the pool already
        elif normalizer.error is None:
            timer.move(loop.time() + _REUSE_WAIT)
            waiting = "reuse"
            await _read_to_end(answer.response)
    except asyncio.CancelledError:
        if not timer.expired():
            raise  # cancelled from outside: the client left (handler cancellation)
        await _timed_out(waiting, answer, normalizer, exchange, opening.request, response)
    except ConnectionResetError:
        exchange.client_disconnected = True  # the client went away
    finally:
        timer.close()
    if response is None:  # a failure before the first byte, told as an HTTP error
        assert normalizer.error is not None
        raise normalizer.error
    return response


async def _read_frames(
    read: Callable[[], Awaitable[bytes]],
    decoder: Decoder,
    normalizer: EventStream,
    exchange: Exchange,
) -> tuple[bytes, list[bytes]]:
    """One read of the upstream's body and the frames it makes, before the pipe takes over (a
    stream's first frames, usually in its first read); a failed read makes an error's."""
    started = perf_counter()
    try:
        data = await read()
    except TRANSPORT_ERRORS as exc:
        exchange.upstream_wait += perf_counter() - started
        return b"", normalizer.fail(upstream_error_for(handled(exc), "stream"))
    # The wait ends with the read: decoding and normalizing are our own time.
    exchange.upstream_wait += perf_counter() - started
    try:
        events = decoder.feed(data) if data else decoder.close()
    except UpstreamError as exc:  # an event over the size bound
        return data, normalizer.fail(exc)
    return data, frames_for(normalizer, events, not data)


async def _first_frames(
    opening: _Opening, normalizer: EventStream, frames: list[bytes]
) -> web.StreamResponse:
    """The stream's response, its headers sent, once its first frames are ready to follow."""
    if normalizer.error is not None and len(frames) == 1:
        # The failure is all there is to say, and nothing was sent: an HTTP error.
        raise normalizer.error
    response = opening.response()
    await opening.open(response)
    return response


async def _timed_out(
    waiting: str,
    answer: Answer,
    normalizer: EventStream,
    exchange: Exchange,
    request: web.BaseRequest,
    response: web.StreamResponse | None,
) -> None:
    """The attempt's deadline passed while ``waiting`` for the client, for the rest of an answer
    already complete (``reuse``), or for the upstream, which went quiet for longer than allowed:
    then one error event, if anything was sent."""
    if waiting == "client":
        _let_go(request, exchange)  # it stopped reading: nothing more can reach it
        return
    if waiting == "reuse":
        return  # the answer is complete; the upstream connection is closed, not reused
    frames = normalizer.fail(_gap_timeout(answer, started=response is not None))
    if response is None:
        return
    assert normalizer.error is not None
    _failed_after_first_byte(exchange, normalizer.error)
    try:
        async with asyncio.timeout(answer.timeouts.idle):
            await response.write(b"".join(frames))
            await response.write_eof()
    except ConnectionResetError:
        exchange.client_disconnected = True
    except TimeoutError:
        _let_go(request, exchange)


def _pipe(
    answer: Answer,
    decoder: Decoder,
    normalizer: EventStream,
    exchange: Exchange,
    request: web.BaseRequest,
    response: web.StreamResponse,
) -> Pipe | None:
    """The pipe for the rest of a stream whose response has started; None if the client's
    connection is gone already (the next write tells)."""
    transport = request.transport
    if transport is None:
        return None
    return Pipe(
        answer.response.content,
        decoder,
        normalizer,
        transport,
        # aiohttp chunks the body of a stream to an HTTP/1.1 client, and says so in its headers.
        chunked=response.headers.get(hdrs.TRANSFER_ENCODING) == "chunked",
        timer=answer.timer,
        idle=answer.timeouts.idle,
        deadline=answer.deadline,
        exchange=exchange,
        relays=answer.relays,
    )


def _gap_timeout(answer: Answer, *, started: bool) -> UpstreamTimeout:
    """The timeout for an upstream that went quiet: past the total, before its first event, or
    for longer than the idle limit between two."""
    timeouts = answer.timeouts
    if answer.timer.loop.time() >= answer.deadline:
        gap, seconds = "total", timeouts.total
    elif not started:
        gap, seconds = "first byte", timeouts.first_byte
    else:
        gap, seconds = "idle", timeouts.idle
    error = UpstreamTimeout(f"The upstream sent nothing within {seconds:g} s ({gap})")
    error.blames_deployment = gap != "total"  # past it: a generation longer than allowed
    return error


def _let_go(request: web.BaseRequest, exchange: Exchange) -> None:
    """Hang up on a client that stopped taking what was written. Not only to free the
    connection: aiohttp ends the body once the handler returns, and the client would then take
    its cut stream for a complete one; a connection that breaks off tells it the truth."""
    exchange.client_disconnected = True
    transport = request.transport
    if transport is not None:
        transport.abort()


def _failed_after_first_byte(exchange: Exchange, error: ProxyError) -> None:
    exchange.failure = handled(error)
    if isinstance(error, UpstreamError):
        exchange.upstream_error = error.kind


async def _stream_as_whole(
    answer: Answer, exchange: Exchange, decoder: Decoder, presenter: Presenter | None
) -> JsonReply:
    """A whole answer was asked for but the upstream streamed: collect the stream, then answer.

    Bounded as a stream is: by the first-byte limit until its first frame, then by the idle
    limit between reads, all of it by the total; and in size, by ``answer.collected`` and, with
    the worker's other collections, by ``answer.limit``. A timeout once text has come is final
    (``midway``): another attempt would start the generation over."""
    normalizer = answer.family.stream(replace(answer.ctx, include_usage=True))
    collector = Collector()  # what the frames say, not the frames: they would double it
    said = False  # a frame came
    timer = answer.timer
    loop = timer.loop
    timeouts = answer.timeouts
    read = answer.response.content.readany
    first_frame_by = loop.time() + timeouts.first_byte  # as in _pump
    collecting = answer.collecting
    size = 0
    waited = perf_counter()
    try:
        while not normalizer.ended:
            limit = loop.time() + timeouts.idle if said else first_frame_by
            timer.move(min(limit, answer.deadline))
            with mapped_errors("stream"):
                data = await read()
            size += len(data)
            collecting.held += len(data)
            if size > answer.collected:
                raise UpstreamProtocolError(
                    f"The upstream's answer is larger than the limit of {answer.collected} "
                    "bytes for an answer collected from a stream"
                )
            if collecting.held > answer.limit:
                raise UpstreamProtocolError(
                    "The upstream's answer is too large to collect now: the answers this "
                    f"worker is collecting from streams would hold more than {answer.limit} bytes"
                )
            events = decoder.feed(data) if data else decoder.close()
            frames = frames_for(normalizer, events, not data)
            said = said or bool(frames)
            if normalizer.error is None:  # else its error event, raised below
                for frame in frames:
                    collector.add(frame)
    except asyncio.CancelledError:
        if not timer.expired():
            raise
        error = _gap_timeout(answer, started=said)
        error.midway = said
        raise error from None
    finally:
        collecting.held -= size
        timer.close()
        exchange.upstream_wait += perf_counter() - waited
        answer.response.close()
        exchange.usage = normalizer.usage
        exchange.fixes = frozenset(normalizer.fixes)
        if exchange.trace is not None:
            exchange.answered = normalizer.answered
    if normalizer.error is not None:
        raise normalizer.error
    assert collector.usage is not None  # asked for (include_usage), it comes before [DONE]
    body = collector.response(collector.usage)
    if answer.kept is not None:
        answer.kept.whole(body, normalizer.usage)
    if presenter is not None:
        body = presenter.whole(body)
    return _whole_reply(body, normalizer.usage)


async def _whole_as_stream(
    answer: Answer, exchange: Exchange, opening: _Opening
) -> web.StreamResponse:
    """A stream was asked for but the upstream answered with one JSON body: stream that."""
    content_type = answer.response.content_type
    if content_type != "application/json" or not answer.family.chat:
        # Only a chat or completions answer can be told as a stream by the proxy.
        answer.response.close()
        raise UpstreamProtocolError(
            f"The upstream answered a stream request with content type '{content_type}'"
        )
    whole = whole_arrived(
        answer.response, answer.family, answer.ctx, exchange, answer.limit, kept=answer.kept
    )
    if whole is None:
        whole = await relay_whole(answer, exchange, present=False)
    frames = frames_from_response(whole.raw, answer.ctx)
    if answer.presenter is not None:
        frames = answer.presenter.frames(frames)
    return await _send_frames(opening, frames, answer.timeouts.idle)


async def stream_frames(
    request: web.BaseRequest,
    exchange: Exchange,
    headers: dict[str, str],
    observers: Sequence[Observer],
    frames: list[bytes],
    idle: float,
) -> web.StreamResponse:
    """A whole stream the proxy has at hand (a cached answer's), sent at once."""
    return await _send_frames(_Opening(request, exchange, headers, observers), frames, idle)


async def _send_frames(opening: _Opening, frames: list[bytes], idle: float) -> web.StreamResponse:
    """Headers, every frame and the body's end: one write, taken within bounds."""
    exchange = opening.exchange
    response = opening.response()
    try:
        await opening.open(response)
    except ConnectionResetError:
        exchange.client_disconnected = True
        return response
    await _taken(opening.request, exchange, idle, response.write_eof(b"".join(frames)))
    return response
