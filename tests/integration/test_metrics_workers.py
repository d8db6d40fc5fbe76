"""Exact metering with ``llm-proxy serve --workers 2``: real processes, one port, one scrape.

The emulator runs in this process; the proxy is the command a user runs. Requests go over
fresh connections, so the kernel spreads them over both workers, and so do scrapes: each one,
whichever worker answers it, must report the exact totals of the run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from proxy.core.usage import estimated_usage
from tests.support.harness import free_port
from tests.support.metrics import (
    ALPHA_KEY,
    BETA_KEY,
    HELLO,
    TEAMS,
    Served,
    Stage,
    complete_events,
    exposed_metrics,
    golden_usage,
    http_status,
    read_samples,
    readme_metrics,
    scrape,
    serve,
    stage,
    total,
    wait_for,
    worker_pids,
    write_config,
)
from tests.support.replay import EMBEDDINGS, recordings
from tests.support.tools import promtool

MODELS: dict[str, Any] = {
    "llama": {"provider": "emu", "model": "friendli"},
    "gpt": {"provider": "emu-b", "model": "openai"},
    "cerebras": {"provider": "emu", "model": "cerebras"},
    "sonar-cut": {"provider": "emu", "model": "perplexity.chat.stream.sse@stall-after=1700"},
    "gpt-cut": {"provider": "emu", "model": "openai.chat.stream.sse@stall-after=2000"},
    "gpt-reset": {"provider": "emu", "model": "openai.chat.stream.sse@reset-after=3000"},
    "gpt-500": {"provider": "emu", "model": "openai@status=500"},
}
TOKEN_TYPES = ("prompt", "completion", "cached", "reasoning")


@pytest.fixture(scope="module")
def emulator() -> Iterator[Stage]:
    with stage() as built:
        yield built


def fresh_client(served: Served, key: str) -> openai.OpenAI:
    # No keep-alive: every request is a new connection, which either worker may accept.
    return openai.OpenAI(
        base_url=served.url,
        api_key=key,
        max_retries=0,
        default_headers={"Connection": "close"},
    )


def stream(api: openai.OpenAI, model: str, include_usage: bool = False) -> None:
    if include_usage:
        chunks = api.chat.completions.create(
            model=model, messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    else:
        chunks = api.chat.completions.create(model=model, messages=HELLO, stream=True)
    for _ in chunks:
        pass


def expected_totals(runs: dict[tuple[str, str, str], list[tuple[str, int]]]) -> dict[Any, int]:
    """(team, model, provider, type) -> tokens, from golden usage times request counts."""
    out: dict[Any, int] = {}
    for (team, model, provider), fixtures in runs.items():
        for fixture, count in fixtures:
            for kind, n in golden_usage(fixture).items():
                key = (team, model, provider, kind)
                out[key] = out.get(key, 0) + n * count
    return out


def check_totals(
    text: str, tokens: dict[Any, int], requests: dict[Any, int], source: str = "upstream"
) -> list[str]:
    """What differs between an exposition and the expected totals (nothing: an empty list)."""
    samples = read_samples(text)
    wrong = []
    for (team, model, provider, kind), count in tokens.items():
        labels = {"team": team, "model": model, "provider": provider, "type": kind}
        got = total(samples, "llm_proxy_tokens_total", **labels, source=source)
        if got != count:
            wrong.append(f"tokens {labels}: {got} != {count}")
    for (team, model, status_class), count in requests.items():
        labels = {"team": team, "model": model, "status_class": status_class}
        got = total(samples, "llm_proxy_requests_total", **labels)
        if got != count:
            wrong.append(f"requests {labels}: {got} != {count}")
    if total(samples, "llm_proxy_requests_in_flight") != 0:
        wrong.append("requests still in flight")
    return wrong


def scrape_until_exact(url: str, tokens: dict[Any, int], requests: dict[Any, int]) -> str:
    """Scrape until the totals are exact (the last requests may still be finishing), then
    twelve times more: every answer, from either worker, must be exact."""
    last: list[str] = [""]

    def exact() -> bool:
        last[0] = scrape(url)
        return not check_totals(last[0], tokens, requests)

    wait_for(exact, "exact totals")
    for _ in range(12):
        last[0] = scrape(url)
        assert check_totals(last[0], tokens, requests) == []
    return last[0]


def per_worker(directory: Path, name: str, kind: str = "counter") -> dict[int, float]:
    """The value of ``name`` (summed over labels) in each worker's own file of ``kind``."""
    values = {}
    for path in directory.glob(f"{kind}_*.db"):
        pid = int(path.stem.removeprefix(f"{kind}_"))
        # Accumulated, so that a histogram has its _count.
        metrics = MultiProcessCollector.merge([str(path)], accumulate=True)  # type: ignore[no-untyped-call]
        values[pid] = sum(s.value for m in metrics for s in m.samples if s.name == name)
    return values


def test_exact_totals_for_two_teams_across_two_workers(emulator: Stage, tmp_path: Path) -> None:
    # gpt has a price (its cost is counted), the others none (unpriced), and beta has every
    # kind of limit, loose enough to refuse nothing: every metric shows.
    prices = {"gpt": {"input": 0.15, "output": 0.6}}
    limits = {
        "requests_per_minute": 1000,
        "tokens_per_minute": 1_000_000,
        "concurrency": 50,
        "budget": {"tokens": 10_000_000, "period": "day"},
    }
    teams = {**TEAMS, "beta": {**TEAMS["beta"], "limits": limits}}
    config = write_config(
        tmp_path / "proxy.yaml", emulator.emulator_url, MODELS, prices=prices, teams=teams
    )
    with serve(config, 2, tmp_path / "tmp") as served:
        (directory,) = served.metrics_dirs()
        with fresh_client(served, ALPHA_KEY) as alpha, fresh_client(served, BETA_KEY) as beta:
            for _ in range(12):
                stream(alpha, "llama")
            for _ in range(6):
                alpha.chat.completions.create(model="llama", messages=HELLO)
            for _ in range(8):
                stream(beta, "gpt", include_usage=True)
            for _ in range(4):
                beta.chat.completions.create(model="gpt", messages=HELLO)
            for _ in range(4):
                stream(beta, "cerebras")
        tokens = expected_totals(
            {
                ("alpha", "llama", "emu"): [
                    ("friendli.chat.stream.sse", 12),
                    ("friendli.chat.json", 6),
                ],
                ("beta", "gpt", "emu-b"): [("openai.chat.stream.sse", 8), ("openai.chat.json", 4)],
                ("beta", "cerebras", "emu"): [("cerebras.chat.stream.sse", 4)],
            }
        )
        requests = {("alpha", "llama", "2xx"): 18, ("beta", "gpt", "2xx"): 12}
        requests[("beta", "cerebras", "2xx")] = 4
        text = scrape_until_exact(served.root + "/metrics", tokens, requests)

        # Both workers served and wrote their part; the scrape is their sum.
        split = per_worker(directory, "llm_proxy_requests_total")
        assert len(split) == 2 and all(split.values()), split
        assert sum(split.values()) == 34
        samples = read_samples(text)
        for team in ("alpha", "beta"):
            by_team = sum(v for k, v in tokens.items() if k[0] == team and k[3] == "completion")
            assert total(samples, "llm_proxy_tokens_total", team=team, type="completion") == by_team
        assert total(samples, "llm_proxy_tokens_total", source="estimated") == 0
        assert total(samples, "llm_proxy_streams_in_flight") == 0
        # Less the response cache's, which a configuration without a cache never shows
        # (tests/ops/test_metrics_readme.py has them).
        assert exposed_metrics(text) == {
            name: entry
            for name, entry in readme_metrics().items()
            if "disconnect" not in name and "_cache_" not in name
        }
        result = subprocess.run(
            [promtool(), "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
        )
        assert result.returncode == 0, result.stdout + result.stderr
    assert served.process.returncode == 0, "".join(served.lines)
    assert not directory.exists()  # the run's directory is removed at exit


async def abandon(url: str, model: str, key: str) -> tuple[int, int]:
    """Start a stream, take all that comes before the upstream stalls, hang up; returns the
    (characters, events) of content received."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        response = await session.post(
            f"{url}/chat/completions",
            json={"model": model, "messages": HELLO, "stream": True},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert response.status == 200
        body = b""
        while True:
            try:
                async with asyncio.timeout(0.5):
                    data = await response.content.readany()
            except TimeoutError:
                break
            body += data
        response.close()
    return content_of(body)


def content_of(body: bytes) -> tuple[int, int]:
    pieces = []
    for frame in body.split(b"\n\n"):
        if not frame.startswith(b"data: {"):
            continue
        payload = orjson.loads(frame[6:])
        for choice in payload.get("choices") or ():
            if choice["delta"].get("content"):
                pieces.append(choice["delta"]["content"])
    return sum(map(len, pieces)), len(pieces)


async def post(url: str, model: str, key: str, stream: bool) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.post(
            f"{url}/chat/completions",
            json={"model": model, "messages": HELLO, "stream": stream},
            headers={"Authorization": f"Bearer {key}"},
        ) as response,
    ):
        return response.status, await response.read()


async def test_disconnects_and_upstream_errors_across_two_workers(
    emulator: Stage, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "proxy.yaml", emulator.emulator_url, MODELS)
    with serve(config, 2, tmp_path / "tmp") as served:
        # alpha abandons streams whose upstream reports cumulative usage on every chunk...
        for _ in range(3):
            await abandon(served.url, "sonar-cut", ALPHA_KEY)
        # ...beta streams whose upstream reports usage only at the end: estimated.
        received = [await abandon(served.url, "gpt-cut", BETA_KEY) for _ in range(3)]
        # Failures: an upstream 500 (before the first byte), a reset after it.
        for _ in range(3):
            status, _ = await post(served.url, "gpt-500", ALPHA_KEY, stream=True)
            assert status == 502
        for _ in range(2):
            status, body = await post(served.url, "gpt-reset", BETA_KEY, stream=True)
            assert status == 200 and b'"error"' in body
            received.append(content_of(body))

        usage = complete_events("perplexity.chat.stream.sse", 1700)[-1]["usage"]
        upstream = {
            ("alpha", "sonar-cut", "emu", "prompt"): 3 * usage["prompt_tokens"],
            ("alpha", "sonar-cut", "emu", "completion"): 3 * usage["completion_tokens"],
        }
        estimates = [estimated_usage(len("Hello"), chars, events) for chars, events in received]
        estimated = {
            ("beta", "gpt-cut", "emu", "prompt"): sum(e.prompt_tokens for e in estimates[:3]),
            ("beta", "gpt-cut", "emu", "completion"): sum(
                e.completion_tokens for e in estimates[:3]
            ),
            ("beta", "gpt-reset", "emu", "prompt"): sum(e.prompt_tokens for e in estimates[3:]),
            ("beta", "gpt-reset", "emu", "completion"): sum(
                e.completion_tokens for e in estimates[3:]
            ),
        }
        requests = {
            ("alpha", "sonar-cut", "2xx"): 3,
            ("beta", "gpt-cut", "2xx"): 3,
            ("alpha", "gpt-500", "5xx"): 3,
            ("beta", "gpt-reset", "2xx"): 2,
        }
        url = served.root + "/metrics"
        text = await asyncio.to_thread(scrape_until_exact, url, upstream, requests)
        for _ in range(6):
            text = await asyncio.to_thread(scrape, url)
            assert check_totals(text, estimated, {}, source="estimated") == []
            assert check_totals(text, upstream, requests) == []
        samples = read_samples(text)
        assert total(samples, "llm_proxy_tokens_total", team="alpha", source="estimated") == 0
        assert total(samples, "llm_proxy_tokens_total", model="gpt-500") == 0
        assert total(samples, "llm_proxy_client_disconnects_total", team="alpha") == 3
        assert total(samples, "llm_proxy_client_disconnects_total", team="beta") == 3
        assert total(samples, "llm_proxy_upstream_errors_total", kind="status") == 3
        assert total(samples, "llm_proxy_upstream_errors_total", kind="connect") == 2
        assert total(samples, "llm_proxy_streams_in_flight") == 0


def livesum(directory: Path, name: str) -> dict[int, float]:
    values = {}
    for path in directory.glob("gauge_livesum_*.db"):
        pid = int(path.stem.removeprefix("gauge_livesum_"))
        metrics = MultiProcessCollector.merge([str(path)], accumulate=False)  # type: ignore[no-untyped-call]
        values[pid] = sum(s.value for m in metrics for s in m.samples if s.name == name)
    return values


async def test_a_killed_worker_takes_no_counts_back(emulator: Stage, tmp_path: Path) -> None:
    config = write_config(tmp_path / "proxy.yaml", emulator.emulator_url, MODELS)
    with serve(config, 2, tmp_path / "tmp") as served:
        (directory,) = served.metrics_dirs()
        metrics_url = served.root + "/metrics"
        for _ in range(10):
            assert (await post(served.url, "llama", ALPHA_KEY, stream=True))[0] == 200
        tokens = expected_totals({("alpha", "llama", "emu"): [("friendli.chat.stream.sse", 10)]})
        requests = {("alpha", "llama", "2xx"): 10}
        await asyncio.to_thread(scrape_until_exact, metrics_url, tokens, requests)

        # A stream held open on one worker; that worker is then killed outright.
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True)
        ) as session:
            held = await session.post(
                f"{served.url}/chat/completions",
                json={"model": "gpt-cut", "messages": HELLO, "stream": True},
                headers={"Authorization": f"Bearer {BETA_KEY}"},
            )
            await held.content.readline()
            await asyncio.to_thread(
                wait_for,
                lambda: 1 in livesum(directory, "llm_proxy_streams_in_flight").values(),
                "the held stream",
            )
            streams = livesum(directory, "llm_proxy_streams_in_flight")
            (victim,) = [pid for pid, value in streams.items() if value == 1]
            before = set(worker_pids(served))
            assert victim in before
            os.kill(victim, signal.SIGKILL)
            seen: list[float] = []

            def restarted() -> bool:
                try:
                    samples = read_samples(scrape(metrics_url))
                except (ConnectionError, urllib.error.URLError):
                    # Connections the kernel had queued for the killed worker are reset.
                    return False
                seen.append(total(samples, "llm_proxy_requests_total"))
                pids = set(worker_pids(served))
                return (
                    len(pids) == 2
                    and victim not in pids
                    and total(samples, "llm_proxy_streams_in_flight") == 0
                    and total(samples, "llm_proxy_requests_in_flight") == 0
                )

            await asyncio.to_thread(wait_for, restarted, "a new worker and no stream in flight")
            held.close()
        # Never backwards while it died and came back; its counts are all still there.
        assert seen == sorted(seen) and seen[0] == seen[-1] == 10
        await asyncio.to_thread(
            wait_for,
            lambda: sum(" listening on " in line for line in served.lines) >= 3,
            "the new worker to listen",
        )
        for _ in range(10):
            assert (await post(served.url, "llama", ALPHA_KEY, stream=True))[0] == 200
        tokens = expected_totals({("alpha", "llama", "emu"): [("friendli.chat.stream.sse", 20)]})
        requests = {("alpha", "llama", "2xx"): 20}
        await asyncio.to_thread(scrape_until_exact, metrics_url, tokens, requests)
        assert len(list(directory.glob("counter_*.db"))) == 3  # the dead worker's file is kept


async def test_separate_listener_with_a_token(emulator: Stage, tmp_path: Path) -> None:
    metrics_port = free_port()
    config = write_config(
        tmp_path / "proxy.yaml",
        emulator.emulator_url,
        MODELS,
        metrics={"host": "127.0.0.1", "port": metrics_port, "token": "scrape-token"},
    )
    with serve(config, 2, tmp_path / "tmp") as served:
        for _ in range(8):
            assert (await post(served.url, "gpt", BETA_KEY, stream=False))[0] == 200
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        status, _ = await asyncio.to_thread(http_status, served.root + "/metrics")
        assert status == 404  # not on the main listener
        status, body = await asyncio.to_thread(http_status, metrics_url)
        assert status == 401 and orjson.loads(body)["error"]["type"] == "authentication_error"
        tokens = expected_totals({("beta", "gpt", "emu-b"): [("openai.chat.json", 8)]})
        requests = {("beta", "gpt", "2xx"): 8}

        def exact() -> bool:
            return not check_totals(scrape(metrics_url, "scrape-token"), tokens, requests)

        await asyncio.to_thread(wait_for, exact, "exact totals on the metrics listener")
        for _ in range(8):
            assert await asyncio.to_thread(exact)


@pytest.mark.parametrize("enabled", [True, False])
def test_one_worker_uses_no_directory(emulator: Stage, tmp_path: Path, enabled: bool) -> None:
    config = write_config(
        tmp_path / "proxy.yaml", emulator.emulator_url, MODELS, metrics={"enabled": enabled}
    )
    with serve(config, 1, tmp_path / "tmp") as served:
        with fresh_client(served, ALPHA_KEY) as alpha:
            stream(alpha, "llama")
        status, _ = http_status(served.root + "/metrics")
        assert served.metrics_dirs() == []
        if not enabled:
            assert status == 404
            return
        assert status == 200

        def counted() -> bool:
            text = scrape(served.root + "/metrics")
            return total(read_samples(text), "llm_proxy_requests_total", team="alpha") == 1

        wait_for(counted, "the request to be counted")


@pytest.mark.parametrize("interval", [0.05, 0])
def test_each_worker_runs_its_collector_on_a_timer_unless_told_not_to(
    emulator: Stage, tmp_path: Path, interval: float
) -> None:
    config = write_config(
        tmp_path / "proxy.yaml", emulator.emulator_url, MODELS, server={"gc_interval": interval}
    )
    with serve(config, 2, tmp_path / "tmp") as served:
        (directory,) = served.metrics_dirs()
        with fresh_client(served, ALPHA_KEY) as alpha:
            for _ in range(4):
                stream(alpha, "llama")
        name = "llm_proxy_gc_pause_seconds_count"

        def ticked() -> bool:
            counts = per_worker(directory, name, "histogram")
            return len(counts) == 2 and all(count >= 5 for count in counts.values())

        if interval:
            wait_for(ticked, "both workers' collectors to tick")
            samples = read_samples(scrape(served.root + "/metrics"))
            assert total(samples, name, collection="young") >= 10
            # No worker's memory has doubled since it started, nor has a minute passed.
            assert total(samples, name, collection="full") == 0
        else:
            # CPython's own collections run, unreported; the series are there, at zero.
            time.sleep(1)
            samples = read_samples(scrape(served.root + "/metrics"))
            assert total(samples, name, collection="young") == 0
            assert total(samples, name, collection="full") == 0
            assert set(per_worker(directory, name, "histogram").values()) == {0}


def test_responses_and_embeddings_are_metered_exactly_across_two_workers(
    tmp_path: Path,
) -> None:
    """Issue 38: both new endpoints are metered per team like chat, under their own endpoint
    label, exactly, whichever worker served each request."""
    with stage(recordings(tmp_path / "recordings")) as emulator:
        providers = {
            "emu": {"base_url": f"{emulator.emulator_url}/v1"},
            "emu-ollama": {"base_url": emulator.emulator_url, "api": "ollama"},
        }
        models = {
            "gpt": {"provider": "emu", "model": "openai"},
            "embed": {"provider": "emu-ollama", "model": "contract.ollama"},
        }
        config = write_config(
            tmp_path / "proxy.yaml", emulator.emulator_url, models, providers=providers
        )
        with serve(config, 2, tmp_path / "tmp") as served:
            with fresh_client(served, ALPHA_KEY) as alpha, fresh_client(served, BETA_KEY) as beta:
                for _ in range(7):
                    alpha.responses.create(model="gpt", input="Hello")
                for _ in range(5):
                    for _ in alpha.responses.create(model="gpt", input="Hello", stream=True):
                        pass
                for _ in range(9):
                    beta.embeddings.create(model="embed", input=["hello", "goodbye"])
            embedded = orjson.loads((EMBEDDINGS / "contract.ollama.api-embed.json").read_bytes())[
                "prompt_eval_count"
            ]
            tokens = expected_totals(
                {
                    ("alpha", "gpt", "emu"): [
                        ("openai.chat.json", 7),
                        ("openai.chat.stream.sse", 5),
                    ],
                }
            )
            tokens[("beta", "embed", "emu-ollama", "prompt")] = 9 * embedded
            tokens[("beta", "embed", "emu-ollama", "completion")] = 0
            requests = {("alpha", "gpt", "2xx"): 12, ("beta", "embed", "2xx"): 9}
            text = scrape_until_exact(served.root + "/metrics", tokens, requests)
            samples = read_samples(text)
            assert total(samples, "llm_proxy_requests_total", endpoint="responses") == 12
            assert total(samples, "llm_proxy_requests_total", endpoint="embeddings") == 9
            assert total(samples, "llm_proxy_requests_total", endpoint="chat") == 0
            split = per_worker(served.metrics_dirs()[0], "llm_proxy_requests_total")
            assert len(split) == 2 and all(split.values()), split
        assert served.process.returncode == 0, "".join(served.lines)
