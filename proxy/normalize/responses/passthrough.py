"""A provider's own Responses API answers, held to the contract (sans-IO).

For a provider that serves ``/v1/responses`` itself (OpenAI, Azure: its ``responses`` setting)
the request is passed on, and what comes back is held like every other answer: ``model`` is
the name the client sent, every object carries only the keys OpenAI's schema gives it, at
every depth (``shapes.py``), and a stream has each event's ``type`` on its ``event:`` line,
``sequence_number`` counting from 0 over what is relayed, and exactly one terminal event.
The status, ids and usage are the provider's. A Response without usage is left without (the
schema allows it): ``metered_usage`` then says None, and the caller meters by estimate.
"""

from __future__ import annotations

import secrets
from typing import Any, Final

from proxy.core.errors import UpstreamProtocolError
from proxy.core.redact import Redactor
from proxy.core.usage import Usage
from proxy.normalize.fields import upstream_model
from proxy.normalize.responses.shapes import NOT_NULL, TABLE
from proxy.normalize.responses.stream import encode_event, response_error


def _parse(table: str) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """``shapes.TABLE`` as object shapes (key -> spec) and unions (type -> shape)."""
    objects: dict[str, dict[str, str]] = {}
    unions: dict[str, dict[str, str]] = {}
    for line in table.replace("\n    ", " ").strip().splitlines():
        head, _, rest = line.partition(" ")
        if head.endswith(":"):
            objects[head[:-1]] = dict(_word(word) for word in rest.split())
        else:
            unions[head] = dict(_word(word) for word in rest.removeprefix("| ").split())
    return objects, unions


def _word(word: str) -> tuple[str, str]:
    key, _, spec = word.partition("=")
    return key, spec


# Parsed once, on import, from the table in code: nothing is read at run time.
_OBJECTS, _UNIONS = _parse(TABLE)
_DROP: Final = object()  # a value that no shape allows: left out of its object or array
_TERMINAL: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})
_ENDED_EARLY: Final = {
    "code": "server_error",
    "message": "The upstream's stream ended before the response was complete",
}
# A Response's required properties and the API's defaults, for a provider that leaves one out
# (lists and objects are made afresh for each Response).
_REQUIRED: Final[dict[str, object]] = {
    "object": "response",
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "temperature": None,
    "top_p": None,
}
_REQUIRED_EMPTY: Final = {"tools": list, "output": list, "metadata": dict}


def _held(value: object, spec: str) -> object:
    obj, _, item = spec.partition("[")
    if isinstance(value, dict):
        return _object(value, obj) if obj else value
    if isinstance(value, list) and item:
        kept = (_held(element, item) for element in value)
        return [element for element in kept if element is not _DROP]
    return value


def _object(value: dict[str, Any], name: str) -> object:
    members = _UNIONS.get(name)
    if members is not None:
        kind = value.get("type", "-")
        member = members.get(kind) if isinstance(kind, str) else None
        if member is None:
            return _DROP  # a type the schema does not know
        name = member
    keys = _OBJECTS[name]
    extra = keys.get("*")
    out: dict[str, Any] = {}
    for key, child in value.items():
        spec = keys.get(key, extra)
        if spec is None:
            continue
        kept = _held(child, spec)
        if kept is not _DROP:
            out[key] = kept
    return out


def hold_response(
    body: object, *, model: str, created: int, redact: Redactor | None = None
) -> dict[str, Any]:
    """The provider's Response ``body`` as the client gets it (``created`` for a provider
    that gave no ``created_at``; ``redact``: the configured secrets, out of its error text)."""
    if not isinstance(body, dict):
        raise UpstreamProtocolError("The upstream's response is not a JSON object")
    held = _object(body, "Response")
    assert isinstance(held, dict)
    for key in NOT_NULL & held.keys():
        if held[key] is None:
            del held[key]
    if "usage" in held:
        usage = _held_usage(held["usage"])
        if usage is None:
            del held["usage"]  # not counts: the schema allows a Response without
        else:
            held["usage"] = usage
    if held.get("error") is not None:
        # The schema's codes only, as on a stream (``response_error``); the text redacted.
        held["error"] = response_error(held["error"])
        if redact is not None:
            redact.error_object(held["error"])
    for key, default in _REQUIRED.items():
        held.setdefault(key, default)
    for key, empty in _REQUIRED_EMPTY.items():
        if key not in held:
            held[key] = empty()
    held.setdefault("id", "resp_" + secrets.token_hex(24))
    held.setdefault("created_at", created)
    held["model"] = model
    return held


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _detail(details: object, key: str) -> int:
    return (_count(details.get(key)) if isinstance(details, dict) else None) or 0


def _held_usage(usage: object) -> dict[str, Any] | None:
    """A Response's ``usage`` as the schema has it (every count a non-negative integer, the
    details it requires present), or None where the provider's main counts are no counts: a
    client's SDK would choke on a string or a negative number (the spec's ResponseUsage)."""
    if not isinstance(usage, dict):
        return None
    counts = [_count(usage.get(key)) for key in ("input_tokens", "output_tokens", "total_tokens")]
    if None in counts:
        return None
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    return {
        "input_tokens": counts[0],
        "input_tokens_details": {
            "cached_tokens": _detail(inputs, "cached_tokens"),
            "cache_write_tokens": _detail(inputs, "cache_write_tokens"),
        },
        "output_tokens": counts[1],
        "output_tokens_details": {"reasoning_tokens": _detail(outputs, "reasoning_tokens")},
        "total_tokens": counts[2],
    }


def metered_usage(response: dict[str, Any]) -> Usage | None:
    """What a Response's ``usage`` says was consumed; None when it says nothing."""
    usage = _held_usage(response.get("usage"))
    if usage is None:
        return None
    return Usage(
        prompt_tokens=usage["input_tokens"],
        completion_tokens=usage["output_tokens"],
        total_tokens=usage["total_tokens"],
        cached_tokens=usage["input_tokens_details"]["cached_tokens"],
        reasoning_tokens=usage["output_tokens_details"]["reasoning_tokens"],
    )


class PassthroughEvents:
    """A provider's Responses stream: ``feed`` each upstream event's parsed JSON, then
    ``finish`` at its end (or ``fail`` when the upstream fails).

    ``limit``: the most bytes of finished output items kept for a ``response.failed`` (0: no
    bound); past it the stream ends with one, and ``overflow`` says why."""

    def __init__(
        self, *, model: str, created: int, redact: Redactor | None = None, limit: int = 0
    ) -> None:
        self.model = model
        self.created = created
        self.redact = redact  # the configured secrets, out of every error text relayed
        self.ended = False  # the terminal event was written
        self.response: dict[str, Any] | None = None  # the latest Response the stream showed
        self.upstream_model: str | None = None  # the first Response's model, as it came
        self._sequence = 0
        self._done: dict[int, dict[str, Any]] = {}  # output items finished, by output_index
        self._error: dict[str, str] | None = None  # the upstream's last ``error`` event
        self.limit = limit
        self._kept = 0  # the bytes of the items in ``_done``, as relayed
        self.overflow: UpstreamProtocolError | None = None

    @property
    def usage(self) -> Usage | None:
        return None if self.response is None else metered_usage(self.response)

    def feed(self, event: object) -> list[bytes]:
        if self.ended or not isinstance(event, dict):
            return []
        held = _object(event, "ResponseStreamEvent")
        if not isinstance(held, dict):
            return []  # an event type the schema does not know
        kind = held.get("type")
        if isinstance(held.get("response"), dict):
            if self.upstream_model is None:
                self.upstream_model = upstream_model(held["response"])
            held["response"] = self.response = hold_response(
                held["response"], model=self.model, created=self.created, redact=self.redact
            )
        elif "response" in held:
            return []  # a lifecycle event without its Response
        item = held.get("item")
        if kind == "response.output_item.done" and isinstance(item, dict):
            frame = self._frame(held)
            self._kept += len(frame)
            if self.limit and self._kept > self.limit:
                self.overflow = UpstreamProtocolError(
                    f"The upstream's output items are larger than the limit of {self.limit} "
                    "bytes that a Responses stream keeps"
                )
                return [frame, *self.fail({"message": self.overflow.message})]
            index = held.get("output_index")
            self._done[index if isinstance(index, int) else len(self._done)] = item
            return [frame]
        if kind == "error":
            if self.redact is not None:  # the upstream's words, on their way to the client
                self.redact.error_object(held)
            self._error = response_error(held)
        if kind in _TERMINAL:
            self.ended = True
        return [self._frame(held)]

    def finish(self) -> list[bytes]:
        """The upstream's stream ended: a ``response.failed`` if it never said how."""
        return self.fail(self._error or _ENDED_EARLY)

    def fail(self, error: object) -> list[bytes]:
        """End the stream with ``response.failed`` (``error``: an ErrorResponse or its error)."""
        if self.ended:
            return []
        self.ended = True
        response = dict(self.response or hold_response({}, model=self.model, created=self.created))
        response["status"] = "failed"
        response["error"] = response_error(error)
        if self.redact is not None:
            self.redact.error_object(response["error"])
        response["output"] = [self._done[index] for index in sorted(self._done)]
        self.response = response
        return [self._frame({"type": "response.failed", "response": response})]

    def _frame(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return encode_event(event)
