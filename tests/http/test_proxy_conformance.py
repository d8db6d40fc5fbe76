"""Every OpenAI-compatible fixture through the running proxy, served by the emulator.

Raw HTTP checks the bytes a client receives against docs/canonical-output.md and the golden files;
the official ``openai`` SDK (sync and async, ``stream=True`` and the ``stream()`` helper) must
consume every fixture without an error and accumulate the golden text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import openai
import orjson
import pytest

from tests.conftest import golden_models
from tests.support.harness import TEAM_KEY, running_servers
from tests.support.replay import (
    ERROR_STATUS,
    Golden,
    check_stream,
    check_whole,
    dechunk,
    goldens,
    parse_frames,
)

PROXIED = [g for g in goldens() if g.name != "sse-quirks.tcp-splits.json"]
STREAMS = [g for g in PROXIED if g.stream and g.data["outcome"] == "ok"]
CHAT_STREAMS = [g for g in STREAMS if g.endpoint == "chat"]
ERROR_STREAMS = [g for g in PROXIED if g.stream and g.data["outcome"] == "error"]
_ids = lambda g: g.name  # noqa: E731
AUTH = {"Authorization": f"Bearer {TEAM_KEY}"}


def request_body(golden: Golden, include_usage: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": golden.name, "stream": golden.stream}
    if golden.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "Hello"}]
    else:
        body["prompt"] = "Hello"
    if golden.n > 1:
        body["n"] = golden.n
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def sdk_n(golden: Golden) -> Any:
    """The n an SDK call sets: none for a golden that says the client sets none."""
    return openai.NOT_GIVEN if "n" in golden.data else golden.n


def path(golden: Golden) -> str:
    return "/chat/completions" if golden.endpoint == "chat" else "/completions"


# stream_options only concerns streams: whole answers are asked for once.
CASES = [(g, usage) for g in PROXIED for usage in ((True, False) if g.stream else (False,))]


@pytest.mark.parametrize(
    ("golden", "include_usage"),
    CASES,
    ids=[f"{g.name}-{'usage' if usage else 'no-usage'}" for g, usage in CASES],
)
async def test_fixture_through_proxy(proxy_url: str, golden: Golden, include_usage: bool) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy_url + path(golden), json=request_body(golden, include_usage), headers=AUTH
        ) as response,
    ):
        body = await response.read()
        headers = response.headers
    assert headers.get("X-Request-Id")
    if not golden.stream:
        if golden.data["outcome"] == "error":
            assert response.status == ERROR_STATUS[golden.data["error"]["type"]]
            error = orjson.loads(body)["error"]
            assert error["type"] == golden.data["error"]["type"]
            if golden.data["error"]["message"] is not None:  # null: any (golden/README.md)
                assert error["message"] == golden.data["error"]["message"]
            return
        assert response.status == 200, body
        assert headers["Content-Type"].startswith("application/json")
        check_whole(golden, orjson.loads(body), created=None, model=golden.name)
        assert headers["X-Usage-Source"] == usage_source(golden)
        return
    assert response.status == 200, body
    assert headers["Content-Type"].startswith("text/event-stream")
    check_stream(
        golden, parse_frames(body), include_usage=include_usage, created=None, model=golden.name
    )


def usage_source(golden: Golden) -> str:
    """What a whole answer's X-Usage-Source must say (docs/canonical-output.md section 3)."""
    return "estimated" if golden.data["usage"] is None else "upstream"


# A whole request to Gemini goes to generateContent, which answers one object: its stream form
# as a JSON array is a stream's alone.
ASKED_WHOLE = [g for g in STREAMS + ERROR_STREAMS if ".stream.json-array." not in g.name]


@pytest.mark.parametrize("golden", ASKED_WHOLE, ids=_ids)
async def test_stream_fixture_asked_for_whole(proxy_url: str, golden: Golden) -> None:
    """An upstream that answers a whole request with a stream: the client still gets the one
    canonical response the stream tells, its usage marked as the upstream's or an estimate."""
    body = {**request_body(golden, include_usage=False), "stream": False}
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy_url + path(golden), json=body, headers=AUTH) as response,
    ):
        raw = await response.read()
    if golden.data["outcome"] == "error":
        assert response.status >= 400, raw
        assert orjson.loads(raw)["error"]["type"] == golden.data["error"]["type"]
        return
    assert response.status == 200, raw
    check_whole(golden, orjson.loads(raw), created=None, model=golden.name)
    assert response.headers["X-Usage-Source"] == usage_source(golden)


def expected_text(golden: Golden) -> str:
    return golden.data["choices"]["0"]["content"] or ""


@pytest.mark.parametrize("golden", STREAMS, ids=_ids)
def test_sync_sdk_streams_every_fixture(proxy_url: str, golden: Golden) -> None:
    client = openai.OpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0)
    with client:
        texts: dict[int, str] = {}
        usage = None
        if golden.endpoint == "chat":
            stream = client.chat.completions.create(
                model=golden.name,
                messages=[{"role": "user", "content": "Hello"}],
                stream=True,
                n=sdk_n(golden),
                stream_options={"include_usage": True},
            )
            for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        else:
            completion = client.completions.create(
                model=golden.name,
                prompt="Hello",
                stream=True,
                stream_options={"include_usage": True},
            )
            for chunk in completion:
                usage = chunk.usage or usage
                for c in chunk.choices:
                    texts[c.index] = texts.get(c.index, "") + c.text
    for key, want in golden.data["choices"].items():
        assert texts.get(int(key), "") == (want["content"] or "")
    assert usage is not None
    if golden.data["usage"] is not None:
        assert usage.total_tokens == golden.data["usage"]["total_tokens"]


@pytest.mark.parametrize("golden", CHAT_STREAMS, ids=_ids)
async def test_async_sdk_stream_helper_final_completion(proxy_url: str, golden: Golden) -> None:
    client = openai.AsyncOpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0)
    async with (
        client,
        client.chat.completions.stream(
            model=golden.name, messages=[{"role": "user", "content": "Hello"}], n=sdk_n(golden)
        ) as stream,
    ):
        async for _event in stream:
            pass
        try:
            final = await stream.get_final_completion()
        except openai.LengthFinishReasonError as exc:
            # The SDK refuses to "parse" a cut-off answer; the completion is still whole.
            assert any(c["finish_reason"] == "length" for c in golden.data["choices"].values())
            final = exc.completion
        except openai.ContentFilterFinishReasonError as exc:
            # Likewise a filtered one (Anthropic's refusal); older SDKs do not attach it.
            assert any(
                c["finish_reason"] == "content_filter" for c in golden.data["choices"].values()
            )
            if exc.completion is None:
                return
            final = exc.completion
    assert final.model == golden.name
    for choice in final.choices:
        want = golden.data["choices"][str(choice.index)]
        assert (choice.message.content or "") == (want["content"] or "")
        assert choice.finish_reason == want["finish_reason"]
        calls = choice.message.tool_calls or []
        assert [c.function.arguments for c in calls] == [c["arguments"] for c in want["tool_calls"]]
        assert [c.function.name for c in calls] == [c["name"] for c in want["tool_calls"]]


@pytest.mark.parametrize(
    "golden", [g for g in PROXIED if not g.stream and g.data["outcome"] == "ok"], ids=_ids
)
async def test_async_sdk_whole_responses(proxy_url: str, golden: Golden) -> None:
    client = openai.AsyncOpenAI(base_url=proxy_url, api_key=TEAM_KEY, max_retries=0)
    async with client:
        if golden.endpoint == "chat":
            chat = await client.chat.completions.create(
                model=golden.name, messages=[{"role": "user", "content": "Hello"}]
            )
            text = chat.choices[0].message.content or ""
            assert chat.usage is not None
        else:
            completion = await client.completions.create(model=golden.name, prompt="Hello")
            text = completion.choices[0].text
            assert completion.usage is not None
    assert text == expected_text(golden)


# Seconds between a paced emulator's events: enough for each to come in a read of its own.
PACE = 0.001


@pytest.fixture(scope="module")
def paced_url(fixture_dir: Path) -> Iterator[str]:
    """A proxy whose upstream sends each event in a read of its own, as providers do: from a
    stream's second read on, the relay's pipe takes it (proxy.http.pipe)."""
    with running_servers(fixture_dir, chunk_delay=PACE) as servers:
        url, _ = servers.start_proxy(golden_models())
        yield url


@pytest.mark.parametrize("version", ["1.1", "1.0"])
@pytest.mark.parametrize("golden", [g for g in PROXIED if g.stream], ids=_ids)
async def test_fixture_streamed_event_by_event(
    paced_url: str, golden: Golden, version: str
) -> None:
    """Chunked to an HTTP/1.1 client, as it comes to an HTTP/1.0 one (its end is the
    connection's); either way what docs/canonical-output.md and the golden say."""
    url = urlsplit(paced_url)
    assert url.hostname is not None and url.port is not None
    body = orjson.dumps(request_body(golden, include_usage=True))
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        f"POST {url.path}{path(golden)} HTTP/{version}\r\nHost: x\r\nConnection: close\r\n"
        f"Authorization: Bearer {TEAM_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    try:
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/{version} 200 OK\r\n".encode()), head
    if version == "1.1":
        assert b"\r\nTransfer-Encoding: chunked\r\n" in head
        assert content.endswith(b"\r\n0\r\n\r\n")  # the body's end, in its last chunk
        content = dechunk(content)
    else:
        assert b"Transfer-Encoding" not in head
    check_stream(golden, parse_frames(content), include_usage=True, created=None, model=golden.name)
