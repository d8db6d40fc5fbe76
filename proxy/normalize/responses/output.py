"""An answer's output items as its chat deltas arrive, and the Responses events that tell them.

One ``Output`` serves both shapes of an answer: the stream (``stream.py``) writes every event it
returns, the whole answer (``whole.py``) feeds it the complete message and keeps only the
items, so a streamed Response and a whole one are built by the same rules.

Items open in the order their text comes, as OpenAI's own streams do: a reasoning item, then
a message, then function calls. A reasoning item or a message is closed when another item
opens (OpenAI streams one at a time, and clients such as Codex follow the item in progress); a
function call stays open until the answer finishes, since parallel calls' fragments may
interleave. Text for a kind already closed opens a new item of that kind: nothing is lost.

Reasoning text becomes a reasoning item's *summary* (``summary_text`` parts and the
``response.reasoning_summary_*`` events): that is what the Agents SDK makes of a chat
model's ``reasoning_content``, and what clients show (Codex shows raw ``reasoning_text`` only
when configured to).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from proxy.normalize.responses.echo import Status

Event = dict[str, Any]  # one Responses event, without its sequence_number yet


def make_id(prefix: str) -> str:
    """An id in OpenAI's style: ``resp_``, ``msg_``, ``fc_`` or ``rs_`` and 48 hex digits."""
    return f"{prefix}_{secrets.token_hex(24)}"


def outcome(finish_reason: object) -> tuple[Status, str | None]:
    """The Response status for a chat finish_reason, and the reason when it is incomplete."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


@dataclass(slots=True)
class _Reasoning:
    index: int
    id: str = field(default_factory=lambda: make_id("rs"))
    text: list[str] = field(default_factory=list)

    def item(self, status: str | None = None) -> dict[str, Any]:
        # Reasoning items carry no status in OpenAI's output; ``status`` is accepted and unused.
        summary = [{"type": "summary_text", "text": "".join(self.text)}] if self.text else []
        return {"id": self.id, "type": "reasoning", "summary": summary}

    def opened(self) -> list[Event]:
        return [
            _added(self.index, {"id": self.id, "type": "reasoning", "summary": []}),
            {
                **self._where("response.reasoning_summary_part.added"),
                "part": {"type": "summary_text", "text": ""},
            },
        ]

    def delta(self, text: str) -> Event:
        self.text.append(text)
        return {**self._where("response.reasoning_summary_text.delta"), "delta": text}

    def closed(self, status: str) -> list[Event]:
        whole = "".join(self.text)
        return [
            {**self._where("response.reasoning_summary_text.done"), "text": whole},
            {
                **self._where("response.reasoning_summary_part.done"),
                "part": {"type": "summary_text", "text": whole},
            },
            _done(self.index, self.item()),
        ]

    def _where(self, kind: str) -> Event:
        return {"type": kind, "item_id": self.id, "output_index": self.index, "summary_index": 0}


@dataclass(slots=True)
class _Part:
    kind: str  # "output_text" or "refusal"
    index: int  # content_index
    text: list[str] = field(default_factory=list)

    def value(self) -> dict[str, Any]:
        whole = "".join(self.text)
        if self.kind == "refusal":
            return {"type": "refusal", "refusal": whole}
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": whole}


@dataclass(slots=True)
class _Message:
    index: int
    id: str = field(default_factory=lambda: make_id("msg"))
    parts: list[_Part] = field(default_factory=list)

    def item(self, status: str) -> dict[str, Any]:
        content = [part.value() for part in self.parts]
        return {
            "id": self.id,
            "type": "message",
            "status": status,
            "content": content,
            "role": "assistant",
        }

    def opened(self) -> list[Event]:
        return [_added(self.index, self.item("in_progress"))]

    def delta(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        part = next((part for part in self.parts if part.kind == kind), None)
        if part is None:
            part = _Part(kind, len(self.parts))
            self.parts.append(part)
            events.append(
                {**self._where("response.content_part.added", part), "part": part.value()}
            )
        part.text.append(text)
        if kind == "refusal":
            events.append({**self._where("response.refusal.delta", part), "delta": text})
        else:
            events.append(
                {**self._where("response.output_text.delta", part), "delta": text, "logprobs": []}
            )
        return events

    def closed(self, status: str) -> list[Event]:
        events: list[Event] = []
        for part in self.parts:
            value = part.value()
            if part.kind == "refusal":
                events.append(
                    {**self._where("response.refusal.done", part), "refusal": value["refusal"]}
                )
            else:
                done = self._where("response.output_text.done", part)
                events.append({**done, "text": value["text"], "logprobs": []})
            events.append({**self._where("response.content_part.done", part), "part": value})
        events.append(_done(self.index, self.item(status)))
        return events

    def _where(self, kind: str, part: _Part) -> Event:
        return {
            "type": kind,
            "item_id": self.id,
            "output_index": self.index,
            "content_index": part.index,
        }


@dataclass(slots=True)
class _Call:
    index: int
    call_id: str
    name: str
    id: str = field(default_factory=lambda: make_id("fc"))
    arguments: list[str] = field(default_factory=list)

    def item(self, status: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function_call",
            "status": status,
            "arguments": "".join(self.arguments),
            "call_id": self.call_id,
            "name": self.name,
        }

    def opened(self) -> list[Event]:
        return [_added(self.index, self.item("in_progress"))]

    def delta(self, text: str) -> Event:
        self.arguments.append(text)
        return {**self._where("response.function_call_arguments.delta"), "delta": text}

    def closed(self, status: str) -> list[Event]:
        done = self._where("response.function_call_arguments.done")
        return [
            {**done, "name": self.name, "arguments": "".join(self.arguments)},
            _done(self.index, self.item(status)),
        ]

    def _where(self, kind: str) -> Event:
        return {"type": kind, "item_id": self.id, "output_index": self.index}


_Item = _Reasoning | _Message | _Call


def _added(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _done(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


class Output:
    """The output items of one answer; each method returns the events it causes."""

    __slots__ = ("_calls", "_closed", "_items", "_text", "finished")

    def __init__(self) -> None:
        self._items: list[_Item] = []
        self._closed: dict[int, str] = {}  # output_index -> the status it was closed with
        self._text: _Reasoning | _Message | None = None  # the open reasoning item or message
        self._calls: dict[int, _Call] = {}  # by the chat tool call's index
        self.finished = False

    def reasoning(self, text: object) -> list[Event]:
        if not isinstance(text, str) or not text or self.finished:
            return []
        events: list[Event] = []
        item = self._text
        if not isinstance(item, _Reasoning):
            events += self._close_text()
            item = _Reasoning(len(self._items))
            events += self._open(item)
            self._text = item
        events.append(item.delta(text))
        return events

    def content(self, text: object, kind: str = "output_text") -> list[Event]:
        """Message text; ``kind`` "refusal" for a refusal's."""
        if not isinstance(text, str) or not text or self.finished:
            return []
        events: list[Event] = []
        item = self._text
        if not isinstance(item, _Message):
            events += self._close_text()
            item = _Message(len(self._items))
            events += self._open(item)
            self._text = item
        return events + item.delta(kind, text)

    def call(self, fragment: object) -> list[Event]:
        """One canonical tool call fragment (docs/canonical-output.md section 2): the first of
        each call carries its id and name, the later ones more arguments."""
        if not isinstance(fragment, dict) or self.finished:
            return []
        index = fragment.get("index", 0)
        function = fragment.get("function") or {}
        arguments = function.get("arguments") if isinstance(function, dict) else None
        events: list[Event] = []
        call = self._calls.get(index)
        if call is None:
            name = function.get("name") if isinstance(function, dict) else None
            call_id = fragment.get("id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                return []  # the normalizer announces every call with both; nothing to open
            events += self._close_text()
            call = _Call(len(self._items), call_id, name)
            events += self._open(call)
            self._calls[index] = call
        if isinstance(arguments, str) and arguments:
            events.append(call.delta(arguments))
        return events

    def finish(self, status: Status) -> list[Event]:
        """Close every open item: as ``incomplete`` when the answer was cut off."""
        if self.finished:
            return []
        self.finished = True
        item_status = "incomplete" if status == "incomplete" else "completed"
        events: list[Event] = []
        for item in self._items:
            if item.index not in self._closed:
                events += self._close(item, item_status)
        self._text = None
        return events

    def items(self) -> list[dict[str, Any]]:
        """Every item as it stands; one still open (a failed answer's) as ``incomplete``."""
        return [item.item(self._closed.get(item.index, "incomplete")) for item in self._items]

    def _open(self, item: _Item) -> list[Event]:
        self._items.append(item)
        return item.opened()

    def _close(self, item: _Item, status: str) -> list[Event]:
        self._closed[item.index] = status
        return item.closed(status)

    def _close_text(self) -> list[Event]:
        item, self._text = self._text, None
        return [] if item is None else self._close(item, "completed")
