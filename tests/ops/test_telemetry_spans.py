"""A request's spans and what goes upstream (proxy.ops.telemetry), on the real SDK with its
in-memory exporter; and the gate that counts what the export queue cannot take."""

from __future__ import annotations

from collections.abc import Iterator
from time import perf_counter

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import SpanKind, StatusCode

from proxy.core.config import Deployment, Provider
from proxy.core.errors import UpstreamStatusError
from proxy.core.exchange import Answered, Exchange
from proxy.core.request import parse_request
from proxy.core.telemetry_config import Otlp
from proxy.core.usage import Usage
from proxy.ops.telemetry.export import Gate, GatedProcessor
from proxy.ops.telemetry.spans import Tracing

PROVIDER = Provider("emu", "openai", "http://127.0.0.1:9100/v1")
DEPLOYMENT = Deployment("emu", "gpt-4o-mini")
REQUEST = parse_request(b'{"model":"m","messages":[{"role":"user","content":"hi"}]}', "chat")
INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"


@pytest.fixture
def exported() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


def _request(tracing: Tracing, headers: dict[str, str], *, fail_first: bool = False) -> bytes:
    """One request through its trace; the header lines its last attempt sent upstream."""
    exchange = Exchange("req-1", "chat", perf_counter(), path="/v1/chat/completions")
    trace = tracing.start("POST", headers, exchange)
    exchange.trace = trace
    exchange.team, exchange.model = "research", "gpt"
    if fail_first:
        trace.attempt(exchange, PROVIDER, DEPLOYMENT, REQUEST)
        exchange.answered = Answered("chatcmpl-cut", "gpt-4o-mini-2024-07-18")  # it broke off
        trace.attempt_failed(UpstreamStatusError("busy", upstream_status=503))
    sent = trace.attempt(exchange, PROVIDER, DEPLOYMENT, REQUEST)
    exchange.usage = Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)
    exchange.answered = Answered("chatcmpl-1", "gpt-4o-mini-2024-07-18", ("stop", "length"))
    exchange.status = 200
    exchange.ended = perf_counter()
    trace.end(exchange)
    return sent


@pytest.mark.parametrize(
    ("ratio", "headers", "recorded", "sent"),
    [
        (1.0, {}, True, None),
        (0.0, {}, False, "-00\r\n"),
        # Parent-based: the client's decision wins over the ratio, either way.
        (0.0, {"traceparent": f"{INCOMING}-01"}, True, None),
        (1.0, {"traceparent": f"{INCOMING}-00"}, False, f"traceparent: {INCOMING}-00\r\n"),
        (
            1.0,
            {"traceparent": f"{INCOMING}-00", "tracestate": "vendor=x"},
            False,
            f"traceparent: {INCOMING}-00\r\ntracestate: vendor=x\r\n",
        ),
        (1.0, {"traceparent": "garbage"}, True, None),  # a trace of our own
    ],
)
def test_sampling_and_what_goes_upstream(
    exported: tuple[InMemorySpanExporter, TracerProvider],
    ratio: float,
    headers: dict[str, str],
    recorded: bool,
    sent: str | None,
) -> None:
    exporter, provider = exported
    tracing = Tracing(Otlp("http://collector", sample_ratio=ratio), provider.get_tracer("t"))
    line = _request(tracing, headers).decode()
    spans = exporter.get_finished_spans()
    if not recorded:
        assert spans == ()
        assert line.startswith("traceparent: 00-") and line.endswith(sent or "")
        return
    attempt, server = spans
    context = attempt.get_span_context()
    assert context.trace_flags.sampled
    # Its flags as the SDK set them (03: sampled, and a random trace id, W3C level 2).
    flags = f"{context.trace_flags:02x}"
    assert line == f"traceparent: 00-{context.trace_id:032x}-{context.span_id:016x}-{flags}\r\n"
    assert attempt.parent is not None and attempt.parent.span_id == server.context.span_id
    if "traceparent" in headers and headers["traceparent"] != "garbage":
        assert f"{server.context.trace_id:032x}" == INCOMING.split("-")[1]
        assert server.parent is not None and f"{server.parent.span_id:016x}" == INCOMING[-16:]


def test_the_spans_attributes(exported: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    exporter, provider = exported
    tracing = Tracing(Otlp("http://collector"), provider.get_tracer("t"))
    _request(tracing, {}, fail_first=True)
    failed, answered, server = exporter.get_finished_spans()
    assert (server.name, server.kind) == ("POST /v1/chat/completions", SpanKind.SERVER)
    assert server.attributes == {
        "http.request.method": "POST",
        "url.path": "/v1/chat/completions",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "llm_proxy.team": "research",
        "llm_proxy.model": "gpt",
        "llm_proxy.request_id": "req-1",
    }
    assert server.status.status_code is StatusCode.UNSET
    assert (failed.name, failed.kind) == ("chat gpt-4o-mini", SpanKind.CLIENT)
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "503"
    assert not any(key.startswith("gen_ai.response.") for key in failed.attributes)
    assert answered.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "emu",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.request.stream": False,
        "server.address": "127.0.0.1",
        "server.port": 9100,
        "llm_proxy.team": "research",
        "llm_proxy.model": "gpt",
        "llm_proxy.attempt": 2,
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 3,
        "llm_proxy.usage_source": "upstream",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.finish_reasons": ("stop", "length"),
    }


def test_an_answer_that_said_nothing_of_itself_adds_nothing(
    exported: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = exported
    tracing = Tracing(Otlp("http://collector"), provider.get_tracer("t"))
    exchange = Exchange("req-3", "chat", perf_counter(), path="/v1/chat/completions")
    exchange.trace = trace = tracing.start("POST", {}, exchange)
    exchange.answered = Answered("left-over", "from-an-earlier-request")
    trace.attempt(exchange, PROVIDER, DEPLOYMENT, REQUEST)  # an attempt starts afresh
    exchange.status, exchange.ended = 502, perf_counter()
    trace.end(exchange)
    attempt, _ = exporter.get_finished_spans()
    assert attempt.attributes is not None
    assert not any(key.startswith("gen_ai.response.") for key in attempt.attributes)


@pytest.mark.parametrize("result", ["hit", "miss", "bypass"])
def test_a_cached_models_request_says_what_the_cache_did(
    exported: tuple[InMemorySpanExporter, TracerProvider], result: str
) -> None:
    exporter, provider = exported
    tracing = Tracing(Otlp("http://collector"), provider.get_tracer("t"))
    exchange = Exchange("req-2", "chat", perf_counter(), path="/v1/chat/completions")
    exchange.trace = tracing.start("POST", {}, exchange)
    exchange.cache, exchange.status, exchange.ended = result, 200, perf_counter()
    exchange.trace.end(exchange)
    (server,) = exporter.get_finished_spans()  # a hit makes no attempt
    assert server.attributes is not None and server.attributes["llm_proxy.cache"] == result


def test_content_is_captured_only_when_asked(
    exported: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = exported
    for capture in (False, True):
        tracing = Tracing(Otlp("http://c", capture_content=capture), provider.get_tracer("t"))
        _request(tracing, {})
    plain, _, captured, _ = exporter.get_finished_spans()
    assert plain.attributes is not None and "gen_ai.input.messages" not in plain.attributes
    assert captured.attributes is not None
    assert captured.attributes["gen_ai.input.messages"] == '[{"role":"user","content":"hi"}]'


def test_the_gate_drops_and_counts_what_the_queue_cannot_take() -> None:
    gate = Gate(2)
    dropped: list[int] = []
    exporter = InMemorySpanExporter()
    gated = GatedProcessor(SimpleSpanProcessor(exporter), gate, dropped.append)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(gated)
    tracer = provider.get_tracer("t")
    for _ in range(5):
        tracer.start_span("s").end()
    # Nothing left the gate (no CountingExporter here): two held, three dropped.
    assert gate.held == 2 and dropped == [1, 1, 1]
    assert len(exporter.get_finished_spans()) == 2
    gate.leave(2)
    tracer.start_span("s").end()
    assert gate.held == 1 and len(dropped) == 3
    provider.shutdown()
