"""A provider's own Responses API answers (OpenAI, Azure), held to the contract.

The answers are written after OpenAI's and Azure's: the extras they carry (``store``,
``billing``, ``usage: null`` while in progress, Azure's ``content_filters``, the deltas'
``obfuscation``) must go, the rest stay as they came, with the client's model name.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.core.errors import UpstreamProtocolError
from proxy.core.sse import Event
from proxy.normalize.fields import RequestContext
from proxy.normalize.responses import PassthroughEvents, hold_response, shapes
from proxy.normalize.responses.passthrough import metered_usage
from proxy.normalize.responses.present import PassthroughStream
from tests.normalize.responses_shapes import derive
from tests.support.schema import validate

SDK_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
MODEL = "client-model"

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [
        {
            "type": "output_text",
            "text": "Paris is sunny.",
            "annotations": [
                {
                    "type": "url_citation",
                    "url": "https://x.test",
                    "title": "Weather",
                    "start_index": 0,
                    "end_index": 5,
                    "content_filter_results": {},  # an Azure-style extra
                }
            ],
            "logprobs": [],
        }
    ],
}
REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Looked it up"}],
    "encrypted_content": "gAAAA",
}
SEARCH = {
    "id": "ws_1",
    "type": "web_search_call",
    "status": "completed",
    "action": {
        "type": "search",
        "query": "paris weather",
        "sources": [{"type": "url", "url": "https://x.test"}],
    },
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_1",
    "name": "weather",
    "arguments": "{}",
}
USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 9},
    "total_tokens": 42,
}
# As OpenAI answers (2025), with what its schema does not define.
OPENAI: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "background": False,
    "billing": {"payer": "developer"},
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "model": "gpt-5-2025-08-07",
    "output": [REASONING, SEARCH, MESSAGE, CALL],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "prompt_cache_key": None,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "safety_identifier": None,
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}, "verbosity": "medium"},
    "tool_choice": "auto",
    "tools": [
        {
            "type": "web_search",
            "filters": None,
            "search_context_size": "medium",
            "user_location": None,
        },
        {
            "type": "function",
            "name": "weather",
            "description": None,
            "parameters": {"type": "object"},
            "strict": True,
        },
    ],
    "top_logprobs": 0,
    "top_p": 1.0,
    "truncation": "disabled",
    "usage": USAGE,
    "user": None,
    "metadata": {},
    "content_filters": [{"blocked": False}],  # Azure's
}


def test_the_table_is_the_schemas() -> None:
    """shapes.py is generated: regenerate it (tests/normalize/responses_shapes.py) on a failure."""
    table, not_null = derive()
    assert table == shapes.TABLE
    assert not_null == shapes.NOT_NULL


def test_a_whole_response() -> None:
    original = copy.deepcopy(OPENAI)
    held = hold_response(OPENAI, model=MODEL, created=5)
    assert original == OPENAI  # the upstream's object is not changed in place
    validate(held, "Response")
    Response.model_validate(held)
    assert held["model"] == MODEL
    for extra in ("billing", "store", "content_filters", "user"):
        assert extra not in held
    assert "content_filter_results" not in held["output"][2]["content"][0]["annotations"][0]
    kept = {
        k: v
        for k, v in OPENAI.items()
        if k not in ("billing", "store", "content_filters", "user", "model")
    }
    kept["output"] = [REASONING, SEARCH, {**MESSAGE, "content": held["output"][2]["content"]}, CALL]
    assert {k: v for k, v in held.items() if k != "model"} == kept
    assert metered_usage(held) is not None and metered_usage(held).total_tokens == 42  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "check"),
    [
        pytest.param(
            {"output": [{"type": "future_item", "id": "x"}, MESSAGE]},
            lambda held: [item["type"] for item in held["output"]] == ["message"],
            id="unknown-item-dropped",
        ),
        pytest.param(
            {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
            lambda held: held["status"] == "incomplete",
            id="status-kept",
        ),
        pytest.param(
            {"usage": None},
            lambda held: "usage" not in held and metered_usage(held) is None,
            id="no-usage",
        ),
        pytest.param(
            {"tools": None, "id": None},
            lambda held: held["tools"] == [] and held["id"].startswith("resp_"),
            id="nulls",
        ),
    ],
)
def test_a_whole_response_repaired(change: dict[str, Any], check: Any) -> None:
    held = hold_response({**OPENAI, **change}, model=MODEL, created=5)
    validate(held, "Response")
    assert check(held)


def test_a_response_missing_what_is_required() -> None:
    held = hold_response(
        {"id": "resp_1", "status": "completed", "output": [MESSAGE]}, model=MODEL, created=7
    )
    validate(held, "Response")
    assert held["created_at"] == 7 and held["tools"] == [] and held["tool_choice"] == "auto"


def test_not_an_object() -> None:
    with pytest.raises(UpstreamProtocolError):
        hold_response([1], model=MODEL, created=1)


def in_progress() -> dict[str, Any]:
    return {**OPENAI, "status": "in_progress", "output": [], "usage": None}


def upstream_stream() -> list[dict[str, Any]]:
    """An OpenAI stream of a message, as it comes (sequence numbers its own)."""
    text = MESSAGE["content"][0]
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    where = {"item_id": "msg_1", "output_index": 0}
    return [
        {"type": "response.created", "sequence_number": 0, "response": in_progress()},
        {"type": "response.in_progress", "sequence_number": 1, "response": in_progress()},
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": {**MESSAGE, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 3,
            **where,
            "content_index": 0,
            "part": part,
        },
        {"type": "response.future.event", "sequence_number": 4, "whatever": 1},
        {
            "type": "response.output_text.delta",
            "sequence_number": 5,
            **where,
            "content_index": 0,
            "delta": "Paris ",
            "logprobs": [],
            "obfuscation": "abc",
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 6,
            **where,
            "content_index": 0,
            "delta": "is sunny.",
            "logprobs": [],
            "obfuscation": "d",
        },
        {
            "type": "response.output_text.done",
            "sequence_number": 7,
            **where,
            "content_index": 0,
            "text": text["text"],
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "sequence_number": 8,
            **where,
            "content_index": 0,
            "part": text,
        },
        {
            "type": "response.output_item.done",
            "sequence_number": 9,
            "output_index": 0,
            "item": MESSAGE,
        },
        {
            "type": "response.completed",
            "sequence_number": 10,
            "response": {**OPENAI, "output": [MESSAGE]},
        },
    ]


def relayed(
    events: list[dict[str, Any]], *, end: bool = True
) -> tuple[list[dict[str, Any]], PassthroughEvents]:
    stream = PassthroughEvents(model=MODEL, created=5)
    frames: list[bytes] = []
    for event in events:
        frames += stream.feed(event)
    if end:
        frames += stream.finish()
    out = []
    for frame in frames:
        head, data = frame.removesuffix(b"\n\n").split(b"\n")
        event = orjson.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + event["type"].encode()
        validate(event, "ResponseStreamEvent")
        out.append(event)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    kinds = [e["type"] for e in out]
    assert (
        sum(k in ("response.completed", "response.failed", "response.incomplete") for k in kinds)
        == 1
    )
    return out, stream


def test_a_stream() -> None:
    events, stream = relayed(upstream_stream())
    assert "response.future.event" not in [
        e["type"] for e in events
    ]  # unknown: dropped, renumbered
    assert len(events) == 10
    assert all("obfuscation" not in e for e in events)
    assert all(e["response"]["model"] == MODEL for e in events if "response" in e)
    assert "usage" not in events[0]["response"]  # OpenAI's usage: null while in progress
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        handled = state.handle_event(SDK_EVENT.validate_python(event))
    assert handled[-1].response.output_text == "Paris is sunny."
    assert stream.usage is not None and stream.usage.reasoning_tokens == 9


def test_nothing_after_the_terminal_event() -> None:
    events, _ = relayed([*upstream_stream(), upstream_stream()[5]])
    assert events[-1]["type"] == "response.completed"


def test_a_stream_that_stops_short() -> None:
    events, _ = relayed(upstream_stream()[:10])
    failed = events[-1]
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "server_error"
    (done,) = failed["response"]["output"]  # what was done before it stopped, held
    assert done["id"] == "msg_1" and done["content"][0]["text"] == "Paris is sunny."
    assert "content_filter_results" not in done["content"][0]["annotations"][0]
    Response.model_validate(failed["response"])


def test_an_error_event_then_the_end() -> None:
    error = {
        "type": "error",
        "sequence_number": 3,
        "code": "rate_limit_exceeded",
        "message": "slow down",
        "param": None,
    }
    events, _ = relayed([*upstream_stream()[:2], error])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert events[-1]["response"]["error"] == {
        "code": "rate_limit_exceeded",
        "message": "slow down",
    }


def test_a_failure_before_any_response() -> None:
    stream = PassthroughEvents(model=MODEL, created=5)
    (frame,) = stream.fail(
        {"error": {"message": "timed out", "type": "timeout_error", "param": None, "code": None}}
    )
    event = orjson.loads(frame.split(b"\n")[1].removeprefix(b"data: "))
    validate(event, "ResponseStreamEvent")
    assert event["sequence_number"] == 0 and event["response"]["model"] == MODEL
    assert stream.finish() == [] and stream.feed(upstream_stream()[0]) == []


def test_a_stream_that_ends_without_its_terminal_event_is_a_failure_told_and_counted() -> None:
    stream = PassthroughStream(RequestContext(endpoint="responses", model=MODEL, created=5))
    frames = [f for event in upstream_stream()[:3] for f in stream.feed(Event(orjson.dumps(event)))]
    assert frames and stream.error is None
    (last,) = stream.finish()
    assert b"response.failed" in last
    assert isinstance(stream.error, UpstreamProtocolError)  # the exchange's failure: counted


@pytest.mark.parametrize("details", ["x", [1], 3])
def test_usage_details_of_the_wrong_type_are_no_counts(details: object) -> None:
    usage = metered_usage(
        {
            "usage": {
                "input_tokens": 3,
                "output_tokens": 4,
                "total_tokens": 7,
                "input_tokens_details": details,
                "output_tokens_details": details,
            }
        }
    )
    assert usage is not None and (usage.cached_tokens, usage.reasoning_tokens) == (0, 0)
