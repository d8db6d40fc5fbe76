"""A native upstream's prompt count that is no count is estimated, never metered as 0
(docs/metering.md), through the running proxy.

Each dialect's recorded stream (tests/fixtures/providers) is served by a hostile upstream of the
test's own with its prompt count replaced: negative, a string, past 2**53, a fraction. The
completion count stays the upstream's; the prompt is the proxy's estimate of it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.core.usage import estimate_tokens, prompt_chars
from tests.support.harness import TEAM_KEY, Servers
from tests.support.hostile import HostileUpstream, chunk

PROVIDERS = Path(__file__).resolve().parents[1] / "fixtures" / "providers"
BAD = {"negative": "-5", "string": '"12"', "huge": "1e300", "fraction": "3.5"}
MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
PROMPT = "Deep learning is"
TGI_END = (
    b'data:{"token":{"id":2,"text":".","logprob":-1.0,"special":false},'
    b'"generated_text":"Deep learning is a subset.","details":{"finish_reason":"eos_token",'
    b'"generated_tokens":7,"input_length":@}}\n\n'
)


def _recorded(name: str, pattern: str) -> Callable[[bytes], bytes]:
    """The recording ``name`` with the value of its prompt count (``pattern``'s group) as given."""
    text = (PROVIDERS / name).read_bytes()

    def with_count(count: bytes) -> bytes:
        out, found = re.subn(pattern.encode(), lambda m: m.group(1) + count, text)
        assert found, name
        return out

    return with_count


def _tgi(count: bytes) -> bytes:
    recorded = (PROVIDERS / "tgi.generate-stream.sse").read_bytes()
    events = recorded.strip().split(b"\n\n")[:-1]  # the recording's last event has no details
    return b"\n\n".join(events) + b"\n\n" + TGI_END.replace(b"@", count)


# dialect: (the endpoint asked, its content type, the stream with a prompt count given)
DIALECTS: dict[str, tuple[str, str, Callable[[bytes], bytes]]] = {
    "anthropic": (
        "chat",
        "text/event-stream",
        _recorded("anthropic.messages.stream.sse", r'("input_tokens":)\d+'),
    ),
    "gemini": (
        "chat",
        "text/event-stream",
        _recorded("gemini.generate-content.stream.sse", r'("promptTokenCount":)\d+'),
    ),
    "cohere": (
        "chat",
        "text/event-stream",
        _recorded("cohere.chat.stream.sse", r'("tokens":\{"input_tokens":)\d+'),
    ),
    "ollama": (
        "chat",
        "application/x-ndjson",
        _recorded("ollama.api-chat.stream.ndjson", r'("prompt_eval_count":)\d+'),
    ),
    "tgi": ("completions", "text/event-stream", _tgi),
}


def _script(body: bytes, content_type: str) -> Any:
    async def serve(request: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" % content_type.encode() + chunk(body) + b"0\r\n\r\n"
        )

    return serve


@pytest.fixture(scope="module")
def native_url(servers: Servers) -> Iterator[str]:
    scripts = {
        f"{dialect}-{bad}": _script(make(value.encode()), content_type)
        for dialect, (_, content_type, make) in DIALECTS.items()
        for bad, value in BAD.items()
    }
    upstream = HostileUpstream(scripts)
    servers.loop.call(upstream.start)
    try:
        providers = {
            name: {
                "base_url": upstream.url(name),
                "api": name.split("-")[0],
                "api_key": "native-key-1",
            }
            for name in scripts
        }
        models = {name: {"provider": name, "model": "up"} for name in scripts}
        url, _, _ = servers.start_app(models, providers=providers)
        yield url
    finally:
        servers.loop.call(upstream.stop)


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("dialect", sorted(DIALECTS))
async def test_a_prompt_count_that_is_no_count_is_estimated(
    native_url: str, dialect: str, bad: str
) -> None:
    endpoint, _, _ = DIALECTS[dialect]
    body: dict[str, Any] = {
        "model": f"{dialect}-{bad}",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        body["messages"] = MESSAGES
        expected = estimate_tokens(prompt_chars(MESSAGES))
    else:
        body["prompt"] = PROMPT
        expected = estimate_tokens(len(PROMPT))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{native_url}/{'chat/completions' if endpoint == 'chat' else 'completions'}",
            json=body,
            headers={"Authorization": f"Bearer {TEAM_KEY}"},
        ) as response,
    ):
        assert response.status == 200
        raw = await response.read()
    events = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]", raw[-300:]
    usage = orjson.loads(events[-2])["usage"]
    assert usage["prompt_tokens"] == expected > 0
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
