"""Property tests: whatever an upstream sends, the normalizer raises nothing and emits only
canonical objects (docs/canonical-output.md), or one error event.

Two generators: arbitrary bytes (hostile or broken upstreams), and chunk-shaped JSON whose
every field may have any type or be missing (the quirks nobody has recorded yet).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.errors import UpstreamProtocolError
from proxy.core.request import Endpoint
from proxy.core.sse import SSEDecoder
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from tests.support.schema import validate, validate_completion_chunk

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, anything)


finish = maybe(
    st.sampled_from(["stop", "length", "eos", "tool_calls", "", "null", "error", "weird", None])
)
tool_call = st.fixed_dictionaries(
    {},
    optional={
        "index": maybe(st.integers(0, 3)),
        "id": maybe(st.sampled_from(["call_1", "call_2", "", "0"])),
        "type": maybe(st.just("function")),
        "function": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": maybe(st.sampled_from(["f", "g", "", None])),
                    "arguments": maybe(st.text(max_size=5)),
                },
            )
        ),
    },
)
delta = st.fixed_dictionaries(
    {},
    optional={
        "role": maybe(st.just("assistant")),
        "content": maybe(
            st.one_of(
                st.text(max_size=6),
                st.lists(
                    st.fixed_dictionaries(
                        {"type": st.sampled_from(["text", "thinking"]), "text": st.text(max_size=4)}
                    )
                ),
            )
        ),
        "reasoning_content": maybe(st.text(max_size=6)),
        "reasoning": maybe(st.text(max_size=6)),
        "refusal": maybe(st.text(max_size=6)),
        "tool_calls": maybe(st.lists(maybe(tool_call), max_size=2)),
    },
)
usage = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": maybe(st.integers(0, 100)),
        "completion_tokens": maybe(st.integers(0, 100)),
        "total_tokens": maybe(st.integers(0, 300)),
        "prompt_tokens_details": anything,
        "completion_tokens_details": anything,
    },
)
choice = st.fixed_dictionaries(
    {},
    optional={
        "index": maybe(st.integers(0, 2)),
        "delta": maybe(delta),
        "message": maybe(delta),
        "text": maybe(st.text(max_size=6)),
        "finish_reason": finish,
        "logprobs": anything,
    },
)
chunk = st.fixed_dictionaries(
    {},
    optional={
        "id": maybe(st.sampled_from(["chatcmpl-1", ""])),
        "object": anything,
        "created": maybe(st.integers(0, 2 * 10**18)),
        "model": anything,
        "choices": maybe(st.lists(maybe(choice), max_size=3)),
        "usage": maybe(usage),
        "x_groq": anything,
        "error": st.one_of(st.none(), st.none(), anything),
        "system_fingerprint": anything,
    },
)


def check_frames(frames: list[bytes], endpoint: Endpoint, ended: bool) -> None:
    seen_error = False
    for frame in frames:
        assert not seen_error, "nothing may follow an error event"
        assert frame.startswith(b"data: ") and frame.endswith(b"\n\n") and b"\n" not in frame[:-2]
        data = frame[6:-2]
        if data == b"[DONE]":
            assert frame is frames[-1]
            continue
        payload = orjson.loads(data)
        if "error" in payload:
            validate(payload, "ErrorResponse")
            seen_error = True
        elif endpoint == "chat":
            validate(payload, "CreateChatCompletionStreamResponse")
        else:
            validate_completion_chunk(payload)
    if ended:
        assert frames and (frames[-1] == b"data: [DONE]\n\n" or seen_error)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("dialect", ["openai", "friendli-2024", "maritaca-inference"])
def test_arbitrary_bytes(endpoint: Endpoint, dialect: str) -> None:
    @SETTINGS
    @given(data=st.binary(max_size=300), cut=st.integers(0, 300), n=st.integers(1, 3))
    def run(data: bytes, cut: int, n: int) -> None:
        ctx = RequestContext(
            endpoint=endpoint,
            model="m",
            created=1_700_000_000,
            include_usage=True,
            dialect=dialect,
            n=n,
        )
        decoder = SSEDecoder(max_event_bytes=200)
        normalizer = StreamNormalizer(ctx)
        frames: list[bytes] = []
        try:
            events = decoder.feed(data[:cut]) + decoder.feed(data[cut:]) + decoder.close()
        except UpstreamProtocolError:
            return  # the one exception the decoder documents
        for event in events:
            frames += normalizer.feed(event)
        frames += normalizer.finish()
        check_frames(frames, endpoint, ended=True)
        assert normalizer.usage.total_tokens >= 0

    run()


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_arbitrary_chunks(endpoint: Endpoint) -> None:
    @SETTINGS
    @given(
        chunks=st.lists(chunk, max_size=6),
        done=st.booleans(),
        include_usage=st.booleans(),
        n=st.integers(1, 3),
    )
    def run(chunks: list[dict[str, Any]], done: bool, include_usage: bool, n: int) -> None:
        ctx = RequestContext(
            endpoint=endpoint, model="m", created=1_700_000_000, include_usage=include_usage, n=n
        )
        decoder = SSEDecoder()
        body = b"".join(
            b"data: " + orjson.dumps(c, option=orjson.OPT_PASSTHROUGH_SUBCLASS) + b"\n\n"
            for c in _json_safe(chunks)
        )
        if done:
            body += b"data: [DONE]\n\n"
        normalizer = StreamNormalizer(ctx)
        frames: list[bytes] = []
        for event in decoder.feed(body) + decoder.close():
            frames += normalizer.feed(event)
        frames += normalizer.finish()
        check_frames(frames, endpoint, ended=True)
        usage_chunks = [f for f in frames if b'"usage"' in f and b'"error"' not in f[:16]]
        assert len(usage_chunks) <= (1 if include_usage else 0)

    run()


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_arbitrary_whole_responses(endpoint: Endpoint) -> None:
    @SETTINGS
    @given(body=chunk, n=st.integers(1, 3))
    def run(body: dict[str, Any], n: int) -> None:
        ctx = RequestContext(endpoint=endpoint, model="m", created=1_700_000_000, n=n)
        raw = orjson.dumps(_json_safe([body])[0])
        try:
            result = normalize_response(raw, ctx)
        except Exception as exc:  # only the documented upstream errors may come out
            from proxy.core.errors import UpstreamError

            assert isinstance(exc, UpstreamError), repr(exc)
            return
        out = orjson.loads(result.body)
        validate(
            out,
            "CreateChatCompletionResponse" if endpoint == "chat" else "CreateCompletionResponse",
        )

    run()


def _json_safe(value: Any) -> Any:
    """Integers beyond 64 bits cannot be written by orjson: send them as floats, as JSON allows."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return float(value)
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(
    "created",
    [1.8446744073709552e28, 2**64 - 1, -5, 0, 1e-3, "1700000000"],
)
def test_implausible_created_never_breaks_the_stream(created: object) -> None:
    """Found by the property test: a huge float ``created`` once made a 19-digit "time"."""
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000)
    normalizer = StreamNormalizer(ctx)
    decoder = SSEDecoder()
    body = (
        b"data: "
        + orjson.dumps({"created": created, "choices": [{"delta": {"content": "x"}}]})
        + b"\n\n"
    )
    frames = [f for e in decoder.feed(body + b"data: [DONE]\n\n") for f in normalizer.feed(e)]
    check_frames(frames, "chat", ended=True)
    assert orjson.loads(frames[0][6:-2])["created"] == 1_700_000_000


@pytest.mark.parametrize("count", [2**64 - 1, 1.2345678901234568e29, -1, 2.5, True])
def test_absurd_usage_counts_are_not_counts(count: object) -> None:
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000, include_usage=True)
    normalizer = StreamNormalizer(ctx)
    decoder = SSEDecoder()
    chunk = {
        "choices": [{"delta": {"content": "x"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": count, "completion_tokens": count},
    }
    body = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    frames = [f for e in decoder.feed(body) for f in normalizer.feed(e)]
    check_frames(frames, "chat", ended=True)
    assert normalizer.usage.source == "estimated"


def test_a_finish_reason_that_is_no_string_with_a_tool_call_is_tool_calls() -> None:
    """Found by a differential test of the whole-response shortcut: the builder looked an
    unhashable finish_reason up in a set, and the request failed with a 500 instead of its
    answer."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "up",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": ["stop"],
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000)
    answer = orjson.loads(normalize_response(orjson.dumps(body), ctx).body)
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
