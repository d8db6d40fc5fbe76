"""Canonical chat answers made Responses, whole and streamed.

The answers are made by hand, and taken from the goldens: each recorded single-choice chat
fixture is run through the proxy's own normalizer (``StreamNormalizer``, ``normalize_response``)
and its canonical output converted. Every Response and every event validates against OpenAI's
schema with strict keys and parses with openai-python's own types; a stream is also driven
through the SDK's ``responses.stream()`` accumulator (``ResponseStreamState``). Sequence
numbers count from 0 without gaps, there is exactly one terminal event, the texts are the chat
answer's, and the streamed terminal Response is ``response_body`` of the same answer.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.responses import (
    Echo,
    ResponsesEvents,
    chat_body,
    make_id,
    response_body,
    responses_frames,
)
from tests.support.replay import CLIENT_MODEL, Golden, goldens, parse_frames
from tests.support.schema import validate

CREATED = 1_700_000_000
SDK_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
SINGLE = [g for g in goldens() if g.endpoint == "chat" and g.n <= 1 and len(g.data["choices"]) <= 1]
STREAMS = [g for g in SINGLE if g.stream]
WHOLES = [g for g in SINGLE if not g.stream and g.data["outcome"] == "ok"]


def events_of(frames: list[bytes]) -> list[dict[str, Any]]:
    """The events of a Responses stream's frames, their framing checked."""
    body = b"".join(frames)
    assert body.endswith(b"\n\n") and b"[DONE]" not in body
    events = []
    for block in body[:-2].split(b"\n\n"):
        head, data = block.split(b"\n")
        assert data.startswith(b"data: ") and b"\r" not in data
        event = orjson.loads(data[6:])
        assert head == b"event: " + event["type"].encode()
        events.append(event)
    return events


def check_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Check a whole Responses stream; returns its terminal Response."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    kinds = [e["type"] for e in events]
    assert sum(kind in TERMINAL for kind in kinds) == 1 and kinds[-1] in TERMINAL, kinds
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        validate(event, "ResponseStreamEvent")
        handled = state.handle_event(SDK_EVENT.validate_python(event))
    # What the deltas spell is what the .done events and the terminal Response say.
    spelled: dict[tuple[str, str], list[str]] = {}
    done: dict[tuple[str, str], str] = {}
    for event in events:
        kind = event["type"]
        for name in ("output_text", "refusal", "reasoning_summary_text", "function_call_arguments"):
            if kind == f"response.{name}.delta":
                spelled.setdefault((event["item_id"], name), []).append(event["delta"])
            elif kind == f"response.{name}.done":
                value = event.get("text", event.get("refusal", event.get("arguments")))
                done[(event["item_id"], name)] = value
    terminal = events[-1]["response"]
    Response.model_validate(terminal)
    if terminal["status"] == "completed":
        # What ``responses.stream()``'s get_final_response() gives the SDK's user.
        assert handled[-1].response.output_text == (texts(terminal)["content"] or "")
    finished = {key: "".join(parts) for key, parts in spelled.items()}
    assert all(finished.get(key, "") == text for key, text in done.items())
    if terminal["status"] != "failed":
        assert finished.keys() <= done.keys()  # all finished; a failed stream leaves them open
    return dict(terminal)


def texts(response: dict[str, Any]) -> dict[str, Any]:
    """What an answer says, by kind, from a Response's output items."""
    out: dict[str, Any] = {"content": [], "refusal": [], "reasoning": [], "calls": []}
    for item in response["output"]:
        if item["type"] == "message":
            for part in item["content"]:
                if part["type"] == "output_text":
                    out["content"].append(part["text"])
                else:
                    out["refusal"].append(part["refusal"])
        elif item["type"] == "reasoning":
            out["reasoning"] += [part["text"] for part in item["summary"]]
        else:
            out["calls"].append((item["call_id"], item["name"], item["arguments"]))
    return {
        **{key: "".join(out[key]) or None for key in ("content", "refusal", "reasoning")},
        "calls": out["calls"],
    }


def without_ids(response: dict[str, Any]) -> dict[str, Any]:
    copy = orjson.loads(orjson.dumps(response))
    for item in copy["output"]:
        item["id"] = item["type"]
    return dict(copy)


def completion_of(frames: list[bytes]) -> dict[str, Any]:
    """The canonical chat completion a canonical chat stream spells (choice 0)."""
    parts: dict[str, list[str]] = {"content": [], "reasoning_content": [], "refusal": []}
    calls: list[dict[str, Any]] = []
    finish = None
    usage = None
    tier = None
    for payload in parse_frames(b"".join(frames)):
        if payload == "[DONE]" or "error" in payload:
            continue
        usage = payload.get("usage", usage)
        tier = payload.get("service_tier", tier)
        for choice in payload["choices"]:
            delta = choice["delta"]
            for key, found in parts.items():
                if delta.get(key):
                    found.append(delta[key])
            for fragment in delta.get("tool_calls", []):
                if fragment["index"] == len(calls):
                    calls.append(
                        {
                            "id": fragment["id"],
                            "type": "function",
                            "function": {**fragment["function"]},
                        }
                    )
                    calls[-1]["function"].setdefault("arguments", "")
                else:
                    calls[fragment["index"]]["function"]["arguments"] += fragment["function"][
                        "arguments"
                    ]
            finish = choice["finish_reason"] or finish
    message: dict[str, Any] = {key: "".join(found) or None for key, found in parts.items()}
    if calls:
        message["tool_calls"] = calls
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
        "service_tier": tier,
    }


def converted(
    frames: list[bytes], echo: Echo | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The streamed terminal Response and the whole one, for canonical chat frames; both
    conversions of a stream (event by event, and all frames at once) must agree."""
    echo = echo or Echo()
    rid = make_id("resp")
    stream = ResponsesEvents(echo, response_id=rid, created=CREATED, model=CLIENT_MODEL)
    out = stream.start()
    for frame in frames:
        out += stream.frame(frame)
    events = events_of(out)
    terminal = check_events(events)
    at_once = events_of(
        responses_frames(frames, echo, response_id=rid, created=CREATED, model=CLIENT_MODEL)
    )
    assert [e["type"] for e in at_once] == [e["type"] for e in events]
    assert without_ids(at_once[-1]["response"]) == without_ids(terminal)
    whole = response_body(
        completion_of(frames), echo, response_id=rid, created=CREATED, model=CLIENT_MODEL
    )
    validate(whole, "Response")
    Response.model_validate(whole)
    return terminal, whole


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": CLIENT_MODEL,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = chunk(
    usage={
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "total_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
)
DONE = b"data: [DONE]\n\n"
ROLE = {"role": "assistant"}
FIRST_CALL = {
    "index": 0,
    "id": "call_a",
    "type": "function",
    "function": {"name": "weather", "arguments": ""},
}

# (chat frames, status, incomplete reason, what the Response's items say)
ANSWERS = [
    pytest.param(
        [
            chunk({**ROLE, "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            USAGE,
            DONE,
        ],
        "completed",
        None,
        {"content": "Hello", "refusal": None, "reasoning": None, "calls": []},
        id="text",
    ),
    pytest.param(
        [
            chunk({**ROLE, "reasoning_content": "Think"}),
            chunk({"reasoning_content": "ing"}),
            chunk({"content": "Yes"}),
            chunk({}, "stop"),
            USAGE,
            DONE,
        ],
        "completed",
        None,
        {"content": "Yes", "refusal": None, "reasoning": "Thinking", "calls": []},
        id="reasoning",
    ),
    pytest.param(
        [
            chunk({**ROLE, "content": "Let me look."}),
            chunk({"tool_calls": [FIRST_CALL]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "time", "arguments": "{}"},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ':"Paris"}'}}]}),
            chunk({}, "tool_calls"),
            USAGE,
            DONE,
        ],
        "completed",
        None,
        {
            "content": "Let me look.",
            "refusal": None,
            "reasoning": None,
            "calls": [("call_a", "weather", '{"city":"Paris"}'), ("call_b", "time", "{}")],
        },
        id="interleaved-calls",
    ),
    pytest.param(
        [
            chunk({**ROLE, "refusal": "I can't"}),
            chunk({"refusal": " help."}),
            chunk({}, "stop"),
            USAGE,
            DONE,
        ],
        "completed",
        None,
        {"content": None, "refusal": "I can't help.", "reasoning": None, "calls": []},
        id="refusal",
    ),
    pytest.param(
        [chunk({**ROLE, "content": "Once upon"}), chunk({}, "length"), USAGE, DONE],
        "incomplete",
        "max_output_tokens",
        {"content": "Once upon", "refusal": None, "reasoning": None, "calls": []},
        id="length",
    ),
    pytest.param(
        [chunk({**ROLE, "reasoning_content": "Hmm"}), chunk({}, "length"), USAGE, DONE],
        "incomplete",
        "max_output_tokens",
        {"content": None, "refusal": None, "reasoning": "Hmm", "calls": []},
        id="length-while-reasoning",
    ),
    pytest.param(
        [chunk({**ROLE, "content": "Bad"}), chunk({}, "content_filter"), USAGE, DONE],
        "incomplete",
        "content_filter",
        {"content": "Bad", "refusal": None, "reasoning": None, "calls": []},
        id="content-filter",
    ),
    pytest.param(
        [chunk({**ROLE, "content": ""}), chunk({}, "stop"), USAGE, DONE],
        "completed",
        None,
        {"content": None, "refusal": None, "reasoning": None, "calls": []},
        id="empty",
    ),
]


@pytest.mark.parametrize(("frames", "status", "reason", "said"), ANSWERS)
def test_answers(
    frames: list[bytes], status: str, reason: str | None, said: dict[str, Any]
) -> None:
    terminal, whole = converted(frames)
    assert terminal["status"] == whole["status"] == status
    assert (
        terminal["incomplete_details"]
        == whole["incomplete_details"]
        == (None if reason is None else {"reason": reason})
    )
    assert texts(terminal) == texts(whole) == said
    assert without_ids(terminal) == without_ids(whole)
    assert whole["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 7},
        "total_tokens": 30,
    }


def test_ids_and_items() -> None:
    terminal, _ = converted(ANSWERS[2].values[0])
    message, first, second = terminal["output"]
    assert terminal["id"].startswith("resp_") and terminal["created_at"] == CREATED
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert first["id"].startswith("fc_") and first["call_id"] == "call_a"
    assert len({message["id"], first["id"], second["id"]}) == 3
    reasoning, _ = converted(ANSWERS[1].values[0])
    assert reasoning["output"][0]["id"].startswith("rs_")


def test_a_cut_off_answer_marks_what_was_open() -> None:
    terminal, _ = converted(
        [
            chunk({**ROLE, "content": "Ok"}),
            chunk({"tool_calls": [FIRST_CALL]}),
            chunk({}, "length"),
            USAGE,
            DONE,
        ]
    )
    assert [item["status"] for item in terminal["output"]] == ["completed", "incomplete"]


def test_order_of_events() -> None:
    frames = ANSWERS[1].values[0]
    stream = ResponsesEvents(Echo(), response_id="resp_1", created=CREATED, model="m")
    events = events_of([out for frame in frames for out in stream.frame(frame)])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert (
        events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    )
    assert [e["output_index"] for e in events[2:-1]] == [0] * 7 + [1] * 6


def test_text_after_a_call_opens_a_new_message() -> None:
    """Out of the usual order, nothing is lost: each kind reopens as a new item."""
    terminal, _ = converted(
        [
            chunk({**ROLE, "content": "A"}),
            chunk({"reasoning_content": "R"}),
            chunk({"content": "B"}),
            chunk({"tool_calls": [FIRST_CALL]}),
            chunk({"content": "C"}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            chunk({}, "tool_calls"),
            USAGE,
            DONE,
        ]
    )
    assert [item["type"] for item in terminal["output"]] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "message",
    ]
    assert texts(terminal) == {
        "content": "ABC",
        "refusal": None,
        "reasoning": "R",
        "calls": [("call_a", "weather", "{}")],
    }


def test_failure_after_the_first_byte() -> None:
    stream = ResponsesEvents(Echo(), response_id="resp_1", created=CREATED, model="m")
    out = stream.start() + stream.frame(chunk({**ROLE, "content": "Hal"}))
    error = {
        "error": {
            "message": "upstream dropped",
            "type": "upstream_error",
            "param": None,
            "code": None,
        }
    }
    out += stream.frame(b"data: " + orjson.dumps(error) + b"\n\n")
    assert stream.ended
    assert stream.end() == [] and stream.fail(error) == [] and stream.chunk({"choices": []}) == []
    events = events_of(out)
    terminal = check_events(events)
    assert "response.output_item.done" not in [e["type"] for e in events]  # nothing half done
    assert terminal["status"] == "failed"
    assert terminal["error"] == {"code": "server_error", "message": "upstream dropped"}
    assert terminal["output"][0]["status"] == "incomplete"
    assert texts(terminal)["content"] == "Hal"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"type": "rate_limit_error", "message": "slow down"}, "rate_limit_exceeded"),
        (
            {"type": "invalid_request_error", "code": "invalid_image_url", "message": "bad"},
            "invalid_image_url",
        ),
        ({"type": "upstream_error", "code": "weird", "message": "x"}, "server_error"),
    ],
)
def test_error_codes(error: dict[str, Any], code: str) -> None:
    stream = ResponsesEvents(Echo(), response_id="resp_1", created=CREATED, model="m")
    terminal = check_events(events_of(stream.fail(error)))
    assert terminal["error"]["code"] == code


def test_frames_cut_short_fail() -> None:
    out = responses_frames(
        [chunk({**ROLE, "content": "x"})], Echo(), response_id="resp_1", created=1, model="m"
    )
    assert check_events(events_of(out))["status"] == "failed"


def test_the_echo_is_in_every_response() -> None:
    _, echo = chat_body(
        {
            "model": "m",
            "input": "Hi",
            "instructions": "Be brief",
            "metadata": {"a": "b"},
            "temperature": 0.3,
        }
    )
    terminal, whole = converted(ANSWERS[0].values[0], echo)
    for response in (terminal, whole):
        assert response["instructions"] == "Be brief" and response["metadata"] == {"a": "b"}
        assert response["temperature"] == 0.3 and response["model"] == CLIENT_MODEL


# -- the goldens' canonical answers ----------------------------------------------------------


def canonical_frames(golden: Golden) -> list[bytes]:
    ctx = RequestContext(
        endpoint="chat",
        model=CLIENT_MODEL,
        created=CREATED,
        include_usage=True,  # as the lead's Responses path asks (the Response carries usage)
        dialect=golden.data["dialect"],
    )
    decoder = golden.decoder()
    normalizer = StreamNormalizer(ctx)
    frames: list[bytes] = []
    for event in itertools.chain(decoder.feed(golden.body()), decoder.close()):
        frames += normalizer.feed(event)
    return frames + normalizer.finish()


@pytest.mark.parametrize("golden", STREAMS, ids=lambda g: g.name)
def test_golden_streams(golden: Golden) -> None:
    frames = canonical_frames(golden)
    terminal, whole = converted(frames)
    want = next(iter(golden.data["choices"].values()), None)
    if golden.data["outcome"] == "error":
        assert terminal["status"] == "failed"
        if golden.data["error"]["message"] is not None:
            assert terminal["error"]["message"] == golden.data["error"]["message"]
    else:
        assert without_ids(terminal) == without_ids(whole)
        assert terminal["status"] == (
            "incomplete" if want["finish_reason"] in ("length", "content_filter") else "completed"
        )
        usage = golden.data["usage"]
        if usage is not None:
            assert terminal["usage"]["input_tokens"] == usage["prompt_tokens"]
            assert terminal["usage"]["output_tokens"] == usage["completion_tokens"]
            assert terminal["usage"]["total_tokens"] == usage["total_tokens"]
    if want is not None:
        said = texts(terminal)
        assert said["content"] == (want["content"] or None)
        assert said["reasoning"] == (want["reasoning_content"] or None)
        assert said["refusal"] == (want["refusal"] or None)
        assert [(c[1], c[2]) for c in said["calls"]] == [
            (c["name"], c["arguments"]) for c in want["tool_calls"]
        ]


@pytest.mark.parametrize("golden", WHOLES, ids=lambda g: g.name)
def test_golden_wholes(golden: Golden) -> None:
    ctx = RequestContext(
        endpoint="chat", model=CLIENT_MODEL, created=CREATED, dialect=golden.data["dialect"]
    )
    chat = orjson.loads(normalize_response(golden.body(), ctx).body)
    response = response_body(
        chat, Echo(), response_id=make_id("resp"), created=CREATED, model=CLIENT_MODEL
    )
    validate(response, "Response")
    assert Response.model_validate(response).output_text == (
        chat["choices"][0]["message"]["content"] or ""
    )
    want = golden.data["choices"]["0"]
    said = texts(response)
    assert said["content"] == (want["content"] or None)
    assert said["reasoning"] == (want["reasoning_content"] or None)
    assert [(c[1], c[2]) for c in said["calls"]] == [
        (c["name"], c["arguments"]) for c in want["tool_calls"]
    ]
    if golden.data["usage"] is not None:
        assert response["usage"]["total_tokens"] == golden.data["usage"]["total_tokens"]


def test_the_goldens_cover_each_kind() -> None:
    names = {g.name for g in STREAMS}
    for name in (
        "deepseek.chat.stream.reasoning.sse",
        "groq.chat.stream.tool-call.sse",
        "openai.chat.stream.length.sse",
        "openai.chat.stream.refusal.sse",
        "openrouter.chat.stream.error.sse",
    ):
        assert name in names
    assert len(STREAMS) > 40 and len(WHOLES) > 15
