"""A canonical chat stream told as the Responses API's events (sans-IO).

Each event is written as OpenAI writes them: ``event: <type>`` and one ``data:`` line, with a
``sequence_number`` counting from 0 and no ``[DONE]``. The order is OpenAI's:
``response.created``, ``response.in_progress``, each output item's events (``output.py``),
then exactly one of ``response.completed``, ``response.incomplete`` or ``response.failed``,
whose Response is the one ``whole.response_body`` gives for the same answer.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import ProxyError, UpstreamProtocolError, error_body
from proxy.normalize.responses.echo import Echo, Status, responses_usage
from proxy.normalize.responses.output import Event, Output, outcome

# ResponseErrorCode has no code for most failures; these are the ones a chat error maps to.
_ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)
_CUT_SHORT = {
    "message": "The answer ended before it was complete",
    "type": "upstream_error",
}


def encode_event(event: Event) -> bytes:
    """One event as written to the client: its type on the ``event:`` line."""
    kind = str(event["type"]).encode()
    return b"event: " + kind + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def response_error(error: object) -> dict[str, str]:
    """The Response's ``error`` ({code, message}) for an ErrorResponse body or its ``error``."""
    if isinstance(error, dict) and isinstance(error.get("error"), dict):
        error = error["error"]
    if not isinstance(error, dict):
        error = {}
    code = error.get("code")
    if code not in _ERROR_CODES:
        code = "rate_limit_exceeded" if error.get("type") == "rate_limit_error" else "server_error"
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = "The upstream failed"
    return {"code": str(code), "message": message}


class ResponsesEvents:
    """One Responses stream: ``start``, then ``chunk`` for every canonical chat chunk (or
    ``frame`` for every canonical chat frame), then ``end`` or ``fail``.

    ``limit``: the most bytes of text (UTF-8) its items may keep (0: no bound). The API repeats
    every item's text in its ``.done`` events and the final Response, so an answer's text is
    kept until the end; past the limit the stream ends with ``response.failed``, and
    ``overflow`` says why."""

    def __init__(
        self, echo: Echo, *, response_id: str, created: int, model: str, limit: int = 0
    ) -> None:
        self.echo = echo
        self.response_id = response_id
        self.created = created
        self.model = model
        self.started = False
        self.ended = False  # the terminal event was written
        self._output = Output()
        self._sequence = 0
        self._finish: object = None
        self._usage: dict[str, Any] | None = None
        self._tier: str | None = None
        self.limit = limit
        self._kept = 0  # the bytes of text the items hold
        self.overflow: ProxyError | None = None

    def start(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``: an empty Response in progress."""
        if self.started:
            return []
        self.started = True
        response = self._response("in_progress", [])
        return self._frames(
            [
                {"type": "response.created", "response": response},
                {"type": "response.in_progress", "response": response},
            ]
        )

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        """One canonical ``chat.completion.chunk``: choice 0's deltas, its finish, usage."""
        if self.ended:
            return []
        out = self.start()
        tier = chunk.get("service_tier")
        if isinstance(tier, str):
            self._tier = tier
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        events: list[Event] = []
        output = self._output
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # a Responses request asks for one choice
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._kept += _text_size(delta)
                events += output.reasoning(delta.get("reasoning_content"))
                events += output.content(delta.get("content"))
                events += output.content(delta.get("refusal"), "refusal")
                for fragment in delta.get("tool_calls") or ():
                    events += output.call(fragment)
            finish = choice.get("finish_reason")
            if finish is not None:
                self._finish = finish
                events += output.finish(outcome(finish)[0])
        if self.limit and self._kept > self.limit:
            self.overflow = UpstreamProtocolError(
                f"The answer is larger than the limit of {self.limit} bytes that a Responses "
                "stream keeps"
            )
            return out + self._frames(events) + self.fail(error_body(self.overflow))
        return out + self._frames(events)

    def frame(self, data: bytes) -> list[bytes]:
        """Canonical chat SSE frames (``data: {...}``, ``data: [DONE]``, an error event)."""
        out: list[bytes] = []
        for event in data.split(b"\n\n"):
            line = event.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out += self.end()
                continue
            value = orjson.loads(payload)
            if isinstance(value, dict) and "error" in value:
                out += self.fail(value)
            elif isinstance(value, dict):
                out += self.chunk(value)
        return out

    def end(self) -> list[bytes]:
        """The terminal ``response.completed`` (or ``response.incomplete``)."""
        if self.ended:
            return []
        out = self.start()
        status, reason = outcome(self._finish)
        events = self._output.finish(status)
        self.ended = True
        usage = responses_usage(self._usage)
        response = self._response(status, self._output.items(), usage=usage, incomplete=reason)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._frames([*events, {"type": kind, "response": response}])

    def fail(self, error: object) -> list[bytes]:
        """``response.failed`` for a failure after the first byte: items still open stay
        unfinished (no ``.done`` events), shown as ``incomplete`` in the failed Response."""
        if self.ended:
            return []
        out = self.start()
        self.ended = True
        response = self._response(
            "failed",
            self._output.items(),
            usage=responses_usage(self._usage),
            error=response_error(error),
        )
        return out + self._frames([{"type": "response.failed", "response": response}])

    def _response(
        self, status: Status, output: list[dict[str, Any]], **extra: Any
    ) -> dict[str, Any]:
        return self.echo.response(
            response_id=self.response_id,
            created=self.created,
            model=self.model,
            status=status,
            output=output,
            service_tier=self._tier,
            **extra,
        )

    def _frames(self, events: list[Event]) -> list[bytes]:
        out = []
        for event in events:
            event["sequence_number"] = self._sequence
            self._sequence += 1
            out.append(encode_event(event))
        return out


def _text_size(delta: dict[str, Any]) -> int:
    """The bytes of text (UTF-8) a chat delta adds to an answer's items."""
    size = 0
    for key in ("reasoning_content", "content", "refusal"):
        text = delta.get(key)
        if isinstance(text, str):
            size += len(text.encode(errors="surrogatepass"))
    for fragment in delta.get("tool_calls") or ():
        function = fragment.get("function") if isinstance(fragment, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            size += len(arguments.encode(errors="surrogatepass"))
    return size


def responses_frames(
    frames: list[bytes], echo: Echo, *, response_id: str, created: int, model: str
) -> list[bytes]:
    """The Responses stream for a whole canonical chat stream's frames (an upstream that
    answered a stream request in one body)."""
    events = ResponsesEvents(echo, response_id=response_id, created=created, model=model)
    out = events.start()
    for data in frames:
        out += events.frame(data)
    if not events.ended:
        out += events.fail(_CUT_SHORT)  # neither [DONE] nor an error: cut short
    return out
