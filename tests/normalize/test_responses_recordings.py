"""Our own Responses API answers (tests/fixtures/responses/) are OpenAI's: every Response and
every event validates against OpenAI's schema and the openai SDK's types, the streams say what
their completed Response says, and the pass-through holds the one with extras to the plain one.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.core.sse import SSEDecoder
from proxy.normalize.responses import PassthroughEvents, hold_response
from tests.support.replay import RESPONSES
from tests.support.schema import validate

SDK_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WHOLE = "contract.openai.responses.json"
TEXT = "contract.openai.responses.stream.sse"
CALL = "contract.openai.responses.stream.function-call.sse"
EXTRAS = "contract.openai.responses.stream.extras.sse"
# What the extras file adds to the text stream (its README): keys on each Response, and on
# each text delta, and events of a type the schema does not know.
RESPONSE_EXTRAS = {"billing", "store"}
NULL_EXTRAS = {"usage", "user"}
DELTA_EXTRAS = {"obfuscation"}
UNKNOWN_TYPES = {"keepalive"}


def events(name: str) -> list[tuple[str | None, dict[str, Any]]]:
    """A stream fixture's events: each one's ``event:`` field and its parsed data."""
    decoder = SSEDecoder()
    decoded = decoder.feed((RESPONSES / name).read_bytes()) + decoder.close()
    return [(event.event, orjson.loads(event.data)) for event in decoded]


def whole() -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads((RESPONSES / WHOLE).read_bytes())
    return body


def test_the_whole_response_is_openais() -> None:
    body = whole()
    validate(body, "Response")
    parsed = Response.model_validate(body)
    assert parsed.output_text == "Hello! It's nice to meet you."
    assert [item.type for item in parsed.output] == ["message"]
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}
    assert body["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}


@pytest.mark.parametrize("name", [TEXT, CALL])
def test_every_event_is_openais(name: str) -> None:
    stream = events(name)
    for field, event in stream:
        validate(event, "ResponseStreamEvent")
        SDK_EVENT.validate_python(event)
        assert field == event["type"]
    assert [event["sequence_number"] for _, event in stream] == list(range(len(stream)))
    kinds = [event["type"] for _, event in stream]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.completed") == 1


@pytest.mark.parametrize("name", [TEXT, CALL])
def test_the_stream_builds_its_completed_response(name: str) -> None:
    """The deltas join to their ``.done`` texts, the items done are the completed output, and
    the SDK's own accumulation takes every event (it raises on one that does not fit the items
    before it: an unknown output_index, a changed response id)."""
    stream = [event for _, event in events(name)]
    deltas: dict[tuple[str, str], str] = {}  # (the events' name before .delta, item id): text
    done: dict[tuple[str, str], object] = {}
    for event in stream:
        kind, _, step = event["type"].rpartition(".")
        if step == "delta":
            key = (kind, event["item_id"])
            deltas[key] = deltas.get(key, "") + event["delta"]
        elif step == "done" and "item_id" in event and "part" not in event:
            done[(kind, event["item_id"])] = event.get("text", event.get("arguments"))
    assert deltas == done
    completed = stream[-1]["response"]
    items = [event["item"] for event in stream if event["type"] == "response.output_item.done"]
    assert items == completed["output"]
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in stream:
        handled = state.handle_event(SDK_EVENT.validate_python(event))
    assert handled[-1].type == "response.completed"
    assert handled[-1].response.output_text == Response.model_validate(completed).output_text


def test_the_text_stream_answers_as_the_whole_response() -> None:
    completed = events(TEXT)[-1][1]["response"]
    assert (
        Response.model_validate(completed).output_text
        == Response.model_validate(whole()).output_text
    )
    assert completed["usage"] == whole()["usage"]


def test_the_function_call_comes_after_the_reasoning() -> None:
    completed = events(CALL)[-1][1]["response"]
    reasoning, call = completed["output"]
    assert reasoning["type"] == "reasoning" and reasoning["summary"]
    assert call["type"] == "function_call" and orjson.loads(call["arguments"]) == {
        "city": "Paris, France"
    }
    assert completed["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def _without_extras(event: dict[str, Any]) -> dict[str, Any]:
    plain = {key: value for key, value in event.items() if key not in DELTA_EXTRAS}
    response = plain.get("response")
    if isinstance(response, dict):
        plain["response"] = {
            key: value
            for key, value in response.items()
            if key not in RESPONSE_EXTRAS and not (key in NULL_EXTRAS and value is None)
        }
    return plain


def test_the_extras_are_only_the_listed_ones() -> None:
    extra = [event for _, event in events(EXTRAS) if event["type"] not in UNKNOWN_TYPES]
    assert len(extra) < len(events(EXTRAS)), "the extras stream has an event of an unknown type"
    stripped = [_without_extras(event) for event in extra]
    for number, event in enumerate(stripped):
        event["sequence_number"] = number
    assert stripped == [event for _, event in events(TEXT)]
    assert stripped != extra


def held(name: str) -> list[bytes]:
    stream = PassthroughEvents(model="client-model", created=1)
    out = [frame for _, event in events(name) for frame in stream.feed(event)]
    return out + stream.finish()


def test_the_pass_through_holds_the_extras_to_the_plain_stream() -> None:
    frames = held(EXTRAS)
    assert frames == held(TEXT)
    decoder = SSEDecoder()
    relayed = decoder.feed(b"".join(frames)) + decoder.close()
    for event in relayed:
        data = orjson.loads(event.data)
        validate(data, "ResponseStreamEvent")
        assert event.event == data["type"]
        assert data.get("response", {}).get("model", "client-model") == "client-model"


def test_the_pass_through_keeps_the_whole_response_but_its_model() -> None:
    body = whole()
    kept = hold_response(body, model="client-model", created=1)
    validate(kept, "Response")
    assert kept == {**body, "model": "client-model"}
