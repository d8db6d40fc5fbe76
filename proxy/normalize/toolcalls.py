"""One streamed choice's tool calls: upstream fragments in, canonical deltas out (sans-IO).

The canonical shape (docs/canonical-output.md section 2): a call is announced once, with its dense
index from 0, its ``id``, ``type`` and ``function.name``; its later fragments carry only the index
and more ``function.arguments``. Upstreams differ:

- TGI <= 2.0 sends one call object instead of an array;
- indexes may start at 1 (Anthropic's compatibility layer) or be missing (Mistral);
- continuations may repeat the id, the type or an empty name;
- arguments may come before the name (kept until it comes), or as parsed JSON;
- a call may have no id (one is made up).

Every such repair is noted as ``FIX_TOOL_CALLS`` in the caller's set of fixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.core.fix_names import FIX_TOOL_CALLS
from proxy.normalize.fields import make_call_id

# The most argument text kept for calls whose name has not come yet: one that never names
# itself would otherwise be buffered for as long as the stream lasts.
PENDING_MAX = 1024 * 1024


@dataclass(slots=True)
class _Call:
    index: int  # dense, from 0, per choice
    id: str | None
    emitted: bool = False
    pending: list[str] = field(default_factory=list)  # arguments seen before the name


class ToolCalls:
    """The tool calls of one choice of a stream, as its fragments arrive."""

    __slots__ = ("_calls", "_last", "_pending")

    def __init__(self) -> None:
        # By the upstream's index, else its id, else position: see ``_find``.
        self._calls: dict[object, _Call] = {}
        self._last: _Call | None = None
        # Characters of arguments kept for calls not yet named. What is left at the end is
        # dropped: TGI <= 2.0 ends with a nameless "</s>", its end-of-sequence token.
        self._pending = 0

    @property
    def emitted(self) -> bool:
        """Whether any call has been announced to the client (its finish is then
        ``tool_calls``)."""
        return any(call.emitted for call in self._calls.values())

    def take(self, raw: object, fixes: set[str]) -> list[dict[str, Any]]:
        """The canonical fragments for one delta's ``tool_calls`` (possibly none yet)."""
        if isinstance(raw, dict):
            raw = [raw]  # TGI <= 2.0 sends one object instead of an array
            fixes.add(FIX_TOOL_CALLS)
        if not isinstance(raw, list):
            return []
        out = []
        for position, fragment in enumerate(raw):
            if isinstance(fragment, dict):
                emitted = self._fragment(fragment, position, fixes)
                if emitted is not None:
                    out.append(emitted)
        return out

    def _fragment(
        self, fragment: dict[str, Any], position: int, fixes: set[str]
    ) -> dict[str, Any] | None:
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        name = function.get("name")
        arguments = function.get("arguments")
        if isinstance(arguments, dict | list):
            arguments = orjson.dumps(arguments).decode()  # some servers send parsed JSON
        if not isinstance(arguments, str):
            arguments = ""
        call_id = fragment.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = None

        call = self._find(fragment, call_id, position, fixes)
        if call.emitted:
            if call_id is not None or fragment.get("type") is not None or name is not None:
                fixes.add(FIX_TOOL_CALLS)  # continuations repeat id, type or an empty name
            if not arguments:
                return None
            return {"index": call.index, "function": {"arguments": arguments}}
        if not isinstance(name, str) or not name:
            # A call is announced by its name (docs/canonical-output.md section 2); keep its
            # arguments until then.
            if arguments:
                call.pending.append(arguments)
                self._pending += len(arguments)
                if self._pending > PENDING_MAX:
                    raise UpstreamProtocolError(
                        "The upstream sent tool call arguments without a function name"
                    )
            fixes.add(FIX_TOOL_CALLS)
            return None
        if call.pending:
            arguments = "".join(call.pending) + arguments
            self._pending -= sum(map(len, call.pending))
            call.pending.clear()
        call.emitted = True
        if call.id is None:
            call.id = make_call_id()
            fixes.add(FIX_TOOL_CALLS)
        return {
            "index": call.index,
            "id": call.id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    def _find(
        self, fragment: dict[str, Any], call_id: str | None, position: int, fixes: set[str]
    ) -> _Call:
        """The call a fragment belongs to, by the upstream's index, else its id, else order.

        Upstream indexes may start at 1 (Anthropic's compat layer) or be missing (Mistral):
        the client sees dense indexes from 0 in order of first appearance.
        """
        index = fragment.get("index")
        key: object
        if isinstance(index, int) and not isinstance(index, bool):
            key = ("index", index)
        elif call_id is not None:
            key = ("id", call_id)
        elif self._last is not None and position == 0:
            return self._last
        else:
            key = ("position", position, len(self._calls))
        call = self._calls.get(key)
        if call is None:
            if key != ("index", len(self._calls)):
                fixes.add(FIX_TOOL_CALLS)
            call = _Call(len(self._calls), call_id)
            self._calls[key] = call
        self._last = call
        return call
