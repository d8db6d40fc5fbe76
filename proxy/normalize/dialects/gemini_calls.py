"""Gemini's function calls as OpenAI tool-call fragments, per candidate of one answer (sans-IO).

The Gemini API sends a call whole, ``{name, args}`` with ``args`` an object and no id. Vertex AI
with ``streamFunctionCallArguments`` sends its name first (``willContinue: true``), then pieces
``{partialArgs: [{jsonPath, stringValue | numberValue | boolValue | nullValue, willContinue}]}``
and a last part without ``willContinue``; a string goes on over the pieces of one path while
they say ``willContinue``. The call is announced when its name comes, and its arguments, as
one JSON object, once it is whole: a JSON path can name any member, so no prefix of the text is
final before then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from proxy.normalize.fields import make_call_id
from proxy.normalize.toolcalls import PENDING_MAX

# A member named by a JSON path: $.a.b, $.a[0], $['a b'].
_PATH_STEP: Final = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")

Path = tuple[str | int, ...]


class Unreadable(Exception):
    """Streamed arguments that cannot be put together into one JSON object."""


@dataclass(slots=True)
class _Partial:
    """A call whose arguments come in pieces (Vertex's ``streamFunctionCallArguments``)."""

    index: int
    args: dict[str, Any] = field(default_factory=dict)
    open: Path | None = None  # the member whose string value goes on in the next piece
    # The pieces of the string put at ``run`` last, joined into it once they have all come
    # (``settle``): joined piece by piece, the string so far would be copied for each.
    run: Path | None = None
    pieces: list[str] = field(default_factory=list)
    size: int = 0

    def apply(self, piece: dict[str, Any]) -> None:
        path = _json_path(piece.get("jsonPath"))
        if path is None:
            raise Unreadable(f"a tool call argument at the JSON path {piece.get('jsonPath')!r}")
        value: object
        if "stringValue" in piece:
            value = piece["stringValue"]
            if not isinstance(value, str):
                raise Unreadable("a tool call argument's stringValue that is no string")
            self.size += len(value)
            if self.size > PENDING_MAX:
                raise Unreadable("tool call arguments longer than the proxy keeps")
            if path == self.open == self.run:
                self.pieces.append(value)
                self.open = path if piece.get("willContinue") is True else None
                return
            self.settle()
            self.run, self.pieces = path, [value]
        elif "numberValue" in piece:
            value = piece["numberValue"]
        elif "boolValue" in piece:
            value = piece["boolValue"]
        elif "nullValue" in piece:
            value = None
        else:
            return  # a kind of value not known here
        if "stringValue" not in piece:
            self.settle()  # a later value at the same path is the one that stays
        _put(self.args, path, value)
        self.open = path if piece.get("willContinue") is True else None

    def settle(self) -> None:
        """Put the string that came in pieces whole at its path (its first piece holds its
        place there, in the order the paths came)."""
        if self.run is not None and len(self.pieces) > 1:
            _put(self.args, self.run, "".join(self.pieces))
        self.run, self.pieces = None, []


@dataclass(slots=True)
class Candidate:
    """One candidate's calls, announced with dense indexes from 0."""

    calls: int = 0  # calls announced: the next one's index
    pending: _Partial | None = None

    def take(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        """The tool_calls fragments for one ``functionCall`` part."""
        out = []
        name = call.get("name")
        if isinstance(name, str) and name:
            out += self.flush()
            call_id = call.get("id")
            index = self.calls
            announced: dict[str, Any] = {
                "index": index,
                "id": call_id if isinstance(call_id, str) and call_id else make_call_id(),
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            self.calls += 1
            out.append(announced)
            in_pieces = call.get("willContinue") is True or "partialArgs" in call
            if "args" in call or not in_pieces:
                args = call.get("args")
                announced["function"]["arguments"] = _dumps(args if isinstance(args, dict) else {})
                return out
            self.pending = _Partial(index)
        pending = self.pending
        if pending is None:
            return out  # pieces of no call announced: nothing to add them to
        pieces = call.get("partialArgs")
        if isinstance(pieces, list):
            for piece in pieces:
                if isinstance(piece, dict):
                    pending.apply(piece)
        if call.get("willContinue") is not True:
            out += self.flush()
        return out

    def flush(self) -> list[dict[str, Any]]:
        """The arguments of the call being put together, now that it is whole."""
        pending = self.pending
        if pending is None:
            return []
        self.pending = None
        pending.settle()
        return [{"index": pending.index, "function": {"arguments": _dumps(pending.args)}}]


def _dumps(args: dict[str, Any]) -> str:
    return orjson.dumps(args).decode()


def _json_path(text: object) -> Path | None:
    if not isinstance(text, str) or not text.startswith("$"):
        return None
    path: list[str | int] = []
    at = 1
    while at < len(text):
        step = _PATH_STEP.match(text, at)
        if step is None:
            return None
        name, index, quoted, double = step.groups()
        path.append(
            int(index)
            if index is not None
            else next(s for s in (name, quoted, double) if s is not None)
        )
        at = step.end()
    return tuple(path) or None


def _put(root: dict[str, Any], path: Path, value: object) -> None:
    node: Any = root
    for position, key in enumerate(path):
        if isinstance(node, list):
            if not isinstance(key, int) or key > len(node):
                # Elements come in order: a gap would be a null made up here.
                raise Unreadable("tool call arguments whose JSON paths disagree")
            if key == len(node):
                node.append(None)
            child = node[key]
        elif isinstance(key, int):
            raise Unreadable("tool call arguments whose JSON paths disagree")
        else:
            child = node.get(key)
        if position == len(path) - 1:
            node[key] = value
            return
        if not isinstance(child, dict | list):
            child = [] if isinstance(path[position + 1], int) else {}
            node[key] = child
        node = child
