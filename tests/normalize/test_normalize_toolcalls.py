"""``ToolCalls``: one streamed choice's tool-call fragments in, canonical deltas out.

Each case is the ``tool_calls`` values of successive deltas, what the client must get for each,
and whether a repair was noted. The recorded streams (test_golden_files) cover the same quirks
end to end; this table pins each one down alone.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from proxy.core.fix_names import FIX_TOOL_CALLS
from proxy.core.sse import Event
from proxy.core.usage import estimated_usage
from proxy.normalize import RequestContext, StreamNormalizer
from proxy.normalize.toolcalls import ToolCalls

MADE_UP = "<made up>"  # an id the proxy had to invent: checked for its shape, not its value


def announce(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def more(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


def upstream(
    index: object = None, call_id: object = None, name: object = None, arguments: object = None
) -> dict[str, Any]:
    fragment: dict[str, Any] = {}
    if index is not None:
        fragment["index"] = index
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    function = {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}
    if function:
        fragment["function"] = function
    return fragment


CASES: list[tuple[str, list[object], list[list[dict[str, Any]]], bool]] = [
    (
        "openai: announced with its id and name, then arguments by index",
        [
            [upstream(0, "call_a", "get_weather", "")],
            [upstream(0, arguments='{"city":')],
            [upstream(0, arguments='"Paris"}')],
        ],
        [[announce(0, "call_a", "get_weather")], [more(0, '{"city":')], [more(0, '"Paris"}')]],
        False,
    ),
    (
        "two calls in one chunk keep their order",
        [[upstream(0, "call_a", "f", "{}"), upstream(1, "call_b", "g", "{}")]],
        [[announce(0, "call_a", "f", "{}"), announce(1, "call_b", "g", "{}")]],
        False,
    ),
    (
        "TGI <= 2.0: one object instead of an array",
        [upstream(0, "call_a", "f", "{}")],
        [[announce(0, "call_a", "f", "{}")]],
        True,
    ),
    (
        "Anthropic's compatibility layer: indexes from 1 become dense from 0",
        [[upstream(1, "call_a", "f", "")], [upstream(1, arguments="{}")]],
        [[announce(0, "call_a", "f")], [more(0, "{}")]],
        True,
    ),
    (
        "Mistral: no index, whole calls told apart by id",
        [[upstream(None, "call_a", "f", "{}")], [upstream(None, "call_b", "g", "{}")]],
        [[announce(0, "call_a", "f", "{}")], [announce(1, "call_b", "g", "{}")]],
        True,
    ),
    (
        "no index and no id: a continuation belongs to the last call",
        [[upstream(None, None, "f", "{")], [upstream(None, None, None, "}")]],
        [[announce(0, MADE_UP, "f", "{")], [more(0, "}")]],
        True,
    ),
    (
        "arguments before the name are held, then sent with the announcement",
        [[upstream(0, "call_a", None, '{"a"')], [upstream(0, None, "f", ":1}")]],
        [[], [announce(0, "call_a", "f", '{"a":1}')]],
        True,
    ),
    (
        "no id: one is made up",
        [[upstream(0, None, "f", "{}")]],
        [[announce(0, MADE_UP, "f", "{}")]],
        True,
    ),
    (
        "arguments sent as parsed JSON become a JSON string",
        [[upstream(0, "call_a", "f", {"city": "Paris"})]],
        [[announce(0, "call_a", "f", '{"city":"Paris"}')]],
        False,
    ),
    (
        "continuations that repeat the id and an empty name; an empty one says nothing",
        [
            [upstream(0, "call_a", "f", "")],
            [upstream(0, "call_a", "", "{}")],
            [upstream(0, "call_a", "", "")],
        ],
        [[announce(0, "call_a", "f")], [more(0, "{}")], []],
        True,
    ),
    (
        "what is no call at all is ignored",
        ["not a list", [None, 3, "x"], []],
        [[], [], []],
        False,
    ),
]


@pytest.mark.parametrize(
    ("deltas", "expected", "fixed"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_tool_call_fragments(
    deltas: list[object], expected: list[list[dict[str, Any]]], fixed: bool
) -> None:
    calls = ToolCalls()
    fixes: set[str] = set()
    got = [calls.take(delta, fixes) for delta in deltas]
    for fragments in got:
        for fragment in fragments:
            if re.fullmatch(r"call_[0-9A-Za-z]{24}", fragment.get("id", "")):
                fragment["id"] = MADE_UP
    assert got == expected
    assert (FIX_TOOL_CALLS in fixes) is fixed
    assert calls.emitted is any(map(bool, expected))


def test_a_call_counts_as_emitted_only_once_announced() -> None:
    calls = ToolCalls()
    fixes: set[str] = set()
    assert not calls.emitted
    calls.take([upstream(0, "call_a", None, "{")], fixes)
    assert not calls.emitted  # its arguments are held until its name comes
    calls.take([upstream(0, None, "f", "}")], fixes)
    assert calls.emitted


def test_an_estimate_counts_the_arguments_the_client_got() -> None:
    """With no usage from the upstream, the completion estimate counts what the client
    received: here 400 characters of arguments, in the announcement and one continuation
    (arguments held before the name count once, when they go out)."""
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000, prompt="8 chars.")
    normalizer = StreamNormalizer(ctx)
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [
        {"role": "assistant", "tool_calls": [upstream(0, "call_a", None, "a" * 100)]},
        {"tool_calls": [upstream(0, None, "f", "b" * 100)]},
        {"tool_calls": [upstream(0, arguments="c" * 200)]},
    ]
    for delta in deltas:
        chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        normalizer.feed(Event(orjson.dumps(chunk)))
    normalizer.feed(Event(b"[DONE]"))
    assert normalizer.ended and normalizer.error is None
    assert normalizer.usage == estimated_usage(8, 400, 2)
    assert normalizer.usage.completion_tokens == 100
