"""Metrics of a proxy in this process (one registry), in front of the emulator.

Every case sends real requests (the ``openai`` SDK, aiohttp) and reads the exposition that
GET /metrics serves; token counts are the golden files' usage of each fixture.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.samples import Sample

from proxy.core.exchange import NO_PROVIDER, UNKNOWN_MODEL, UNKNOWN_TEAM, Exchange
from proxy.core.fix_names import FIXES
from proxy.core.usage import estimated_usage
from proxy.ops.metrics import DURATION_BUCKETS, OVERHEAD_BUCKETS, TTFT_BUCKETS, ProxyMetrics
from tests.support.metrics import (
    ALPHA_KEY,
    BETA_KEY,
    HELLO,
    Metered,
    Stage,
    complete_events,
    golden_usage,
    read_samples,
    stage,
    total,
    wait_for,
)
from tests.support.tools import promtool

MODELS: dict[str, Any] = {
    "llama": {"provider": "emu", "model": "friendli"},
    "gpt": {"provider": "emu-b", "model": "openai"},
    "cerebras": {"provider": "emu", "model": "cerebras"},
    "sonar-cut": {"provider": "emu", "model": "perplexity.chat.stream.sse@stall-after=1700"},
    "gpt-cut": {"provider": "emu", "model": "openai.chat.stream.sse@stall-after=2000"},
    "gpt-hang": {"provider": "emu", "model": "openai@hang"},
    "gpt-reset": {"provider": "emu", "model": "openai.chat.stream.sse@reset-after=3000"},
    "gpt-500": {"provider": "emu", "model": "openai@status=500"},
    "gpt-garbage": {"provider": "emu", "model": "openai@garbage"},
    "slow": {"provider": "emu-fast", "model": "openai@hang"},
    "nowhere": {"provider": "down", "model": "openai"},
}
PROVIDERS = ("emu", "emu-b", "emu-fast", "down")


@pytest.fixture(scope="module")
def running() -> Iterator[Stage]:
    with stage() as built:
        yield built


@pytest.fixture
def proxy(running: Stage) -> Metered:
    """A fresh proxy (fresh registry) for each test: totals start at zero. One attempt per
    request: these tests count requests; retries are counted in test_resilience.py."""
    return running.proxy(MODELS, routing={"attempts": 1})


def client(proxy: Metered, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url, api_key=key, max_retries=0)


async def settle(proxy: Metered, seconds: float = 10.0) -> None:
    """Wait until no request is in flight and every request that ended is counted.

    The proxy reports requests to its metrics every few milliseconds (REPORT_DELAY), which
    hold them up to FLUSH_DELAY more, and a scrape of its /metrics writes out what its worker
    holds first: once a scrape shows nothing in flight, everything is counted. (The client may
    see a stream's last byte a moment before the proxy has ended the request.)
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        await scrape(proxy, proxy.config.metrics.token)
        if proxy.value("llm_proxy_requests_in_flight") == 0:
            return
        assert loop.time() < deadline, "requests still in flight"
        await asyncio.sleep(0.01)


async def stream_text(
    api: openai.AsyncOpenAI, model: str, include_usage: bool = False
) -> tuple[str, Any]:
    if include_usage:
        stream = await api.chat.completions.create(
            model=model, messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    else:
        stream = await api.chat.completions.create(model=model, messages=HELLO, stream=True)
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    return text, usage


def expected_tokens(*runs: tuple[str, int]) -> dict[str, int]:
    """The token counts of ``count`` requests of each ``fixture``, by type."""
    out = {"prompt": 0, "completion": 0, "cached": 0, "reasoning": 0}
    for fixture, count in runs:
        for kind, n in golden_usage(fixture).items():
            out[kind] += n * count
    return out


async def test_usage_is_attributed_to_team_model_and_provider(proxy: Metered) -> None:
    alpha, beta = client(proxy, ALPHA_KEY), client(proxy, BETA_KEY)
    async with alpha, beta:
        for _ in range(3):  # streams that never asked for usage are metered all the same
            _, usage = await stream_text(alpha, "llama")
            assert usage is None
        for _ in range(2):
            await alpha.chat.completions.create(model="llama", messages=HELLO)
        await alpha.completions.create(model="llama", prompt="Hello")
        async for _ in await alpha.completions.create(model="llama", prompt="Hello", stream=True):
            pass
        for _ in range(2):
            _, usage = await stream_text(beta, "gpt", include_usage=True)
            assert usage is not None
        await beta.chat.completions.create(model="gpt", messages=HELLO)
        for _ in range(2):
            await stream_text(beta, "cerebras")
    await settle(proxy)

    expected = {
        ("alpha", "llama", "emu"): expected_tokens(
            ("friendli.chat.stream.sse", 3),
            ("friendli.chat.json", 2),
            ("friendli.completions.json", 1),
            ("friendli.completions.stream.sse", 1),
        ),
        ("beta", "gpt", "emu-b"): expected_tokens(
            ("openai.chat.stream.sse", 2), ("openai.chat.json", 1)
        ),
        ("beta", "cerebras", "emu"): expected_tokens(("cerebras.chat.stream.sse", 2)),
    }
    samples = read_samples((await scrape(proxy)).decode())
    for (team, model, provider), tokens in expected.items():
        for kind, count in tokens.items():
            labels = {"team": team, "model": model, "provider": provider, "type": kind}
            assert total(samples, "llm_proxy_tokens_total", **labels, source="upstream") == count
    assert total(samples, "llm_proxy_tokens_total", source="estimated") == 0
    assert expected[("beta", "cerebras", "emu")]["cached"] > 0  # the fixture has both kinds
    assert expected[("beta", "cerebras", "emu")]["reasoning"] > 0

    requests = [
        ({"team": "alpha", "model": "llama", "endpoint": "chat", "stream": "true"}, 3),
        ({"team": "alpha", "model": "llama", "endpoint": "chat", "stream": "false"}, 2),
        ({"team": "alpha", "model": "llama", "endpoint": "completions", "stream": "false"}, 1),
        ({"team": "alpha", "model": "llama", "endpoint": "completions", "stream": "true"}, 1),
        ({"team": "beta", "model": "gpt", "provider": "emu-b", "stream": "true"}, 2),
        ({"team": "beta", "model": "gpt", "provider": "emu-b", "stream": "false"}, 1),
        ({"team": "beta", "model": "cerebras", "provider": "emu", "stream": "true"}, 2),
    ]
    for labels, count in requests:
        assert total(samples, "llm_proxy_requests_total", **labels, status_class="2xx") == count
    assert total(samples, "llm_proxy_requests_total") == 12


async def test_requests_and_streams_in_flight(proxy: Metered) -> None:
    assert proxy.value("llm_proxy_requests_in_flight") == 0
    async with aiohttp.ClientSession() as session:
        # A stream that stalls after its first events, and a request whose upstream hangs.
        stalled = await session.post(
            f"{proxy.url}/chat/completions",
            json={"model": "gpt-cut", "messages": HELLO, "stream": True},
            headers={"Authorization": f"Bearer {ALPHA_KEY}"},
        )
        assert stalled.status == 200
        await stalled.content.readline()
        hanging = asyncio.ensure_future(
            session.post(
                f"{proxy.url}/chat/completions",
                json={"model": "gpt-hang", "messages": HELLO},
                headers={"Authorization": f"Bearer {BETA_KEY}"},
            )
        )
        await wait_value(proxy, "llm_proxy_requests_in_flight", 2, endpoint="chat")
        assert proxy.value("llm_proxy_streams_in_flight", provider="emu") == 1
        assert proxy.value("llm_proxy_streams_in_flight") == 1
        stalled.close()
        await wait_value(proxy, "llm_proxy_streams_in_flight", 0)
        assert proxy.value("llm_proxy_requests_in_flight", endpoint="chat") == 1
        hanging.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hanging
        await settle(proxy)
    assert proxy.value("llm_proxy_client_disconnects_total", team="alpha", model="gpt-cut") == 1
    assert proxy.value("llm_proxy_client_disconnects_total", team="beta", model="gpt-hang") == 1
    # Gone before any response: counted as 499 (4xx), and with no tokens.
    labels = {"team": "beta", "model": "gpt-hang", "status_class": "4xx"}
    assert proxy.value("llm_proxy_requests_total", **labels) == 1
    assert proxy.value("llm_proxy_tokens_total", team="beta") == 0


async def wait_value(proxy: Metered, name: str, value: float, **labels: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while proxy.value(name, **labels) != value:
        assert loop.time() < deadline, f"{name}{labels} never became {value}"
        await asyncio.sleep(0.01)


async def read_until_quiet(response: aiohttp.ClientResponse) -> list[Any]:
    """Everything the proxy sends before its upstream stalls, as payloads."""
    body = b""
    while True:
        try:
            async with asyncio.timeout(0.5):
                data = await response.content.readany()
        except TimeoutError:
            break
        assert data, "the stream ended: the upstream should have stalled"
        body += data
    assert body.endswith(b"\n\n")
    return [orjson.loads(frame[6:]) for frame in body[:-2].split(b"\n\n")]


def received_text(payloads: list[Any]) -> tuple[int, int]:
    """(characters, events) of content the client received."""
    pieces = [
        p["choices"][0]["delta"].get("content")
        for p in payloads
        if "choices" in p and p["choices"] and p["choices"][0]["delta"].get("content")
    ]
    return sum(len(piece) for piece in pieces), len(pieces)


async def abandon(proxy: Metered, model: str, key: str) -> list[Any]:
    """Start a stream, take what comes before the upstream stalls, then hang up."""
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{proxy.url}/chat/completions",
            json={"model": model, "messages": HELLO, "stream": True},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert response.status == 200
        payloads = await read_until_quiet(response)
        response.close()
    return payloads


async def test_an_abandoned_stream_meters_what_was_generated(proxy: Metered) -> None:
    # Perplexity reports cumulative usage on every chunk: the upstream's own count of the part
    # generated is known, up to the last event that arrived whole.
    await abandon(proxy, "sonar-cut", ALPHA_KEY)
    reported = [e["usage"] for e in complete_events("perplexity.chat.stream.sse", 1700)]
    assert len(reported) >= 2 and reported[-1]["completion_tokens"] < 336
    # OpenAI reports usage only at the end: the estimate over what was relayed, marked as one.
    payloads = await abandon(proxy, "gpt-cut", BETA_KEY)
    chars, events = received_text(payloads)
    assert events >= 3
    estimate = estimated_usage(len("Hello"), chars, events)
    await settle(proxy)

    def tokens(team: str, kind: str, source: str) -> float:
        return proxy.value("llm_proxy_tokens_total", team=team, type=kind, source=source)

    assert tokens("alpha", "prompt", "upstream") == reported[-1]["prompt_tokens"]
    assert tokens("alpha", "completion", "upstream") == reported[-1]["completion_tokens"]
    assert proxy.value("llm_proxy_tokens_total", team="alpha", source="estimated") == 0
    assert tokens("beta", "prompt", "estimated") == estimate.prompt_tokens
    assert tokens("beta", "completion", "estimated") == estimate.completion_tokens
    assert proxy.value("llm_proxy_tokens_total", team="beta", source="upstream") == 0
    assert proxy.value("llm_proxy_client_disconnects_total") == 2
    assert proxy.value("llm_proxy_requests_total", status_class="2xx") == 2
    assert proxy.value("llm_proxy_time_to_first_token_seconds_count") == 2


async def test_upstream_errors_by_kind_and_what_failures_meter(proxy: Metered) -> None:
    async with aiohttp.ClientSession() as session:
        for model, stream, status in [
            ("nowhere", True, 502),  # connect
            ("slow", False, 504),  # timeout (first byte)
            ("gpt-500", True, 502),  # status
            ("gpt-garbage", True, 502),  # protocol
            ("gpt-garbage", False, 502),
        ]:
            async with session.post(
                f"{proxy.url}/chat/completions",
                json={"model": model, "messages": HELLO, "stream": stream},
                headers={"Authorization": f"Bearer {ALPHA_KEY}"},
            ) as response:
                assert response.status == status, model
        # A stream that breaks after it began: 200, the part relayed, then one error event.
        async with session.post(
            f"{proxy.url}/chat/completions",
            json={"model": "gpt-reset", "messages": HELLO, "stream": True},
            headers={"Authorization": f"Bearer {BETA_KEY}"},
        ) as response:
            assert response.status == 200
            body = await response.read()
    await settle(proxy)
    payloads = [orjson.loads(frame[6:]) for frame in body[:-2].split(b"\n\n")]
    assert "error" in payloads[-1]
    chars, events = received_text(payloads)
    estimate = estimated_usage(len("Hello"), chars, events)

    def errors(provider: str, kind: str) -> float:
        return proxy.value("llm_proxy_upstream_errors_total", provider=provider, kind=kind)

    assert errors("down", "connect") == 1
    assert errors("emu-fast", "timeout") == 1
    assert errors("emu", "status") == 1
    assert errors("emu", "protocol") == 2
    assert errors("emu", "connect") == 1  # the reset
    assert proxy.value("llm_proxy_upstream_errors_total") == 6
    assert proxy.value("llm_proxy_requests_total", team="alpha", status_class="5xx") == 5
    # Failed with an error status: the upstream reported nothing, so nothing is metered.
    assert proxy.value("llm_proxy_tokens_total", team="alpha") == 0
    # Failed after the first byte: what was generated, estimated.
    labels = {"team": "beta", "model": "gpt-reset", "source": "estimated"}
    assert proxy.value("llm_proxy_tokens_total", **labels, type="prompt") == 2
    assert (
        proxy.value("llm_proxy_tokens_total", **labels, type="completion")
        == estimate.completion_tokens
    )
    assert proxy.value("llm_proxy_requests_total", team="beta", status_class="2xx") == 1
    assert proxy.value("llm_proxy_streams_in_flight") == 0  # never below zero either


async def test_normalization_fixes_count_requests_not_occurrences(proxy: Metered) -> None:
    async with client(proxy, ALPHA_KEY) as alpha:
        await stream_text(alpha, "llama")
        await settle(proxy)
        once = {
            fix: proxy.value("llm_proxy_normalization_fixes_total", provider="emu", fix=fix)
            for fix in FIXES
        }
        # FriendliAI adds a `token` field to every chunk: one request, counted once.
        assert once["extra_fields"] == 1
        assert set(once.values()) <= {0, 1}
        for _ in range(2):
            await stream_text(alpha, "llama")
    await settle(proxy)
    for fix in FIXES:
        labels = {"provider": "emu", "fix": fix}
        assert proxy.value("llm_proxy_normalization_fixes_total", **labels) == 3 * once[fix]
    assert proxy.value("llm_proxy_normalization_fixes_total", provider="emu-b") == 0


async def test_durations_time_to_first_token_and_overhead(proxy: Metered) -> None:
    async with client(proxy, ALPHA_KEY) as alpha:
        for _ in range(3):
            await stream_text(alpha, "llama")
        for _ in range(2):
            await alpha.chat.completions.create(model="llama", messages=HELLO)
        await alpha.models.list()
    await settle(proxy)
    samples = read_samples((await scrape(proxy)).decode())
    duration = "llm_proxy_request_duration_seconds"
    assert total(samples, f"{duration}_count", model="llama", stream="true") == 3
    assert total(samples, f"{duration}_count", model="llama", stream="false") == 2
    labels = {"model": UNKNOWN_MODEL, "provider": NO_PROVIDER, "endpoint": "models"}
    assert total(samples, f"{duration}_count", **labels) == 1
    ttft = "llm_proxy_time_to_first_token_seconds"
    assert total(samples, f"{ttft}_count", model="llama", provider="emu") == 3  # streams only
    overhead = "llm_proxy_overhead_seconds"
    assert total(samples, f"{overhead}_count") == 6
    assert 0 < total(samples, f"{overhead}_sum") < total(samples, f"{duration}_sum")
    # Sub-millisecond overhead falls in buckets below 1 ms, and +Inf holds every observation.
    assert total(samples, f"{overhead}_bucket", le="0.001") >= 1
    assert total(samples, f"{overhead}_bucket", le="+Inf") == 6
    assert total(samples, f"{duration}_bucket", le="600.0") == 6


async def scrape(proxy: Metered, token: str | None = None) -> bytes:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{proxy.root}/metrics", headers=headers) as response,
    ):
        assert response.status == 200, await response.read()
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return await response.read()


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer wrong-token", 401),
        ("Basic bWV0cmljcy10b2tlbg==", 401),
        ("Bearer metrics-token", 200),
        ("bearer metrics-token", 200),  # the scheme is case-insensitive (RFC 9110, 11.1)
    ],
)
async def test_metrics_token(running: Stage, authorization: str | None, status: int) -> None:
    proxy = running.proxy(MODELS, metrics={"token": "metrics-token"})
    headers = {"Authorization": authorization} if authorization else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{proxy.root}/metrics", headers=headers) as response,
    ):
        body = await response.read()
    assert response.status == status
    if status == 401:
        error = orjson.loads(body)["error"]
        assert error["type"] == "authentication_error"
        assert set(error) == {"message", "type", "param", "code"}
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert b"llm_proxy_" not in body
    else:
        assert b"# TYPE llm_proxy_requests_total counter" in body


async def test_made_up_models_and_keys_add_no_series(proxy: Metered) -> None:
    async def send(session: aiohttp.ClientSession, i: int) -> None:
        # Unknown keys, and a team's key with unknown models, paths and stream or not.
        key = ALPHA_KEY if i % 2 else f"sk-made-up-{i}"
        path = ("/chat/completions", "/completions", f"/made-up-{i}")[i % 3]
        body = {"model": f"made-up-{i}", "stream": bool(i % 4 > 1), "messages": HELLO}
        body["prompt"] = "Hi"
        async with session.post(
            proxy.url + path, json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            assert response.status in (401, 404), await response.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(send(session, i) for i in range(42)))
        await settle(proxy)
        before = set(read_samples((await scrape(proxy)).decode()))
        for start in range(42, 1042, 100):
            await asyncio.gather(*(send(session, i) for i in range(start, start + 100)))
    await settle(proxy)
    samples = read_samples((await scrape(proxy)).decode())
    assert set(samples) == before
    assert total(samples, "llm_proxy_requests_total") == 1042
    allowed = {
        "team": {"alpha", "beta", UNKNOWN_TEAM},
        "model": set(MODELS) | {UNKNOWN_MODEL},
        "provider": set(PROVIDERS) | {NO_PROVIDER},
    }
    for _, labels in samples:
        for name, value in labels:
            assert value in allowed.get(name, {value}), (name, value)


async def test_promtool_accepts_the_exposition(proxy: Metered) -> None:
    tool = promtool()
    async with client(proxy, ALPHA_KEY) as alpha:
        await stream_text(alpha, "cerebras")
        await alpha.chat.completions.create(model="llama", messages=HELLO)
    await settle(proxy)
    exposition = await scrape(proxy)
    result = await asyncio.to_thread(
        subprocess.run,
        [tool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stdout.strip() and not result.stderr.strip(), result.stdout + result.stderr


# Durations that land on bucket bounds, between them, below the first and above the last.
OBSERVED = (0.0, 0.005, 0.0051, 0.25, 0.2500001, 1.0, 899.0, 900.0, 900.5, 1e9, 0.003, 0.25)


def test_histograms_held_between_flushes_match_observing_each_value() -> None:
    """ProxyMetrics tallies observations and writes each histogram's sum and buckets once per
    flush, through prometheus_client's own values: the exposition is what one observe() per
    value gives, bucket for bucket (this fails if prometheus_client changes how it keeps them)."""
    tallied = CollectorRegistry()
    metrics = ProxyMetrics(tallied, ["emu"])
    observed = CollectorRegistry()
    reference = {
        name: Histogram(name, "reference", labels, registry=observed, buckets=buckets)
        for name, labels, buckets in (
            ("llm_proxy_request_duration_seconds", ("model", "provider"), DURATION_BUCKETS),
            ("llm_proxy_time_to_first_token_seconds", ("model", "provider"), TTFT_BUCKETS),
            ("llm_proxy_overhead_seconds", ("model", "provider"), OVERHEAD_BUCKETS),
        )
    }
    for flush_after, seconds in enumerate(OBSERVED):
        exchange = Exchange("id", "chat", 100.0, "alpha", "llama", "emu")
        exchange.stream, exchange.status = True, 200
        exchange.first_token_at = exchange.ended = 100.0 + seconds
        metrics.started(exchange)
        metrics.finished(exchange)
        for histogram in reference.values():
            histogram.labels("llama", "emu").observe(seconds)
        if flush_after % 5 == 4:
            metrics.flush()  # some values in each of three flushes
    metrics.flush()
    for name in reference:
        for suffix in ("_bucket", "_count", "_sum"):
            got = {
                sample.labels.get("le"): sample.value
                for sample in _samples(tallied, name + suffix)
                if sample.labels.get("model", "llama") == "llama"
            }
            want = {
                sample.labels.get("le"): sample.value
                for sample in _samples(observed, name + suffix)
            }
            assert got == pytest.approx(want), name + suffix
            assert got  # the metric was there to compare


def _samples(registry: CollectorRegistry, name: str) -> list[Sample]:
    return [
        sample for family in registry.collect() for sample in family.samples if sample.name == name
    ]


def test_cost_is_counted_from_the_prices_and_unpriced_models_are_told(running: Stage) -> None:
    """Issue 39, cost: each request's tokens at the model's prices (uncached prompt, cached
    prompt and completion apart), per team and model; a model with no price is counted as
    unpriced, never as free."""
    proxy = running.proxy(
        {
            "gpt": {"provider": "emu", "model": "openai"},
            "llama": {"provider": "emu", "model": "friendli"},
        },
        prices={"gpt": {"input": 0.15, "cached_input": 0.075, "output": 0.6}},
    )
    with openai.OpenAI(base_url=proxy.url, api_key=ALPHA_KEY, max_retries=0) as client:
        for _ in range(5):
            client.chat.completions.create(model="gpt", messages=HELLO)
        for _ in range(3):
            client.chat.completions.create(model="llama", messages=HELLO)
    usage = golden_usage("openai.chat.json")
    one = (
        (usage["prompt"] - usage["cached"]) * 0.15
        + usage["cached"] * 0.075
        + usage["completion"] * 0.6
    ) / 1e6
    assert one > 0
    wait_for(lambda: proxy.value("llm_proxy_unpriced_requests_total") == 3, "the counts")
    assert proxy.value("llm_proxy_cost_usd_total", team="alpha", model="gpt") == pytest.approx(
        5 * one
    )
    assert proxy.value("llm_proxy_cost_usd_total", model="llama") == 0
    assert proxy.value("llm_proxy_unpriced_requests_total", model="llama", team="alpha") == 3
    assert proxy.value("llm_proxy_unpriced_requests_total", model="gpt") == 0
