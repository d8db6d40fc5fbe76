"""What each normalizer says the answer said of itself (``Answered``: ``gen_ai.response.id``,
``gen_ai.response.model``, ``gen_ai.response.finish_reasons`` on the attempt's span): the
recordings of several dialects, streamed and whole, and the pass-throughs of a provider's own
Responses and Messages APIs. The model is the upstream's as it came, never the client's name
that the answer carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.exchange import Answered
from proxy.core.framing import Decoder
from proxy.core.sse import Event, SSEDecoder
from proxy.normalize import StreamNormalizer, normalize_whole
from proxy.normalize.faces.anthropic.passthrough import ANTHROPIC_PASSTHROUGH
from proxy.normalize.fields import RequestContext
from proxy.normalize.present import EventStream
from proxy.normalize.responses.present import PASSTHROUGH
from tests.support.replay import CLIENT_MODEL, Golden, goldens

GOLDENS = {golden.name: golden for golden in goldens()}
RESPONSES = Path(__file__).resolve().parent.parent / "fixtures" / "responses"
PROVIDERS = Path(__file__).resolve().parent.parent / "fixtures" / "providers"

# golden -> (id, or the prefix of one the proxy made; upstream model; finish reasons)
ANSWERED = {
    "openai.chat.stream.sse": (
        "chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0",
        "gpt-4.1-nano-2025-04-14",
        ("stop",),
    ),
    "openai.chat.stream.n3.sse": (
        "chatcmpl-ABfw2KKFuVXmEJgVwYfBvejMAdWtq",
        "gpt-4o-2024-08-06",
        ("stop", "stop", "stop"),
    ),
    "openai.chat.stream.length.sse": (None, None, ("length",)),
    "openai.chat.stream.tool-calls.sse": (None, None, ("tool_calls",)),
    "openai.completions.stream.sse": (
        "cmpl-D8ZFN477TMm6AoQohx2jSTOJMh60M",
        "gpt-3.5-turbo-instruct:20230824-v2",
        ("length",),
    ),
    "anthropic.messages.stream.sse": (
        "msg_01QC4g3HwBThD4BaNtBckFDJ",
        "claude-sonnet-4-5-20250929",
        ("stop",),
    ),
    "anthropic.messages.stream.tool-use.sse": (None, None, ("tool_calls",)),
    "gemini.generate-content.stream.sse": (
        "bH6LaZW8Fp_3nsEPqtaSwQ4",
        "gemini-3-pro-preview",
        ("stop",),
    ),
    "ollama.api-chat.stream.ndjson": ("chatcmpl-", "tinydolphin", ("stop",)),
    "cohere.chat.stream.sse": ("321d178c-2c12-44d3-ae42-2f5510f6b1cc", None, ("stop",)),
    "openai.chat.json": (
        "chatcmpl-D8Z5f52zQqikDBEKQMQoYcWMcWPeU",
        "gpt-4.1-nano-2025-04-14",
        ("stop",),
    ),
    "anthropic.messages.json": (
        "msg_01VdEjxAP5ahtHKrrRdNBteQ",
        "claude-sonnet-4-5-20250929",
        ("stop",),
    ),
    "gemini.generate-content.json": ("Un6LacrVMcjUxs0PmJfWoQc", "gemini-3-pro-preview", ("stop",)),
    "ollama.api-chat.json": ("chatcmpl-", "qwen2:0.5b", ("stop",)),
    "openai.completions.json": (None, None, None),
}


def context(golden: Golden) -> RequestContext:
    return RequestContext(
        endpoint="chat" if golden.endpoint == "chat" else "completions",
        model=CLIENT_MODEL,
        created=1_600_000_000,
        dialect=golden.data["dialect"],
        n=golden.n,
    )


def streamed(golden: Golden) -> Answered:
    normalizer = StreamNormalizer(context(golden))
    return driven(normalizer, golden.decoder(), golden.body())


def driven(stream: EventStream, decoder: Decoder, body: bytes) -> Answered:
    """``stream``'s ``answered`` once the upstream's ``body`` went through it as the relay
    drives a stream (proxy.http.pipe.frames_for)."""
    frames: list[bytes] = []
    for event in [*decoder.feed(body), *decoder.close()]:
        frames += stream.feed(event)
        if stream.ended:
            break
    frames += stream.finish()
    assert frames and stream.error is None
    return stream.answered


def check(answered: Answered, golden: Golden, expected: tuple[object, ...]) -> None:
    response_id, model, finishes = expected
    if response_id is None:  # the golden's own id
        response_id = golden.data["id"]
    assert answered.id is not None
    if isinstance(response_id, str) and response_id.endswith("-"):
        assert answered.id.startswith(response_id)  # none came: the proxy's own
    else:
        assert answered.id == response_id
    if model is None:
        model = None if golden.data["dialect"] == "cohere" else _model_of(golden)
    assert answered.model == model
    if finishes is None:
        finishes = tuple(choice["finish_reason"] for choice in golden.data["choices"].values())
    assert answered.finish_reasons == finishes


def _model_of(golden: Golden) -> str:
    for line in golden.body().decode().splitlines():
        if '"model"' in line:
            return str(line.split('"model":', 1)[1].split('"')[1])
    raise AssertionError(golden.name)


@pytest.mark.parametrize("name", [name for name in ANSWERED if GOLDENS[name].stream])
def test_a_stream_says_what_it_was(name: str) -> None:
    golden = GOLDENS[name]
    check(streamed(golden), golden, ANSWERED[name])


@pytest.mark.parametrize("name", [name for name in ANSWERED if not GOLDENS[name].stream])
def test_a_whole_answer_says_what_it_was(name: str) -> None:
    golden = GOLDENS[name]
    check(normalize_whole(golden.body(), context(golden)).answered, golden, ANSWERED[name])


def test_the_upstream_model_is_the_first_one_seen() -> None:
    ctx = RequestContext(endpoint="chat", model=CLIENT_MODEL, created=1_600_000_000)
    normalizer = StreamNormalizer(ctx)
    chunk = b'{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"%s",'
    for model, rest in (
        (b"first-2025", b'"choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}'),
        (b"second", b'"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}'),
    ):
        normalizer.feed(Event(chunk % model + rest))
    normalizer.feed(Event(b"[DONE]"))
    assert normalizer.answered == Answered("c1", "first-2025", ("length",))


def test_a_stream_that_failed_has_no_finish_reasons() -> None:
    ctx = RequestContext(endpoint="chat", model=CLIENT_MODEL, created=1_600_000_000)
    normalizer = StreamNormalizer(ctx)
    normalizer.feed(
        Event(
            b'{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m",'
            b'"choices":[{"index":0,"delta":{"content":"a"}}]}'
        )
    )
    normalizer.finish()  # cut short
    assert normalizer.error is not None
    assert normalizer.answered == Answered("c1", "m", ())


# -- the pass-throughs: the provider's own words --------------------------------------------


def test_anthropic_passthrough_stream_and_whole() -> None:
    ctx = RequestContext(
        endpoint="chat", model=CLIENT_MODEL, created=1_600_000_000, dialect="anthropic"
    )
    stream = ANTHROPIC_PASSTHROUGH.stream(ctx)
    body = (PROVIDERS / "anthropic.messages.stream.sse").read_bytes()
    assert driven(stream, SSEDecoder(), body) == Answered(
        "msg_01QC4g3HwBThD4BaNtBckFDJ", "claude-sonnet-4-5-20250929", ("end_turn",)
    )
    whole = ANTHROPIC_PASSTHROUGH.response(
        (PROVIDERS / "anthropic.messages.json").read_bytes(), ctx
    )
    assert whole.answered == Answered(
        "msg_01VdEjxAP5ahtHKrrRdNBteQ", "claude-sonnet-4-5-20250929", ("end_turn",)
    )


def test_responses_passthrough_stream_and_whole() -> None:
    ctx = RequestContext(endpoint="responses", model=CLIENT_MODEL, created=1_600_000_000)
    stream = PASSTHROUGH.stream(ctx)
    body = (RESPONSES / "contract.openai.responses.stream.sse").read_bytes()
    assert driven(stream, SSEDecoder(), body) == Answered(
        "resp_0f3a9d2b7c41e85a6b0c1d2e3f405162738495a6b7c8d9e0f1",
        "gpt-4o-mini-2024-07-18",
        ("completed",),
    )
    whole = PASSTHROUGH.response((RESPONSES / "contract.openai.responses.json").read_bytes(), ctx)
    assert whole.answered == Answered(
        "resp_04b8c2e1f6a93d7c5e0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "gpt-4o-mini-2024-07-18",
        ("completed",),
    )
