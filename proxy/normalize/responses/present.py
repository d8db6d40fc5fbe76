"""A Responses API request's answer as the client sees it (sans-IO): the ``Presenter`` that turns
the chat pipeline's canonical answer into a Response, and the normalizers of a provider that
serves the Responses API itself.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.core.errors import ProxyError, UpstreamProtocolError, error_body
from proxy.core.exchange import Answered
from proxy.core.sse import Event
from proxy.core.usage import Usage, estimated_usage, prompt_chars
from proxy.normalize import ApiFamily
from proxy.normalize.fields import (
    RequestContext,
    upstream_error,
    upstream_model,
    upstream_object,
)
from proxy.normalize.present import Around, EventStream
from proxy.normalize.responses.echo import Echo
from proxy.normalize.responses.passthrough import PassthroughEvents, hold_response, metered_usage
from proxy.normalize.responses.stream import ResponsesEvents, responses_frames
from proxy.normalize.responses.whole import response_body
from proxy.normalize.whole import Normalized

__all__ = ["PASSTHROUGH", "PassthroughStream", "ResponsesPresenter", "passthrough_response"]


class ResponsesPresenter:
    """One Responses request answered through chat: its ids, time and echo, fixed once
    (``limit``: the most bytes of text a stream's items keep, ``ResponsesEvents``)."""

    __slots__ = ("created", "echo", "limit", "model", "response_id")

    def __init__(
        self, echo: Echo, *, response_id: str, created: int, model: str, limit: int = 0
    ) -> None:
        self.echo = echo
        self.response_id = response_id
        self.created = created
        self.model = model  # the client's name for it
        self.limit = limit

    def whole(self, body: bytes) -> bytes:
        chat = orjson.loads(body)
        return orjson.dumps(
            response_body(
                chat,
                self.echo,
                response_id=self.response_id,
                created=self.created,
                model=self.model,
            )
        )

    def stream(self, inner: EventStream) -> EventStream:
        return _PresentedStream(inner, self._events())

    def frames(self, frames: list[bytes]) -> list[bytes]:
        return responses_frames(
            frames, self.echo, response_id=self.response_id, created=self.created, model=self.model
        )

    def _events(self) -> ResponsesEvents:
        return ResponsesEvents(
            self.echo,
            response_id=self.response_id,
            created=self.created,
            model=self.model,
            limit=self.limit,
        )


class _PresentedStream(Around):
    """The chat stream's normalizer, its frames turned into Responses events on the way out.

    Its error, usage and fixes are the chat stream's: what the upstream did is metered and
    told as for any chat stream; only the client's bytes differ. But it ends, failed, where
    the Responses stream keeps more text than its limit (``ResponsesEvents.overflow``)."""

    __slots__ = ("_events",)

    def __init__(self, inner: EventStream, events: ResponsesEvents) -> None:
        super().__init__(inner)
        self._events = events

    @property
    def ended(self) -> bool:
        return self._inner.ended or self._events.overflow is not None

    @property
    def error(self) -> ProxyError | None:
        return self._inner.error or self._events.overflow

    def feed(self, event: Event) -> list[bytes]:
        return self._present(self._inner.feed(event))

    def finish(self) -> list[bytes]:
        return self._present(self._inner.finish())

    def fail(self, exc: ProxyError) -> list[bytes]:
        return self._present(self._inner.fail(exc))

    def _present(self, frames: list[bytes]) -> list[bytes]:
        if not self._events.started and self._inner.error is not None and len(frames) == 1:
            # A failure before anything was said: the relay answers it as an HTTP error (and
            # may try another deployment), as for a chat client, so it is not dressed up as a
            # Responses stream that would have to begin first.
            return frames
        out: list[bytes] = []
        for frame in frames:
            out += self._events.frame(frame)
        return out


class PassthroughStream:
    """A provider's own Responses stream, held to the contract event by event."""

    __slots__ = ("_ctx", "_error", "_events", "_fixes")

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx
        self._events = PassthroughEvents(
            model=ctx.model, created=ctx.created, redact=ctx.redact, limit=ctx.keeps
        )
        self._error: ProxyError | None = None
        self._fixes: set[str] = set()  # the upstream speaks the client's API: nothing to fix

    @property
    def ended(self) -> bool:
        return self._events.ended

    @property
    def error(self) -> ProxyError | None:
        return self._error or self._events.overflow

    @property
    def fixes(self) -> set[str]:
        return self._fixes

    @property
    def usage(self) -> Usage:
        usage = self._events.usage
        if usage is not None:
            return usage
        # No Response with usage came (the stream failed early): metered as an estimate.
        return estimated_usage(prompt_chars(self._ctx.prompt), 0, 0)

    @property
    def answered(self) -> Answered:
        events = self._events
        response = events.response
        if response is None:
            return Answered(None, events.upstream_model)
        return Answered(response["id"], events.upstream_model, _ended_as(response))

    def feed(self, event: Event) -> list[bytes]:
        if self.ended:
            return []
        try:
            payload = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            if not event.data.strip() or event.data.strip() == b"[DONE]":
                return []
            return self.fail(UpstreamProtocolError("The upstream sent an event that is not JSON"))
        return self._events.feed(payload)

    def finish(self) -> list[bytes]:
        if not self.ended:
            # Ended without a terminal event: a failure of the upstream's, told and counted.
            self._error = UpstreamProtocolError(
                "The upstream's Responses stream ended before it said how the response ended"
            )
        return self._events.finish()

    def fail(self, exc: ProxyError) -> list[bytes]:
        if self.ended:
            return []
        self._error = exc
        if self._ctx.redact is not None:  # the upstream's words, on their way to the client
            self._ctx.redact.error(exc)
        return self._events.fail(error_body(exc))


def passthrough_response(raw: bytes, ctx: RequestContext) -> Normalized:
    """A provider's own whole Response, held to the contract."""
    body = upstream_object(raw)
    if body.get("error") and not body.get("output"):
        # HTTP 200 and an error, as on the chat path: the upstream failed, whatever it says.
        raise upstream_error(body["error"])
    model = upstream_model(body)
    held = hold_response(body, model=ctx.model, created=ctx.created, redact=ctx.redact)
    usage = metered_usage(held)
    if usage is None:
        usage = estimated_usage(prompt_chars(ctx.prompt), 0, 0)
    return Normalized(orjson.dumps(held), usage, frozenset(), held["id"], model, _ended_as(held))


def _ended_as(response: dict[str, Any]) -> tuple[str, ...]:
    """How a Response ended, in the Responses API's own words (it has no finish reasons):
    why it is incomplete (``max_output_tokens``, ``content_filter``), else its status
    (``completed``); nothing for one that failed (its span's ``error.type`` says so) or is
    still going."""
    status = response.get("status")
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if status == "incomplete" and type(reason) is str:
        return (reason,)
    if status == "completed" or status == "incomplete":
        return (status,)
    return ()


# How a provider that serves the Responses API itself is read (its ``responses`` setting).
PASSTHROUGH: Final = ApiFamily(PassthroughStream, passthrough_response, chat=False)
