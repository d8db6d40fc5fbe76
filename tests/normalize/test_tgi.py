"""``api: tgi``: an OpenAI completions request as TGI's ``/generate`` and ``/generate_stream``
request, field by field, the refusals, and TGI's token events and bodies as OpenAI's (the
recorded stream is replayed against its golden by test_normalize_fixtures.py; these are the
cases it does not show, written from TGI's docs/openapi.json)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, UpstreamError, to_openai_error
from proxy.core.request import parse_request
from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.dialects import DIALECTS, RequestOptions, upstream_request
from tests.support.replay import parse_frames
from tests.support.schema import validate, validate_completion_chunk

PROMPT = "Deep learning is"
BASE: dict[str, Any] = {"model": "client-model", "prompt": PROMPT}
WHOLE = {"details": True, "decoder_input_details": True, "do_sample": True}
STREAMED = {"details": True, "do_sample": True}


def build(fields: dict[str, Any]) -> dict[str, Any]:
    request = parse_request(orjson.dumps({**BASE, **fields}), "completions")
    body = upstream_request(DIALECTS["tgi"], request, RequestOptions("tgi"))
    result: dict[str, Any] = orjson.loads(body)
    return result


TRANSLATED = [
    ({}, WHOLE),
    ({"prompt": [PROMPT]}, WHOLE),
    ({"stream": True}, STREAMED),  # the path says it streams; the input tokens cannot come
    ({"max_tokens": 20}, {**WHOLE, "max_new_tokens": 20}),
    ({"temperature": 0}, {**WHOLE, "do_sample": False}),  # greedy
    ({"temperature": 0.7}, {**WHOLE, "temperature": 0.7}),
    ({"top_p": 1}, WHOLE),
    ({"top_p": 0.9}, {**WHOLE, "top_p": 0.9}),
    ({"stop": "\n"}, {**WHOLE, "stop": ["\n"]}),
    ({"stop": ["a", "b"]}, {**WHOLE, "stop": ["a", "b"]}),
    ({"seed": 42, "frequency_penalty": 0.5}, {**WHOLE, "seed": 42, "frequency_penalty": 0.5}),
    ({"best_of": 3}, {**WHOLE, "best_of": 3}),
    (
        {
            "user": "u",
            "stream_options": None,
            "n": 1,
            "echo": False,
            "best_of": 1,
            "logit_bias": {},
        },
        WHOLE,
    ),
    (  # OpenAI's defaults, as LangChain's client sends them whatever it wants
        {
            "presence_penalty": 0,
            "frequency_penalty": 0.0,
            "top_p": 1,
            "logprobs": None,
            "suffix": "",
            "n": 1,
            "best_of": 1,
        },
        {**WHOLE, "frequency_penalty": 0.0},
    ),
    # TGI's own parameters, at the top level or in "parameters".
    ({"top_k": 10, "repetition_penalty": 1.1}, {**WHOLE, "top_k": 10, "repetition_penalty": 1.1}),
    ({"parameters": {"watermark": True}}, {**WHOLE, "watermark": True}),
]


@pytest.mark.parametrize(("fields", "parameters"), TRANSLATED)
def test_request_fields(fields: dict[str, Any], parameters: dict[str, Any]) -> None:
    assert build(fields) == {"inputs": PROMPT, "parameters": parameters}


REFUSED = [
    ({"prompt": ["one", "two"]}, "prompt", "unsupported_parameter"),
    ({"prompt": [1, 2, 3]}, "prompt", "unsupported_parameter"),
    ({"prompt": [[1, 2], [3]]}, "prompt", "unsupported_parameter"),
    ({"n": 2}, "n", "unsupported_parameter"),
    ({"logprobs": 0}, "logprobs", "unsupported_parameter"),
    ({"logprobs": 3}, "logprobs", "unsupported_parameter"),
    ({"echo": True}, "echo", "unsupported_parameter"),
    ({"logit_bias": {"1": 5}}, "logit_bias", "unsupported_parameter"),
    ({"suffix": "end"}, "suffix", "unsupported_parameter"),
    ({"presence_penalty": 0.5}, "presence_penalty", "unsupported_parameter"),
    ({"stop": [1]}, "stop", "invalid_type"),
    ({"parameters": [1]}, "parameters", "invalid_type"),
    ({"parameters": {"details": False}}, "parameters.details", "invalid_value"),
    (
        {"max_tokens": 5, "parameters": {"max_new_tokens": 9}},
        "parameters.max_new_tokens",
        "invalid_value",
    ),
    ({"do_sample": False}, "do_sample", "invalid_value"),
]


@pytest.mark.parametrize(("fields", "param", "code"), REFUSED)
def test_refusals(fields: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        build(fields)
    status, body = to_openai_error(info.value)
    assert status == 400 and (body["error"]["param"], body["error"]["code"]) == (param, code)


# -- the stream -------------------------------------------------------------------------


def stream(events: list[dict[str, Any]], **ctx: Any) -> list[Any]:
    context = RequestContext(
        "completions", "m", 1_700_000_000, include_usage=True, dialect="tgi", **ctx
    )
    normalizer = StreamNormalizer(context)
    body = b"".join(b"data:" + orjson.dumps(event) + b"\n\n" for event in events)
    out = [frame for event in SSEDecoder().feed(body) for frame in normalizer.feed(event)]
    out += normalizer.finish()
    payloads = parse_frames(b"".join(out))
    for payload in payloads:
        if isinstance(payload, dict) and "error" not in payload:
            validate_completion_chunk(payload)
    return payloads


def token(text: str, index: int, special: bool = False, **fields: Any) -> dict[str, Any]:
    event = {
        "index": index,
        "token": {"id": index, "text": text, "logprob": -0.5, "special": special},
        "generated_text": None,
        "details": None,
    }
    return {**event, **fields}


def details(reason: str, generated: int = 3) -> dict[str, Any]:
    return {"finish_reason": reason, "generated_tokens": generated, "input_length": 7, "seed": None}


def _text(payloads: list[Any]) -> str:
    return "".join(c["text"] for p in payloads if isinstance(p, dict) for c in p.get("choices", []))


def _finish(payloads: list[Any]) -> object:
    (reason,) = [
        c["finish_reason"]
        for p in payloads
        if isinstance(p, dict)
        for c in p.get("choices", [])
        if c["finish_reason"]
    ]
    return reason


@pytest.mark.parametrize(
    ("reason", "expected"), [("eos_token", "stop"), ("stop_sequence", "stop"), ("length", "length")]
)
def test_finish_reasons_and_usage_from_details(reason: str, expected: str) -> None:
    payloads = stream(
        [
            token("<|im_start|>", 1, special=True),  # a special token is no text, wherever it is
            token(" a", 2),
            # The last event's token is text unless special; generated_text is the whole text
            # again and never given.
            token(" b", 3, generated_text=" a b", details=details(reason)),
        ]
    )
    assert _text(payloads) == " a b"
    assert _finish(payloads) == expected
    assert payloads[-2]["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert payloads[-1] == "[DONE]"


def test_an_empty_generation() -> None:
    payloads = stream(
        [token("</s>", 1, special=True, generated_text="", details=details("eos_token", 1))]
    )
    assert _text(payloads) == "" and _finish(payloads) == "stop"


def test_an_error_event_ends_the_stream() -> None:
    error = {
        "error": "Request failed during generation: Server error: CUDA out of memory",
        "error_type": "generation",
    }
    payloads = stream([token(" a", 1), error])
    assert _text(payloads) == " a"
    assert payloads[-1]["error"]["message"] == error["error"]
    assert payloads[-1]["error"]["type"] == "upstream_error"
    assert "[DONE]" not in payloads


def test_a_stream_without_its_final_event_was_cut_short() -> None:
    payloads = stream([token(" a", 1), token(" b", 2)])
    assert payloads[-1]["error"]["message"] == "The upstream stream was cut short"


def test_a_final_event_without_details_still_ends_the_stream() -> None:
    # A server that leaves details out (the recorded one was not asked): no counts to tell
    # "length" by, so the normalizer's stop; not cut short.
    payloads = stream([token(" a", 1), token(" b", 2, generated_text=" a b")], max_tokens=2)
    assert _text(payloads) == " a b" and _finish(payloads) == "stop"
    assert payloads[-1] == "[DONE]"


# -- whole answers ----------------------------------------------------------------------


def whole(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    context = RequestContext("completions", "m", 1_700_000_000, dialect="tgi", prompt=PROMPT)
    result = normalize_response(orjson.dumps(body), context)
    answer: dict[str, Any] = orjson.loads(result.body)
    validate(answer, "CreateCompletionResponse")
    return answer, result.usage.source


def test_whole_answer_counts_the_decoders_input() -> None:
    prefill = [
        {"id": i, "text": t, "logprob": None} for i, t in enumerate(["Deep", " learning", " is"])
    ]
    body = {
        "generated_text": " a subset of machine learning",
        "details": {
            "finish_reason": "length",
            "generated_tokens": 5,
            "seed": None,
            "prefill": prefill,
            "tokens": [{"id": 1, "text": " a", "logprob": -0.1, "special": False}],
        },
    }
    answer, source = whole(body)
    assert answer["choices"][0]["text"] == " a subset of machine learning"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert source == "upstream"


def test_whole_answer_without_details_is_estimated() -> None:
    answer, source = whole({"generated_text": " a subset"})
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert source == "estimated"


def test_whole_error_body() -> None:
    with pytest.raises(UpstreamError) as info:
        whole(
            {
                "error": "Input validation error: `inputs` must not be empty",
                "error_type": "validation",
            }
        )
    assert info.value.message == "Input validation error: `inputs` must not be empty"
