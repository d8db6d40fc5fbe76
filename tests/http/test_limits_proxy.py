"""Team limits, budgets and the admin endpoints through the running proxy (one process, its own
store), driven by the openai SDK and raw HTTP (docs/limits.md).

Each test starts a proxy of its own, so its counters start at zero. The chat fixture the
emulator serves for ``openai`` reports 16 prompt and 363 completion tokens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest

from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers

ADMIN_KEY = "sk-test-admin"
HELLO = [{"role": "user", "content": "Hello"}]
PROMPT, COMPLETION = 16, 363  # openai.chat.json's usage
MODELS = {
    "gpt": {"provider": "emu", "model": "openai"},
    "gpt-slow": {"provider": "emu", "model": "openai@slow-first-byte=1.5"},
    "embed": {"provider": "emu", "model": "contract.openai.embeddings.json"},
    # Serves the Responses API itself: a Responses request is passed through to it.
    "native-slow": {"provider": "emu-responses", "model": "contract.openai@slow-first-byte=1.5"},
}
PRICES = {
    "gpt": {"input": 1.0, "cached_input": 0.5, "output": 2.0},
    "gpt-slow": {"input": 1.0, "cached_input": 0.5, "output": 2.0},
    "embed": {"input": 0.1, "output": 0.0},
    "native-slow": {"input": 1.0, "output": 2.0},
}


def start(servers: Servers, limits: dict[str, Any], **extra: Any) -> str:
    teams = {
        "research": {"keys": [TEAM_KEY], "models": ["*"], "limits": limits},
        "support": {"keys": [SUPPORT_KEY], "models": ["*"]},
    }
    url, _ = servers.start_proxy(
        MODELS, teams=teams, admin={"keys": [ADMIN_KEY]}, prices=PRICES, **extra
    )
    return url


@pytest.fixture
def window_start() -> None:
    """Wait, if need be, for a minute with room for a test's requests: per-minute windows are
    fixed, and a test straddling two would see two allowances."""
    left = 60 - time.time() % 60
    if left < 15:
        time.sleep(left + 0.1)


def sdk(url: str, key: str = TEAM_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0)


async def post(
    url: str, body: dict[str, Any], key: str = TEAM_KEY, path: str = "/chat/completions"
) -> tuple[int, Any, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response,
    ):
        return response.status, response.headers, await response.json()


def admin(url: str, path: str, key: str | None = ADMIN_KEY) -> tuple[int, Any]:
    async def get() -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            aiohttp.ClientSession() as session,
            session.get(url.removesuffix("/v1") + path, headers=headers) as response,
        ):
            return response.status, await response.json()

    return asyncio.run(get())


def test_requests_per_minute_admits_the_limit_then_429s(
    servers: Servers, window_start: None
) -> None:
    url = start(servers, {"requests_per_minute": 3})
    with sdk(url) as client:
        for expected in (2, 1, 0):
            raw = client.chat.completions.with_raw_response.create(model="gpt", messages=HELLO)
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-remaining-requests"] == str(expected)
            assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="gpt", messages=HELLO)
    error = refused.value
    assert error.code == "requests_per_minute"
    assert error.body["type"] == "rate_limit_error"  # type: ignore[index]
    retry_after = int(error.response.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    assert error.response.headers["x-ratelimit-remaining-requests"] == "0"
    # Another team's allowance is its own.
    with sdk(url, SUPPORT_KEY) as other:
        assert other.chat.completions.create(model="gpt", messages=HELLO).usage is not None


def test_a_stream_carries_the_headers_too(servers: Servers, window_start: None) -> None:
    url = start(servers, {"requests_per_minute": 5, "tokens_per_minute": 100_000})
    with sdk(url) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt", messages=HELLO, stream=True, max_tokens=1000
        )
        assert raw.headers["x-ratelimit-remaining-requests"] == "4"
        assert int(raw.headers["x-ratelimit-remaining-tokens"]) <= 100_000 - 1000
        assert list(raw.parse())


def test_tokens_per_minute_settles_to_the_usage(servers: Servers, window_start: None) -> None:
    """Reserved: the prompt estimate plus max_tokens; settled: the usage. So the headers of the
    next request show what the first really used."""
    url = start(servers, {"tokens_per_minute": 2000})
    with sdk(url) as client:
        first = client.chat.completions.with_raw_response.create(
            model="gpt", messages=HELLO, max_tokens=1500
        )
        assert int(first.headers["x-ratelimit-remaining-tokens"]) <= 500
        first.parse()
        time.sleep(0.1)  # settled after the answer went out
        second = client.chat.completions.with_raw_response.create(
            model="gpt", messages=HELLO, max_tokens=100
        )
        reserved = 2000 - PROMPT - COMPLETION - int(second.headers["x-ratelimit-remaining-tokens"])
        # max_tokens, and the whole body (about 80 bytes as the SDK sends it), estimated.
        assert 115 <= reserved <= 125
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=1900)
    assert refused.value.code == "tokens_per_minute"
    with sdk(url) as client, pytest.raises(openai.RateLimitError) as whole:
        client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=5000)
    assert "more than the whole limit" in whole.value.message


def test_a_token_budget_is_spent_then_refused(servers: Servers) -> None:
    url = start(servers, {"budget": {"tokens": 1000, "period": "day"}})
    with sdk(url) as client:
        for _ in range(2):  # 379 each: 758 spent, then 379 + 40 reserved would pass 1000
            client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=40)
            time.sleep(0.05)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=400)
    assert refused.value.code == "budget"
    assert int(refused.value.response.headers["Retry-After"]) <= 86400
    status, body = admin(url, "/admin/limits")
    assert status == 200
    research = next(team for team in body["data"] if team["team"] == "research")
    assert research["limits"]["budget"]["used"] == 2 * (PROMPT + COMPLETION)
    assert research["limits"]["budget"]["remaining"] == 1000 - 2 * (PROMPT + COMPLETION)


def test_a_usd_budget_counts_the_cost(servers: Servers) -> None:
    cost = (PROMPT * 1.0 + COMPLETION * 2.0) / 1e6
    url = start(servers, {"budget": {"usd": 0.0015, "period": "month"}})
    with sdk(url) as client:
        client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=400)
        time.sleep(0.05)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="gpt", messages=HELLO, max_tokens=400)
    assert refused.value.code == "budget"
    _, body = admin(url, "/admin/limits")
    budget = body["data"][0]["limits"]["budget"]
    assert budget["kind"] == "usd" and budget["used"] == pytest.approx(cost, abs=1e-9)


async def test_concurrency_holds_the_requests_in_flight(servers: Servers) -> None:
    url = start(servers, {"concurrency": 2})
    body = {"model": "gpt-slow", "messages": HELLO}
    slow = [asyncio.create_task(post(url, body)) for _ in range(2)]
    await asyncio.sleep(0.5)  # both admitted, waiting for their first byte
    status, headers, refused = await post(url, {"model": "gpt", "messages": HELLO})
    assert status == 429 and refused["error"]["code"] == "concurrency"
    assert headers["Retry-After"] == "1"
    assert [result[0] for result in await asyncio.gather(*slow)] == [200, 200]
    await asyncio.sleep(0.05)
    status, _, _ = await post(url, {"model": "gpt", "messages": HELLO})
    assert status == 200


async def test_a_client_that_leaves_frees_its_slot(servers: Servers) -> None:
    url = start(servers, {"concurrency": 1})
    leaving = asyncio.create_task(post(url, {"model": "gpt-slow", "messages": HELLO}))
    await asyncio.sleep(0.3)
    leaving.cancel()
    await asyncio.sleep(0.3)
    status, _, _ = await post(url, {"model": "gpt", "messages": HELLO})
    assert status == 200


def test_admin_endpoints_take_the_admin_key_alone(servers: Servers) -> None:
    url = start(servers, {"requests_per_minute": 100})
    for path in ("/admin/usage", "/admin/limits"):
        status, body = admin(url, path, key=None)
        assert status == 401 and body["error"]["type"] == "authentication_error"
        status, body = admin(url, path, key="sk-nobody")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        status, body = admin(url, path, key=TEAM_KEY)
        assert status == 403 and body["error"]["type"] == "permission_error"
        status, body = admin(url, path)
        assert status == 200, body
    status, body = admin(url, "/admin/other")
    assert status == 404


def test_admin_usage_adds_up_every_request(servers: Servers) -> None:
    url = start(servers, {"requests_per_minute": 1000})
    with sdk(url) as client, sdk(url, SUPPORT_KEY) as support:
        for _ in range(3):
            client.chat.completions.create(model="gpt", messages=HELLO)
        list(client.chat.completions.create(model="gpt", messages=HELLO, stream=True))
        client.embeddings.create(model="embed", input="hello")
        support.chat.completions.create(model="gpt", messages=HELLO)
    time.sleep(0.1)
    month = time.strftime("%Y-%m", time.gmtime())
    status, body = admin(url, f"/admin/usage?period={month}")
    assert status == 200
    assert (body["object"], body["period"], body["granularity"]) == ("usage", month, "month")
    teams = {team["team"]: team for team in body["data"]}
    research = {m["model"]: m for m in teams["research"]["models"]}
    assert research["gpt"]["requests"] == 4
    assert research["gpt"]["prompt_tokens"] == 4 * PROMPT
    # The stream's fixture reports 300 completion tokens.
    assert research["gpt"]["completion_tokens"] == 3 * COMPLETION + 300
    spent = (4 * PROMPT * 1.0 + (3 * COMPLETION + 300) * 2.0) / 1e6
    assert research["gpt"]["cost_usd"] == pytest.approx(spent, abs=1e-9)
    assert research["gpt"]["unpriced_requests"] == 0
    assert research["embed"]["requests"] == 1
    assert teams["research"]["requests"] == 5
    assert teams["support"]["requests"] == 1
    day = time.strftime("%Y-%m-%d", time.gmtime())
    status, by_day = admin(url, f"/admin/usage?period={day}")
    assert status == 200 and by_day["granularity"] == "day"
    assert by_day["data"] == body["data"]
    # A final newline and non-ASCII digits: what \d and $ let through (issue: admin period).
    fullwidth = "\uff12\uff10\uff12\uff16-12"
    for bad in ("2026-13", "2026-02-30", "last-month", "2026", "2026-12%0A", fullwidth):
        status, error = admin(url, f"/admin/usage?period={bad}")
        assert status == 400 and error["error"]["param"] == "period", bad


@pytest.fixture
def no_limits_url(servers: Servers) -> Iterator[str]:
    url, _ = servers.start_proxy(MODELS, admin={"keys": [ADMIN_KEY]})
    yield url


def test_a_team_without_limits_gets_no_ratelimit_headers(no_limits_url: str) -> None:
    with sdk(no_limits_url) as client:
        raw = client.chat.completions.with_raw_response.create(model="gpt", messages=HELLO)
    assert not [name for name in raw.headers if name.lower().startswith("x-ratelimit")]
    status, body = admin(no_limits_url, "/admin/limits")
    assert status == 200 and all(team["limits"] == {} for team in body["data"])


# --- what a reservation counts (docs/limits.md) ------------------------------------------------

# About 24 KB of JSON that is no message text: about 6000 tokens at four bytes a token.
BIG_SCHEMA = {
    "type": "object",
    "properties": {f"field_{i}": {"type": "string", "description": "x" * 200} for i in range(100)},
}
BIG_TOOLS = [{"type": "function", "function": {"name": "big", "parameters": BIG_SCHEMA}}]
BIG_FORMAT = {"type": "json_schema", "json_schema": {"name": "big", "schema": BIG_SCHEMA}}


async def statuses_of(url: str, bodies: list[dict[str, Any]], path: str) -> list[int]:
    results = await asyncio.gather(*(post(url, body, path=path) for body in bodies))
    return [status for status, _, _ in results]


@pytest.mark.parametrize(
    "extra",
    [{"tools": BIG_TOOLS}, {"response_format": BIG_FORMAT}],
    ids=["tools", "response_format"],
)
async def test_what_goes_upstream_besides_the_messages_is_reserved_too(
    servers: Servers, window_start: None, extra: dict[str, Any]
) -> None:
    """Ten requests in flight at once, each with 24 KB of tools (or a schema) and max_tokens 1:
    each reserves about 6000 tokens, so three fit in 20000, not ten."""
    url = start(servers, {"tokens_per_minute": 20_000})
    body = {"model": "gpt-slow", "messages": HELLO, "max_tokens": 1, **extra}
    found = await statuses_of(url, [body] * 10, "/chat/completions")
    assert found.count(200) == 3 and found.count(429) == 7, found


async def test_a_passed_through_responses_request_reserves_its_instructions(
    servers: Servers, window_start: None
) -> None:
    """A built-in tool: only a provider serving the Responses API can take it, so the request
    goes up as it came, its instructions with it: 48 KB, about 12000 tokens, so one fits."""
    url = start(servers, {"tokens_per_minute": 20_000})
    body = {
        "model": "native-slow",
        "instructions": "x" * 48_000,
        "input": "Hello",
        "tools": [{"type": "web_search_preview"}],
        "max_output_tokens": 16,
    }
    found = await statuses_of(url, [body] * 10, "/responses")
    assert found.count(200) == 1 and found.count(429) == 9, found


async def test_a_passed_through_responses_request_reserves_its_max_output_tokens(
    servers: Servers, window_start: None
) -> None:
    url = start(servers, {"tokens_per_minute": 20_000})
    body = {
        "model": "native-slow",
        "input": "Hello",
        "tools": [{"type": "web_search_preview"}],
        "max_output_tokens": 8000,
    }
    found = await statuses_of(url, [body] * 3, "/responses")
    assert sorted(found) == [200, 200, 429], found


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", {"messages": HELLO, "max_tokens": 0}, "max_tokens"),
        ("/chat/completions", {"messages": HELLO, "max_completion_tokens": 0},
         "max_completion_tokens"),
        ("/chat/completions", {"messages": HELLO, "max_completion_tokens": 10, "max_tokens": 0},
         "max_tokens"),
        # Made a chat request, and passed through as it came.
        ("/responses", {"model": "gpt", "input": "Hello", "max_output_tokens": 0},
         "max_output_tokens"),
        ("/responses", {"input": "Hello", "max_output_tokens": 0}, "max_output_tokens"),
        ("/responses", {"input": "Hello", "max_output_tokens": 0,
                        "tools": [{"type": "web_search_preview"}]}, "max_output_tokens"),
    ],
)  # fmt: skip
async def test_a_ceiling_of_0_tokens_is_refused(
    servers: Servers, path: str, body: dict[str, Any], param: str
) -> None:
    """As OpenAI refuses it: a reservation of the prompt alone would bound nothing that an
    upstream taking 0 for "no limit" writes."""
    url = start(servers, {"tokens_per_minute": 100_000})
    model = "native-slow" if path == "/responses" else "gpt"
    status, _, error = await post(url, {"model": model, **body}, path=path)
    assert status == 400, error
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] == param


def test_legacy_completions_with_max_tokens_0_reserve_the_models_ceiling(
    servers: Servers, window_start: None
) -> None:
    """OpenAI's legacy completions take max_tokens 0 (the prompt's logprobs, with echo): it is
    passed on, and reserved as no max_tokens is, at the model's (4096 here)."""
    url = start(servers, {"tokens_per_minute": 3000})
    with sdk(url) as client, pytest.raises(openai.RateLimitError) as refused:
        client.completions.create(model="gpt", prompt="Hello", max_tokens=0)
    assert refused.value.code == "tokens_per_minute"
    assert "more than the whole limit" in refused.value.message
