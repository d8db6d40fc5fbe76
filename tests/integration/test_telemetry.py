"""OpenTelemetry traces from ``llm-proxy serve --workers 2`` to a real OTLP/HTTP receiver
(``tests/support/otlp.py``): the span tree, its GenAI attributes, the propagation of the
client's ``traceparent`` to the upstream, usage equal to the Prometheus counters, and a
collector that is slow or gone costing requests nothing but counted spans.

The emulator and the receiver run in this process; the proxy is the command a user runs.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

# The otel extra's (pyproject.toml): the lowest-versions pass runs without it.
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.proto")

from tests.support.harness import free_port, start_site
from tests.support.metrics import (
    ALPHA_KEY,
    HELLO,
    Stage,
    read_samples,
    scrape,
    serve,
    stage,
    total,
    wait_for,
    write_config,
)
from tests.support.otlp import ReceivedSpan, Receiver

MODELS: dict[str, Any] = {
    "gpt": {"provider": "emu", "model": "openai"},
    "claude": {"provider": "emu-anthropic", "model": "anthropic"},
    "gemini": {"provider": "emu-gemini", "model": "gemini"},
    # The first deployment fails (a 500, no Retry-After), the second answers.
    "fallback": {
        "deployments": [
            {"provider": "emu", "model": "openai@status=500", "priority": 0},
            {"provider": "emu", "model": "openai", "priority": 1},
        ]
    },
    "broken": {"provider": "emu", "model": "openai@status=500"},
    "stalled": {"provider": "emu", "model": "openai.chat.stream.sse@stall-after=2000"},
}
# The model each recording the emulator plays says it is (gen_ai.response.model).
UPSTREAM_MODELS = {
    "gpt": "gpt-4.1-nano-2025-04-14",
    "claude": "claude-sonnet-4-5-20250929",
    "gemini": "gemini-3-pro-preview",
    "completions": "gpt-3.5-turbo-instruct:20230824-v2",
    "responses": "gpt-4.1-nano-2025-04-14",  # answered through chat
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Stage]:
    with stage() as built:
        yield built


@pytest.fixture
def receiver(emulator: Stage) -> Iterator[tuple[Receiver, str]]:
    received = Receiver()
    port = free_port()
    runner = emulator.loop.call(lambda: start_site(received.app(), port))
    try:
        yield received, f"http://127.0.0.1:{port}"
    finally:
        received.delay = 0
        emulator.loop.call(runner.cleanup)


def _config(tmp_path: Path, emulator: Stage, endpoint: str, **otlp: Any) -> Path:
    url = emulator.emulator_url
    providers = {
        "emu": {"base_url": f"{url}/v1", "api_key": "sk-upstream-secret"},
        "emu-anthropic": {"base_url": url, "api_key": "sk-upstream-secret", "api": "anthropic"},
        "emu-gemini": {"base_url": url, "api_key": "sk-upstream-secret", "api": "gemini"},
    }
    return write_config(
        tmp_path / "proxy.yaml",
        url,
        MODELS,
        providers=providers,
        routing={"attempts": 2, "backoff": {"base": 0}},
        access_log=True,
        telemetry={"otlp": {"endpoint": endpoint, **otlp}},
    )


def _traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent}-01", trace_id, parent


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url, api_key=ALPHA_KEY, max_retries=0, default_headers={"Connection": "close"}
    )


def _upstream_traceparents(emulator: Stage) -> list[str]:
    with urllib.request.urlopen(f"{emulator.emulator_url}/_emulator/requests") as response:
        log = json.loads(response.read())
    return [entry["headers"].get("traceparent", "") for entry in log]


def _forget_upstream_requests(emulator: Stage) -> None:
    request = urllib.request.Request(f"{emulator.emulator_url}/_emulator/requests", method="DELETE")
    urllib.request.urlopen(request).close()


@pytest.fixture
def fast_export(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spans leave every 100 ms, not every 5 s: the test waits for them.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")


def test_every_request_is_a_trace_continuing_the_clients(
    emulator: Stage, receiver: tuple[Receiver, str], tmp_path: Path, fast_export: None
) -> None:
    received, endpoint = receiver
    config = _config(tmp_path, emulator, endpoint, metrics=True)
    _forget_upstream_requests(emulator)
    asked: dict[str, tuple[str, str]] = {}  # trace id -> (what, parent span id)
    answer_ids: dict[str, str] = {}  # trace id -> the id of the answer the client got
    with serve(config, 2, tmp_path / "tmp") as served, _client(served.url) as client:
        for model in ("gpt", "claude", "gemini"):
            for stream in (False, True):
                header, trace_id, parent = _traceparent()
                asked[trace_id] = (f"{model}/{'stream' if stream else 'whole'}", parent)
                made = client.chat.completions.create(
                    model=model,
                    messages=HELLO,
                    stream=stream,
                    extra_headers={"traceparent": header},
                    **({"stream_options": {"include_usage": True}} if stream else {}),
                )
                if stream:
                    for chunk in made:  # type: ignore[union-attr]
                        answer_ids[trace_id] = chunk.id
                else:
                    answer_ids[trace_id] = made.id  # type: ignore[union-attr]
        # The other endpoints: legacy completions, and the Responses API (translated to chat).
        header, trace_id, parent = _traceparent()
        asked[trace_id] = ("completions", parent)
        client.completions.create(model="gpt", prompt="Say", extra_headers={"traceparent": header})
        header, trace_id, parent = _traceparent()
        asked[trace_id] = ("responses", parent)
        client.responses.create(model="gpt", input="Hello", extra_headers={"traceparent": header})
        header, trace_id, parent = _traceparent()
        asked[trace_id] = ("fallback", parent)
        client.chat.completions.create(
            model="fallback", messages=HELLO, extra_headers={"traceparent": header}
        )
        header, trace_id, parent = _traceparent()
        asked[trace_id] = ("broken", parent)
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(
                model="broken", messages=HELLO, extra_headers={"traceparent": header}
            )
        header, trace_id, parent = _traceparent()
        asked[trace_id] = ("left", parent)
        with client.chat.completions.create(
            model="stalled", messages=HELLO, stream=True, extra_headers={"traceparent": header}
        ) as chunks:
            next(iter(chunks))  # one chunk, then the client leaves mid-stream

        # Every request's server span has arrived (the one the client left ends with its cut).
        def arrived() -> bool:
            servers = {s.trace_id for s in received.spans if s.kind == "SERVER"}
            return set(asked) <= servers

        wait_for(arrived, "every request's server span", seconds=30)
        samples = read_samples(scrape(served.root + "/metrics"))
        wait_for(lambda: "gen_ai.client.token.usage" in received.metric_names, "the OTLP metrics")
        lines = "".join(served.lines)
    spans = [s for s in received.spans if s.trace_id in asked]
    by_trace: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)

    # Two workers exported, each with a service.instance.id of its own.
    instances = {s.resource["service.instance.id"] for s in received.spans}
    assert len(instances) == 2, instances
    assert {s.resource["service.name"] for s in received.spans} == {"llm-proxy"}

    upstream = _upstream_traceparents(emulator)
    for trace_id, (what, parent) in asked.items():
        tree = by_trace[trace_id]
        (server,) = [s for s in tree if s.kind == "SERVER"]
        attempts = sorted((s for s in tree if s.kind == "CLIENT"), key=lambda s: s.start)
        # The server span continues the client's trace; every attempt is its child.
        assert server.parent_span_id == parent, what
        path = {"completions": "/v1/completions", "responses": "/v1/responses"}.get(
            what, "/v1/chat/completions"
        )
        assert server.name == f"POST {path}"
        assert server.attributes["http.request.method"] == "POST"
        assert server.attributes["url.path"] == path
        assert server.attributes["http.route"] == path
        assert all(a.parent_span_id == server.span_id for a in attempts), what
        # The upstream was asked with the attempt's own context.
        for attempt in attempts:
            assert f"00-{trace_id}-{attempt.span_id}-01" in upstream, what
        # The trace id is in the request's access log line.
        assert f'"trace_id":"{trace_id}"' in lines, what
        last = attempts[-1].attributes
        operation = "text_completion" if what == "completions" else "chat"
        assert last["gen_ai.operation.name"] == operation
        assert attempts[-1].name == f"{operation} {last['gen_ai.request.model']}"
        assert last["llm_proxy.team"] == "alpha"
        assert [a.attributes["llm_proxy.attempt"] for a in attempts] == list(
            range(1, len(attempts) + 1)
        )
        if what == "fallback":
            assert len(attempts) == 2
            assert attempts[0].error and attempts[0].attributes["error.type"] == "500"
            assert "gen_ai.response.id" not in attempts[0].attributes
            assert last["gen_ai.response.model"] == UPSTREAM_MODELS["gpt"]
            assert not attempts[1].error and not server.error
            assert server.attributes["http.response.status_code"] == 200
        elif what == "broken":
            assert len(attempts) == 2 and all(a.error for a in attempts)
            assert server.error and server.attributes["http.response.status_code"] >= 500
        elif what == "left":
            assert len(attempts) == 1 and not server.error
            assert last["llm_proxy.client_disconnected"] is True
            assert last["gen_ai.request.stream"] is True
        elif what in ("completions", "responses"):
            assert len(attempts) == 1 and not server.error and not attempts[0].error
            assert last["gen_ai.usage.output_tokens"] > 0
            assert last["gen_ai.response.model"] == UPSTREAM_MODELS[what], what
            assert last["gen_ai.response.finish_reasons"], what
        else:
            model, kind = what.split("/")
            assert len(attempts) == 1 and not server.error and not attempts[0].error
            assert last["gen_ai.request.stream"] is (kind == "stream")
            assert last["gen_ai.usage.output_tokens"] > 0
            expected = {"gpt": "emu", "claude": "anthropic", "gemini": "gcp.gemini"}[model]
            assert last["gen_ai.provider.name"] == expected
            assert last["server.address"] == "127.0.0.1"
            if kind == "stream":
                assert last["gen_ai.response.time_to_first_chunk"] >= 0
            # What the answer said of itself: the client's id, the upstream's model as the
            # recording has it (the client saw its own name), how its one choice ended.
            assert last["gen_ai.response.id"] == answer_ids[trace_id], what
            assert last["gen_ai.response.model"] == UPSTREAM_MODELS[model], what
            assert last["gen_ai.response.finish_reasons"] == ("stop",), what

    # Usage on the spans is what Prometheus counted, model by model.
    for model in ("gpt", "claude", "gemini", "fallback"):  # gpt: chat, completions, responses
        ends = [
            s
            for s in spans
            if s.kind == "CLIENT"
            and s.attributes["llm_proxy.model"] == model
            and "gen_ai.usage.input_tokens" in s.attributes
        ]
        for kind, key in (("prompt", "input_tokens"), ("completion", "output_tokens")):
            counted = total(samples, "llm_proxy_tokens_total", model=model, type=kind)
            assert sum(s.attributes[f"gen_ai.usage.{key}"] for s in ends) == counted, model
    assert total(samples, "llm_proxy_telemetry_dropped_spans_total") == 0


def test_a_collector_that_hangs_costs_requests_nothing_but_counted_spans(
    emulator: Stage,
    receiver: tuple[Receiver, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received, endpoint = receiver
    received.delay = 12.0  # answers after the exporter's 10 s have run out
    # A small queue, exported in small batches at once: the first export hangs, the queue
    # fills behind it.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    config = _config(tmp_path, emulator, endpoint)
    with serve(config, 2, tmp_path / "tmp") as served, _client(served.url) as client:
        for _ in range(5):
            client.chat.completions.create(model="gpt", messages=HELLO)
        wait_for(lambda: received.held > 0, "an export the collector sits on")
        for _ in range(40):
            assert client.chat.completions.create(model="gpt", messages=HELLO).choices
        # Every request was answered while the collector sat on an export.
        assert received.held > 0

        def dropped() -> float:
            samples = read_samples(scrape(served.root + "/metrics"))
            return total(samples, "llm_proxy_telemetry_dropped_spans_total")

        # Bounded: what was not received is held (a queue per worker, the batch being
        # exported included) or counted as dropped.
        spans = 2 * 45
        wait_for(lambda: dropped() >= spans - 2 * 8 - len(received.spans), "dropped spans counted")


def test_a_collector_that_is_gone_costs_requests_nothing_but_counted_spans(
    emulator: Stage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    config = _config(tmp_path, emulator, f"http://127.0.0.1:{free_port()}")
    with serve(config, 2, tmp_path / "tmp") as served, _client(served.url) as client:
        for _ in range(10):
            assert client.chat.completions.create(model="gpt", messages=HELLO).choices

        def dropped() -> float:
            samples = read_samples(scrape(served.root + "/metrics"))
            return total(samples, "llm_proxy_telemetry_dropped_spans_total")

        wait_for(lambda: dropped() == 20, "every span to be counted as dropped", seconds=30)


def test_a_batch_larger_than_the_queue_is_a_startup_error(emulator: Stage, tmp_path: Path) -> None:
    import subprocess

    from tests.support.metrics import CLI, ROOT

    config = _config(tmp_path, emulator, "http://127.0.0.1:4318")
    env = {**os.environ, "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20"}
    for command in (["check-config", str(config)], ["serve", "--config", str(config)]):
        done = subprocess.run(
            [*CLI, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert "max_export_batch_size must be less than or equal to max_queue_size" in (done.stderr)
        assert "Traceback" not in done.stderr
