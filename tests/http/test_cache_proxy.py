"""The response cache (memory backend) through the running proxy, in front of the emulator and of
a scripted upstream: what is stored, what is served, to whom, and how it is metered.

Every test asks its own question (``ask``: a fresh text), so that the module's one proxy, whose
cache outlives each test, never answers one test from another's entry.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from proxy.core.exchange import Exchange
from proxy.http.state import Observer
from proxy.ops.access_log import access_record
from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers, upstream_requests
from tests.support.hostile import EVENT_STREAM_HEAD, chunk, proxied
from tests.support.metrics import read_samples, total
from tests.support.schema import validate, validate_completion_chunk

OPTED_OUT_KEY = "sk-team-opted-out-0001"
BUDGET_KEY = "sk-team-budget-00001"
RPM_KEY = "sk-team-rpm-0000001"

MODELS = {
    "cached": {"provider": "emu", "model": "openai"},
    "cached-tools": {"provider": "emu", "model": "openai.chat.stream.tool-calls.sse"},
    "cached-500": {"provider": "emu", "model": "openai@status=500"},
    "cached-cut": {"provider": "emu", "model": "openai@reset-after=600"},
    "cached-embed": {"provider": "emu", "model": "contract.openai.embeddings.json"},
    "plain": {"provider": "emu", "model": "openai"},
}
TEAMS = {
    "research": {"keys": [TEAM_KEY], "models": ["*"]},
    "support": {"keys": [SUPPORT_KEY], "models": ["*"]},
    "opted-out": {"keys": [OPTED_OUT_KEY], "models": ["*"], "cache": False},
    # A budget one answer spends (its prompt is reserved at ~4 bytes a token, its completion
    # at the model's ceiling, and the recorded answer says it used more than 30 tokens).
    "budget": {
        "keys": [BUDGET_KEY],
        "models": ["*"],
        "limits": {"budget": {"tokens": 100000, "period": "day"}},
    },
    "rpm": {"keys": [RPM_KEY], "models": ["*"], "limits": {"requests_per_minute": 2}},
}
CACHE = {"models": ["cached*"], "ttl_seconds": 3600}


class Seen(Observer):
    """Every finished request's exchange, as metrics and the access log see it."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    def finished(self, exchange: Exchange) -> None:
        self.exchanges.append(exchange)


@pytest.fixture(scope="module")
def seen() -> Seen:
    return Seen()


@pytest.fixture(scope="module")
def cached(servers: Servers, seen: Seen) -> str:
    url, _, _ = servers.start_app(MODELS, metrics=True, observers=[seen], teams=TEAMS, cache=CACHE)
    return url


def ask() -> str:
    return f"Say something about {uuid.uuid4().hex}"


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "cached", "messages": [{"role": "user", "content": text}], **extra}


async def post(
    url: str, path: str, body: dict[str, Any], key: str = TEAM_KEY, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + path, json=body, headers={"Authorization": f"Bearer {key}", **headers}
        ) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def reached(servers: Servers, text: str) -> int:
    """How many requests holding ``text`` the upstream received."""
    return sum(text in orjson.dumps(r["json"]).decode() for r in await upstream_requests(servers))


def chunks(body: bytes) -> list[dict[str, Any]]:
    frames = [frame for frame in body.split(b"\n\n") if frame]
    assert frames[-1] == b"data: [DONE]"
    return [orjson.loads(frame[6:]) for frame in frames[:-1]]


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Response's output items but for their ids, which each Response makes its own."""
    return [{key: value for key, value in item.items() if key != "id"} for item in output]


def content_of(stream: list[dict[str, Any]]) -> str:
    return "".join(
        choice["delta"].get("content") or "" for chunk in stream for choice in chunk["choices"]
    )


# --- hits and misses ----------------------------------------------------------------------


async def test_a_repeated_request_reaches_the_upstream_once(cached: str, servers: Servers) -> None:
    text = ask()
    status, headers, first = await post(cached, "/chat/completions", chat_body(text))
    assert status == 200
    assert headers["X-Cache"] == "miss"
    assert "Age" not in headers
    for _ in range(3):
        status, headers, again = await post(cached, "/chat/completions", chat_body(text))
        assert status == 200
        assert headers["X-Cache"] == "hit"
        assert headers["Age"] == "0"
        assert headers["X-Usage-Source"] == "upstream"
        assert again == first
    validate(orjson.loads(again), "CreateChatCompletionResponse")
    assert await reached(servers, text) == 1


def test_the_openai_sdk_reads_hits_whole_and_streamed(cached: str, servers: Servers) -> None:
    text = ask()
    with openai.OpenAI(base_url=cached, api_key=TEAM_KEY, max_retries=0) as client:
        messages: Any = [{"role": "user", "content": text}]
        raw = client.chat.completions.with_raw_response.create(model="cached", messages=messages)
        whole = raw.parse()
        assert raw.headers["x-cache"] == "miss"
        stream = client.chat.completions.create(
            model="cached",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces = list(stream)
    assert "".join(p.choices[0].delta.content or "" for p in pieces if p.choices) == (
        whole.choices[0].message.content
    )
    assert pieces[-1].usage == whole.usage
    assert servers.loop.call(lambda: reached(servers, text)) == 1


@pytest.mark.parametrize("first_streamed", [True, False])
@pytest.mark.parametrize("include_usage", [True, False])
async def test_streams_and_whole_answers_share_an_entry(
    cached: str, servers: Servers, first_streamed: bool, include_usage: bool
) -> None:
    text = ask()
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    streamed = chat_body(text, stream=True, **options)
    whole = chat_body(text)
    answers = {}
    for stream in (first_streamed, not first_streamed, first_streamed):
        status, headers, body = await post(
            cached, "/chat/completions", streamed if stream else whole
        )
        assert status == 200
        answers.setdefault(stream, []).append((headers["X-Cache"], body))
    assert [cache for cache, _ in answers[first_streamed]] == ["miss", "hit"]
    assert [cache for cache, _ in answers[not first_streamed]] == ["hit"]
    assert await reached(servers, text) == 1
    completion = orjson.loads(answers[False][0][1])
    validate(completion, "CreateChatCompletionResponse")
    for _, body in answers[True]:
        stream_chunks = chunks(body)
        for payload in stream_chunks:
            validate(payload, "CreateChatCompletionStreamResponse")
        assert stream_chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert content_of(stream_chunks) == completion["choices"][0]["message"]["content"]
        finishes = [c["finish_reason"] for p in stream_chunks for c in p["choices"]]
        assert finishes[-1] == completion["choices"][0]["finish_reason"]
        usage = [p["usage"] for p in stream_chunks if p.get("usage")]
        assert usage == ([completion["usage"]] if include_usage else [])


async def test_tool_calls_are_replayed_in_both_shapes(cached: str, servers: Servers) -> None:
    text = ask()
    body = {"model": "cached-tools", "messages": [{"role": "user", "content": text}]}
    status, headers, _ = await post(cached, "/chat/completions", {**body, "stream": True})
    assert (status, headers["X-Cache"]) == (200, "miss")
    status, headers, whole = await post(cached, "/chat/completions", body)
    assert (status, headers["X-Cache"]) == (200, "hit")
    message = orjson.loads(whole)["choices"][0]["message"]
    assert message["tool_calls"]
    status, headers, replayed = await post(cached, "/chat/completions", {**body, "stream": True})
    assert (status, headers["X-Cache"]) == (200, "hit")
    calls: dict[int, dict[str, str]] = {}
    for payload in chunks(replayed):
        validate(payload, "CreateChatCompletionStreamResponse")
        for fragment in payload["choices"][0]["delta"].get("tool_calls", ()):
            call = calls.setdefault(fragment["index"], {"name": "", "arguments": ""})
            call["name"] += fragment["function"].get("name") or ""
            call["arguments"] += fragment["function"].get("arguments") or ""
    assert [calls[i] for i in sorted(calls)] == [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message["tool_calls"]
    ]
    assert chunks(replayed)[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert await reached(servers, text) == 1


async def test_legacy_completions(cached: str, servers: Servers) -> None:
    text = ask()
    body = {"model": "cached", "prompt": text, "max_tokens": 20}
    status, headers, _ = await post(cached, "/completions", {**body, "stream": True})
    assert (status, headers["X-Cache"]) == (200, "miss")
    status, headers, whole = await post(cached, "/completions", body)
    assert (status, headers["X-Cache"]) == (200, "hit")
    completion = orjson.loads(whole)
    validate(completion, "CreateCompletionResponse")
    status, headers, again = await post(cached, "/completions", {**body, "stream": True})
    assert (status, headers["X-Cache"]) == (200, "hit")
    replayed = chunks(again)
    for payload in replayed:
        validate_completion_chunk(payload)
    assert (
        "".join(c["text"] for p in replayed for c in p["choices"])
        == (completion["choices"][0]["text"])
    )
    # A chat request of the same words is another entry.
    status, headers, _ = await post(cached, "/chat/completions", chat_body(text))
    assert headers["X-Cache"] == "miss"
    assert await reached(servers, text) == 2


async def test_embeddings(cached: str, servers: Servers) -> None:
    text = ask()
    body = {"model": "cached-embed", "input": [text], "encoding_format": "float"}
    _, headers, first = await post(cached, "/embeddings", body)
    assert headers["X-Cache"] == "miss"
    _, headers, again = await post(cached, "/embeddings", body)
    assert headers["X-Cache"] == "hit"
    assert again == first
    validate(orjson.loads(again), "CreateEmbeddingResponse")
    # Another encoding is another answer.
    _, headers, _ = await post(cached, "/embeddings", {**body, "encoding_format": "base64"})
    assert headers["X-Cache"] == "miss"
    assert await reached(servers, text) == 2


async def test_the_responses_api(cached: str, servers: Servers) -> None:
    text = ask()
    body = {"model": "cached", "input": text, "store": False}
    status, headers, whole = await post(cached, "/responses", body)
    assert (status, headers["X-Cache"]) == (200, "miss")
    first = orjson.loads(whole)
    status, headers, again = await post(cached, "/responses", body)
    assert (status, headers["X-Cache"]) == (200, "hit")
    second = orjson.loads(again)
    validate(second, "Response")
    assert second["id"] != first["id"]  # every response is one of its own
    assert without_ids(second["output"]) == without_ids(first["output"])
    assert second["usage"] == first["usage"]
    status, headers, streamed = await post(cached, "/responses", {**body, "stream": True})
    assert (status, headers["X-Cache"]) == (200, "hit")
    events = [
        orjson.loads(frame.split(b"\ndata: ", 1)[1]) for frame in streamed.split(b"\n\n") if frame
    ]
    for event in events:
        validate(event, "ResponseStreamEvent")
    assert events[-1]["type"] == "response.completed"
    assert without_ids(events[-1]["response"]["output"]) == without_ids(first["output"])
    # A chat request of the same words is another entry.
    _, headers, _ = await post(cached, "/chat/completions", chat_body(text))
    assert headers["X-Cache"] == "miss"
    assert await reached(servers, text) == 2


# --- who reads what -----------------------------------------------------------------------


async def test_a_team_never_reads_another_teams_entry(cached: str, servers: Servers) -> None:
    text = ask()
    for key, expected in [
        (TEAM_KEY, "miss"),
        (SUPPORT_KEY, "miss"),
        (TEAM_KEY, "hit"),
        (SUPPORT_KEY, "hit"),
    ]:
        _, headers, _ = await post(cached, "/chat/completions", chat_body(text), key=key)
        assert headers["X-Cache"] == expected
    assert await reached(servers, text) == 2


async def test_global_scope_shares_entries(servers: Servers) -> None:
    url, _, _ = servers.start_app(MODELS, teams=TEAMS, cache={**CACHE, "scope": "global"})
    text = ask()
    _, headers, _ = await post(url, "/chat/completions", chat_body(text), key=TEAM_KEY)
    assert headers["X-Cache"] == "miss"
    _, headers, _ = await post(url, "/chat/completions", chat_body(text), key=SUPPORT_KEY)
    assert headers["X-Cache"] == "hit"
    assert await reached(servers, text) == 1


@pytest.mark.parametrize(
    ("model", "key"), [("plain", TEAM_KEY), ("cached", OPTED_OUT_KEY)], ids=["model", "team"]
)
async def test_uncached_answers_carry_no_header(
    cached: str, servers: Servers, model: str, key: str
) -> None:
    text = ask()
    for _ in range(2):
        status, headers, _ = await post(
            cached, "/chat/completions", {**chat_body(text), "model": model}, key=key
        )
        assert status == 200
        assert "X-Cache" not in headers
    assert await reached(servers, text) == 2


async def test_each_field_of_the_key_through_the_proxy(cached: str, servers: Servers) -> None:
    text = ask()
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    base = chat_body(text, tools=[tool])
    variants = [
        {"tool_choice": "none"},
        {"tool_choice": "auto"},
        {"temperature": 0.2},
        {"seed": 1},
        {"response_format": {"type": "json_object"}},
    ]
    for extra in [{}, *variants]:
        _, headers, _ = await post(cached, "/chat/completions", {**base, **extra})
        assert headers["X-Cache"] == "miss", extra
    # Not keyed: who asks, and how the answer is delivered.
    _, headers, _ = await post(cached, "/chat/completions", {**base, "user": "someone"})
    assert headers["X-Cache"] == "hit"
    assert await reached(servers, text) == 1 + len(variants)


# --- request controls ---------------------------------------------------------------------


async def test_no_cache_refreshes_the_entry(cached: str, servers: Servers) -> None:
    text = ask()
    await post(cached, "/chat/completions", chat_body(text))
    _, headers, _ = await post(
        cached, "/chat/completions", chat_body(text), **{"Cache-Control": "no-cache"}
    )
    assert headers["X-Cache"] == "miss"
    assert await reached(servers, text) == 2
    _, headers, _ = await post(cached, "/chat/completions", chat_body(text))
    assert headers["X-Cache"] == "hit"
    assert await reached(servers, text) == 2


async def test_no_store_neither_reads_nor_writes(cached: str, servers: Servers) -> None:
    text = ask()
    for _ in range(2):
        _, headers, _ = await post(
            cached, "/chat/completions", chat_body(text), **{"Cache-Control": "no-store"}
        )
        assert headers["X-Cache"] == "bypass"
    _, headers, _ = await post(cached, "/chat/completions", chat_body(text))
    assert headers["X-Cache"] == "miss"  # nothing was stored
    _, headers, _ = await post(
        cached, "/chat/completions", chat_body(text), **{"Cache-Control": "no-store"}
    )
    assert headers["X-Cache"] == "bypass"  # an entry there is not read either
    assert await reached(servers, text) == 4


async def test_max_age(cached: str, servers: Servers) -> None:
    text = ask()
    await post(cached, "/chat/completions", chat_body(text))
    await asyncio.sleep(1.1)
    _, headers, _ = await post(
        cached, "/chat/completions", chat_body(text), **{"Cache-Control": "max-age=60"}
    )
    assert headers["X-Cache"] == "hit"
    assert int(headers["Age"]) >= 1
    _, headers, _ = await post(
        cached, "/chat/completions", chat_body(text), **{"Cache-Control": "max-age=1"}
    )
    assert headers["X-Cache"] == "miss"  # older than asked: fetched again, and stored
    _, headers, _ = await post(
        cached, "/chat/completions", chat_body(text), **{"Cache-Control": "max-age=1"}
    )
    assert (headers["X-Cache"], headers["Age"]) == ("hit", "0")
    assert await reached(servers, text) == 2


@pytest.mark.parametrize("value", ["max-age=abc", "max-age=", "no-cache=, =,,", "max-age=1e3"])
async def test_a_malformed_cache_control_is_no_error(cached: str, value: str) -> None:
    status, headers, _ = await post(
        cached, "/chat/completions", chat_body(ask()), **{"Cache-Control": value}
    )
    assert status == 200
    assert headers["X-Cache"] == "miss"


# --- what is never stored -----------------------------------------------------------------


async def test_errors_are_not_stored(cached: str, servers: Servers) -> None:
    text = ask()
    for _ in range(2):
        status, headers, body = await post(
            cached, "/chat/completions", {**chat_body(text), "model": "cached-500"}
        )
        assert status == 502  # the upstream's 500, as the proxy tells it
        assert headers["X-Cache"] == "miss"
        validate(orjson.loads(body), "ErrorResponse")
    assert await reached(servers, text) == 2


async def test_cut_streams_are_not_stored(cached: str, servers: Servers) -> None:
    text = ask()
    for _ in range(2):
        status, headers, _ = await post(
            cached, "/chat/completions", {**chat_body(text), "model": "cached-cut", "stream": True}
        )
        assert status == 200
        assert headers["X-Cache"] == "miss"
    assert await reached(servers, text) == 2


def _event(index: int, delta: dict[str, Any], finish: str | None) -> bytes:
    payload = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1764600000,
        "model": "scripted",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _streaming(*choices: tuple[int, str | None]) -> Any:
    """A script streaming one text per choice, each ended by its finish reason (None: none)."""

    async def script(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(EVENT_STREAM_HEAD)
        for index, finish in choices:
            writer.write(chunk(_event(index, {"role": "assistant", "content": "Hi"}, None)))
            if finish is not None:
                writer.write(chunk(_event(index, {}, finish)))
        writer.write(chunk(b"data: [DONE]\n\n") + chunk(b""))
        await writer.drain()

    return script


SCRIPTS = {
    "complete": _streaming((0, "stop")),
    "filtered": _streaming((0, "content_filter")),
    "two-complete": _streaming((0, "stop"), (1, "length")),
    "two-one-unfinished": _streaming((0, "stop"), (1, None)),
    "two-one-filtered": _streaming((0, "stop"), (1, "content_filter")),
}


@pytest.fixture(scope="module")
def scripted(servers: Servers) -> Iterator[tuple[Any, str]]:
    with proxied(servers, SCRIPTS, cache={}) as (upstream, url, _):
        yield upstream, url


@pytest.mark.parametrize(
    ("script", "n", "stored"),
    [
        ("complete", 1, True),
        ("filtered", 1, False),
        ("two-complete", 2, True),
        ("two-one-unfinished", 2, False),
        ("two-one-filtered", 2, False),
        ("two-complete", 3, False),  # three asked for, two answered
    ],
)
@pytest.mark.parametrize("stream", [True, False])
async def test_only_complete_answers_are_stored(
    scripted: tuple[Any, str], script: str, n: int, stored: bool, stream: bool
) -> None:
    upstream, url = scripted
    body = {"model": script, "messages": [{"role": "user", "content": ask()}], "n": n}
    before = upstream.received[script]
    answers = []
    for _ in range(2):
        status, headers, raw = await post(url, "/chat/completions", {**body, "stream": stream})
        assert status == 200
        answers.append(raw)
    assert upstream.received[script] - before == (1 if stored else 2)
    if stored:
        assert headers["X-Cache"] == "hit"
        replayed = (
            [c for p in chunks(answers[1]) for c in p["choices"]]
            if stream
            else orjson.loads(answers[1])["choices"]
        )
        assert sorted({choice["index"] for choice in replayed}) == list(range(n))


# --- limits and metering ------------------------------------------------------------------


async def test_a_hit_is_served_when_the_token_budget_is_spent(servers: Servers) -> None:
    # The recorded answer uses 379 tokens; a request reserves its prompt (~4 bytes a token of
    # its body) and max_tokens: after one answer, the next reservation passes the budget.
    teams = {
        "budget": {
            "keys": [BUDGET_KEY],
            "models": ["*"],
            "limits": {"budget": {"tokens": 600, "period": "day"}},
        }
    }
    url, _, _ = servers.start_app({"cached": MODELS["cached"]}, teams=teams, cache=CACHE)
    body = chat_body(ask(), max_tokens=200)
    status, headers, _ = await post(url, "/chat/completions", body, key=BUDGET_KEY)
    assert (status, headers["X-Cache"]) == (200, "miss")
    other = chat_body(ask(), max_tokens=200)
    status, headers, refusal = await post(url, "/chat/completions", other, key=BUDGET_KEY)
    assert status == 429, refusal
    assert orjson.loads(refusal)["error"]["code"] == "budget"
    status, headers, _ = await post(url, "/chat/completions", body, key=BUDGET_KEY)
    assert (status, headers["X-Cache"]) == (200, "hit")


async def test_a_hit_counts_against_requests_per_minute(cached: str) -> None:
    text = ask()
    results = []
    for _ in range(3):
        status, headers, _ = await post(cached, "/chat/completions", chat_body(text), key=RPM_KEY)
        results.append(
            (status, headers.get("X-Cache"), headers.get("x-ratelimit-remaining-requests"))
        )
    assert results[:2] == [(200, "miss", "1"), (200, "hit", "0")]
    assert results[2][0] == 429
    assert results[2][1] == "hit"


async def test_metrics_and_the_access_log(cached: str, seen: Seen) -> None:
    text = ask()
    before = read_samples(await _scrape(cached))
    _, _, first = await post(cached, "/chat/completions", chat_body(text))
    usage = orjson.loads(first)["usage"]
    for _ in range(2):
        await post(cached, "/chat/completions", chat_body(text))
    await post(cached, "/chat/completions", chat_body(text), **{"Cache-Control": "no-store"})
    await asyncio.sleep(0.3)  # the observers are told in batches
    after = read_samples(await _scrape(cached))

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    labels = {"team": "research", "model": "cached"}
    assert grew("llm_proxy_cache_requests_total", result="miss", **labels) == 1
    assert grew("llm_proxy_cache_requests_total", result="hit", **labels) == 2
    assert grew("llm_proxy_cache_requests_total", result="bypass", **labels) == 1
    saved = {kind: grew("llm_proxy_cache_tokens_saved_total", type=kind, **labels)
             for kind in ("prompt", "completion")}  # fmt: skip
    assert saved == {
        "prompt": 2 * usage["prompt_tokens"],
        "completion": 2 * usage["completion_tokens"],
    }
    # Only the miss and the bypass spent tokens upstream: the hits cost nothing.
    assert grew("llm_proxy_tokens_total", type="completion", **labels) == (
        2 * usage["completion_tokens"]
    )
    assert grew("llm_proxy_requests_total", **labels) == 4
    hits = [e for e in seen.exchanges if e.cache == "hit" and e.model == "cached"]
    record = access_record(hits[-1], datetime.now(UTC))
    assert record["cache"] == "hit"
    assert record["prompt_tokens"] is None  # nothing was spent
    assert record["cost_usd"] is None
    assert record["status"] == 200


async def _scrape(url: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.removesuffix("/v1") + "/metrics") as response,
    ):
        return await response.text()
