"""``api: bedrock``: Converse answers, ConverseStream events (through the event stream decoder)
and Bedrock's errors as the proxy's, for what the recorded fixtures do not show (they are
replayed against their goldens by test_normalize_fixtures.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import ProxyError, UpstreamError, to_openai_error
from proxy.core.eventstream import EventStreamDecoder, encode_event, encode_exception
from proxy.http.upstream import status_error
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from proxy.normalize.embeddings import normalize_embeddings
from tests.support.bedrock_frames import STREAMS, frames
from tests.support.replay import FIXTURES, parse_frames
from tests.support.schema import validate

CREATED = 1_700_000_000


def context(**overrides: Any) -> RequestContext:
    values: dict[str, Any] = {
        "endpoint": "chat",
        "model": "client-model",
        "created": CREATED,
        "include_usage": True,
        "dialect": "bedrock",
    }
    return RequestContext(**{**values, **overrides})


def stream(*events: tuple[str, dict[str, Any]], exception: bool = False) -> list[Any]:
    """The client's frames for ConverseStream ``events`` (type, payload), through the decoder."""
    encode = encode_exception if exception else encode_event
    data = b"".join(encode(kind, orjson.dumps(payload)) for kind, payload in events)
    decoder = EventStreamDecoder()
    normalizer = StreamNormalizer(context())
    out: list[bytes] = []
    for event in decoder.feed(data) + decoder.close():
        out += normalizer.feed(event)
    out += normalizer.finish()
    return parse_frames(b"".join(out))


def text(value: str) -> tuple[str, dict[str, Any]]:
    return "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": value}}


def stop(reason: str) -> tuple[str, dict[str, Any]]:
    return "messageStop", {"stopReason": reason}


def test_the_fixtures_are_their_readable_source() -> None:
    for name, events in STREAMS.items():
        assert (FIXTURES / name).read_bytes() == frames(events), name


STOP_REASONS = [
    ("end_turn", "stop"),
    ("stop_sequence", "stop"),
    ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"),
    ("guardrail_intervened", "content_filter"),
    ("content_filtered", "content_filter"),
    ("tool_use", "stop"),  # no call was given
    ("a_reason_added_since", "stop"),
]


@pytest.mark.parametrize(("reason", "finish"), STOP_REASONS)
def test_stop_reasons(reason: str, finish: str) -> None:
    frames = stream(("messageStart", {"role": "assistant"}), text("Hi"), stop(reason))
    assert frames[-3]["choices"][0]["finish_reason"] == finish
    body = {"output": {"message": {"role": "assistant", "content": [{"text": "Hi"}]}}}
    body["stopReason"] = reason  # type: ignore[assignment]
    answer = orjson.loads(normalize_response(orjson.dumps(body), context()).body)
    assert answer["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize("reason", ["malformed_model_output", "malformed_tool_use"])
def test_a_malformed_answer_is_an_upstream_error(reason: str) -> None:
    frames = stream(text("Hi"), stop(reason))
    assert frames[-1]["error"]["type"] == "upstream_error"
    assert reason in frames[-1]["error"]["message"]
    body = {"output": {"message": {"role": "assistant", "content": []}}, "stopReason": reason}
    with pytest.raises(UpstreamError) as info:
        normalize_response(orjson.dumps(body), context())
    assert to_openai_error(info.value)[0] == 502


@pytest.mark.parametrize("body", [{}, {"output": {}}, {"output": None, "stopReason": "end_turn"}])
def test_an_answer_without_output_is_a_502(body: dict[str, Any]) -> None:
    with pytest.raises(UpstreamError) as info:
        normalize_response(orjson.dumps(body), context())
    assert to_openai_error(info.value)[0] == 502


STREAM_EXCEPTIONS = [
    ("throttlingException", 429, "rate_limit_error"),
    ("serviceUnavailableException", 503, "service_unavailable"),
    ("internalServerException", 502, "upstream_error"),
    ("modelStreamErrorException", 502, "upstream_error"),
    ("validationException", 400, "invalid_request_error"),
]


@pytest.mark.parametrize(("name", "status", "kind"), STREAM_EXCEPTIONS)
def test_stream_exceptions(name: str, status: int, kind: str) -> None:
    frames = stream((name, {"message": f"{name} happened"}), exception=True)
    assert frames == [{"error": {"message": f"{name} happened", "type": kind, "param": None,
                                 "code": name[0].upper() + name[1:]}}]  # fmt: skip
    normalizer = StreamNormalizer(context())
    normalizer.feed(EventStreamDecoder().feed(encode_exception(name, b"{}"))[0])
    assert isinstance(normalizer.error, ProxyError)
    assert normalizer.error.http_status == status  # before a first byte: the HTTP error


def test_an_aws_error_message_mid_stream() -> None:
    from proxy.core.eventstream import encode_message

    data = encode_message(
        {":message-type": "error", ":error-code": "InternalFailure", ":error-message": "Boom"}, b""
    )
    normalizer = StreamNormalizer(context())
    frames = parse_frames(b"".join(normalizer.feed(EventStreamDecoder().feed(data)[0])))
    assert frames[-1]["error"]["message"] == "Boom"
    assert frames[-1]["error"]["type"] == "upstream_error"


def test_reasoning_tool_calls_and_cache_usage() -> None:
    frames = stream(
        ("messageStart", {"role": "assistant"}),
        (
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Hm"}}},
        ),
        (
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "s"}}},
        ),
        (
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "a"}}},
        ),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"x":'}}}),
        (
            "contentBlockStart",
            {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t2", "name": "b"}}},
        ),
        ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{}"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "1}"}}}),
        stop("tool_use"),
        (
            "metadata",
            {
                "usage": {
                    "inputTokens": 10,
                    "outputTokens": 5,
                    "totalTokens": 15,
                    "cacheReadInputTokens": 100,
                    "cacheWriteInputTokens": 20,
                }
            },
        ),
    )
    for frame in frames[:-1]:
        validate(frame, "CreateChatCompletionStreamResponse")
    deltas = [f["choices"][0]["delta"] for f in frames[:-2] if f["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Hm"
    calls: dict[int, str] = {}
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            calls[call["index"]] = calls.get(call["index"], "") + call["function"]["arguments"]
    assert calls == {0: '{"x":1}', 1: "{}"}
    assert frames[-3]["choices"][0]["finish_reason"] == "tool_calls"
    usage = frames[-2]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (
        130,
        5,
        135,
    )
    assert usage["prompt_tokens_details"]["cached_tokens"] == 100


STATUS_ERRORS = [
    # (status, x-amzn-ErrorType, client status, type)
    (
        429,
        "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
        429,
        "rate_limit_error",
    ),
    (429, "ModelNotReadyException", 503, "service_unavailable"),
    (503, "ServiceUnavailableException", 503, "service_unavailable"),
    (500, "InternalServerException", 502, "upstream_error"),
    (424, "ModelErrorException", 502, "upstream_error"),
    (408, "ModelTimeoutException", 504, "timeout_error"),
    (400, "ValidationException", 400, "invalid_request_error"),
    (404, "ResourceNotFoundException", 404, "invalid_request_error"),
    (400, "ServiceQuotaExceededException", 429, "rate_limit_error"),
    (403, "AccessDeniedException", 502, "upstream_error"),
    (
        403,
        "UnrecognizedClientException:http://internal.amazon.com/coral/com.amazon.coral.service/",
        502,
        "upstream_error",
    ),
    (403, "InvalidSignatureException", 502, "upstream_error"),
    (403, "ExpiredTokenException", 502, "upstream_error"),
]


@pytest.mark.parametrize(("status", "header", "client", "kind"), STATUS_ERRORS)
def test_error_statuses_by_their_type(status: int, header: str, client: int, kind: str) -> None:
    body = b'{"message":"It went wrong."}'
    exc = status_error(status, "", "application/json", body, None, header)
    code, error = to_openai_error(exc)
    assert (code, error["error"]["type"]) == (client, kind)
    assert error["error"]["message"].endswith("It went wrong.")
    assert error["error"]["code"] == header.split(":")[0]
    assert exc.upstream_status == status  # what is retried is the upstream's status's business
    assert exc.retry_after is None  # Bedrock gives no delay: the proxy's own backoff
    if client == 502 and status == 403:
        assert "refused the proxy's AWS credentials" in error["error"]["message"]


def test_an_error_type_in_the_body_and_a_capital_message() -> None:
    body = b'{"__type":"com.amazon.coral.service#ExpiredTokenException","Message":"Expired."}'
    code, error = to_openai_error(status_error(403, "", "application/json", body, None, ""))
    assert code == 502
    assert error["error"]["message"].endswith("(ExpiredTokenException): Expired.")


def test_aws_error_types_are_read_from_bedrock_alone() -> None:
    """Another upstream behind an AWS front door may send x-amzn-ErrorType too: its 403 is
    its own, not Bedrock's refusal of the proxy's keys."""
    body = b'{"__type":"AccessDeniedException","message":"Not for you."}'
    code, error = to_openai_error(status_error(403, "", "application/json", body, None))
    assert (code, error["error"]["message"]) == (403, "Not for you.")


def test_embeddings_answers() -> None:
    titan = {"embedding": [0.5, -0.25], "inputTextTokenCount": 3}
    result = normalize_embeddings(orjson.dumps(titan), context(endpoint="embeddings"))
    answer = orjson.loads(result.body)
    assert [item["embedding"] for item in answer["data"]] == [[0.5, -0.25]]
    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    cohere = {"embeddings": [[0.5], [0.25]], "id": "x", "response_type": "embeddings_floats"}
    result = normalize_embeddings(orjson.dumps(cohere), context(endpoint="embeddings"))
    assert [item["embedding"] for item in orjson.loads(result.body)["data"]] == [[0.5], [0.25]]
