"""What a hostile upstream's answer may make a worker hold, and for how long: bounded
(docs/security.md), through the running proxy.

- A stream collected for a ``stream: false`` request is joined once, not piece by piece, and
  bounded in size per request (``server.max_collected_bytes``) and per worker
  (``server.max_response_bytes`` for all collections at once).
- A Responses stream, translated or passed through, keeps at most ``server.max_response_bytes``
  of what the API repeats at its end, and past it ends with ``response.failed``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from tests.support.harness import SUPPORT_KEY, TEAM_KEY, Servers
from tests.support.hostile import EVENT_STREAM_HEAD, chunk, proxied, text_event

CHAT = [{"role": "user", "content": "Hello"}]


def _chunk_event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1764600000,
        "model": "hostile",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return chunk(b"data: " + orjson.dumps(payload) + b"\n\n")


def _call_stream(pieces: int, size: int) -> bytes:
    """A chat stream of one tool call whose arguments come in ``pieces`` of ``size`` bytes."""
    opening = {"index": 0, "id": "call_1", "type": "function"}
    events = [
        _chunk_event({"tool_calls": [{**opening, "function": {"name": "f", "arguments": ""}}]})
    ]
    piece = "a" * size
    fragment = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
    events += [_chunk_event(fragment)] * pieces
    events.append(_chunk_event({}, "tool_calls"))
    events.append(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return b"".join(events)


async def _post(url: str, body: dict[str, Any], key: str = TEAM_KEY) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=orjson.dumps(body), headers=headers) as response,
    ):
        return response.status, await response.read()


# --- a stream collected for a whole answer is joined once ------------------------------------

_MANY_PIECES = _call_stream(4096, 2048)  # 8 MiB of arguments in 2 KiB pieces


async def _many_pieces(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + _MANY_PIECES)
    await writer.drain()


async def _quick(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + chunk(text_event("Hi")) + _call_stream(0, 0))
    await writer.drain()


async def test_a_stream_collected_in_many_pieces_holds_up_no_other_team(servers: Servers) -> None:
    scripts = {"pieces": _many_pieces, "llama-quick": _quick}
    with proxied(servers, scripts) as (_, url, _gateway):
        whole = {"model": "pieces", "messages": CHAT}
        cheap = {"model": "llama-quick", "messages": CHAT, "stream": True}
        sent = asyncio.ensure_future(_post(url + "/chat/completions", whole))
        waits = []
        while not sent.done():
            started = time.perf_counter()
            status, _ = await _post(url + "/chat/completions", cheap, SUPPORT_KEY)
            waits.append(time.perf_counter() - started)
            assert status == 200
        status, raw = await sent
    assert status == 200, raw[:300]
    call = orjson.loads(raw)["choices"][0]["message"]["tool_calls"][0]
    assert len(call["function"]["arguments"]) == 4096 * 2048
    assert max(waits, default=0) < 1.0, f"another team's request waited {max(waits):.2f} s"


# --- a stream collected for a whole answer is bounded, per request and per worker -------------

_MIB = 1024 * 1024
_TEXT = "y" * (256 * 1024)


async def _endless(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD)
    while True:
        writer.write(chunk(text_event(_TEXT)))
        await writer.drain()
        await asyncio.sleep(0)


async def test_an_endless_stream_asked_for_whole_is_cut_at_its_bound(servers: Servers) -> None:
    bounds = {"max_collected_bytes": 2 * _MIB}
    with proxied(servers, {"endless": _endless}, server=bounds) as (_, url, gateway):
        status, raw = await _post(url + "/chat/completions", {"model": "endless", "messages": CHAT})
        held = gateway.state.collecting.held
    assert status == 502, raw[:300]
    error = orjson.loads(raw)["error"]
    assert error["type"] == "upstream_error"
    assert f"larger than the limit of {2 * _MIB} bytes" in error["message"]
    assert held == 0  # given back


async def _held_then_done(request: bytes, writer: asyncio.StreamWriter) -> None:
    """3 MiB of text at once, then the rest of the answer a second later."""
    writer.write(EVENT_STREAM_HEAD)
    for _ in range(12):
        writer.write(chunk(text_event(_TEXT)))
    await writer.drain()
    await asyncio.sleep(1.0)
    writer.write(_call_stream(0, 0))
    await writer.drain()


async def test_what_a_worker_collects_at_once_is_bounded(servers: Servers) -> None:
    bounds = {"max_collected_bytes": 4 * _MIB, "max_response_bytes": 5 * _MIB}
    body = {"model": "held", "messages": CHAT}
    with proxied(servers, {"held": _held_then_done}, server=bounds) as (_, url, gateway):
        first = asyncio.ensure_future(_post(url + "/chat/completions", body))
        for _ in range(250):  # until the first one's 3 MiB are in
            if gateway.state.collecting.held >= 3 * _MIB:
                break
            await asyncio.sleep(0.02)
        second_status, second = await _post(url + "/chat/completions", body)
        first_status, _ = await first
        held = gateway.state.collecting.held
    assert first_status == 200  # each within its own bound, the first came whole
    assert second_status == 502, second[:300]
    message = orjson.loads(second)["error"]["message"]
    assert f"would hold more than {5 * _MIB} bytes" in message
    assert held == 0


# --- a Responses stream keeps at most max_response_bytes ---------------------------------------


async def _long_call(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(EVENT_STREAM_HEAD + _call_stream(48, 64 * 1024))  # 3 MiB of arguments
    await writer.drain()


async def _stream_bytes(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {TEAM_KEY}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/responses", data=orjson.dumps(body), headers=headers) as response,
    ):
        return response.status, await response.read()


def _events(raw: bytes) -> list[dict[str, Any]]:
    """A Responses stream's events (``event: <type>`` and one ``data:`` line each)."""
    assert raw.endswith(b"\n\n"), raw[-200:]
    events = []
    for frame in raw[:-2].split(b"\n\n"):
        head, data = frame.split(b"\n")
        assert head.startswith(b"event: ") and data.startswith(b"data: "), frame[:200]
        events.append(orjson.loads(data[6:]))
    return events


async def test_a_translated_responses_stream_ends_failed_past_its_bound(servers: Servers) -> None:
    bounds = {"max_response_bytes": _MIB}
    with proxied(servers, {"long-call": _long_call}, server=bounds) as (_, url, _gateway):
        body = {"model": "long-call", "input": "Go", "stream": True}
        status, raw = await _stream_bytes(url, body)
    assert status == 200
    events = _events(raw)
    last = events[-1]
    assert last["type"] == "response.failed", [event["type"] for event in events[-3:]]
    assert "limit of 1048576 bytes" in last["response"]["error"]["message"]
    assert [event["type"] for event in events].count("response.failed") == 1
    # Each argument byte at most twice (its delta, and the failed Response's item), the
    # arguments cut a piece past the bound: not 3 MiB told four times over.
    assert len(raw) < 3 * _MIB


def _done_item(index: int) -> bytes:
    item = {
        "type": "function_call",
        "id": f"fc_{index}",
        "call_id": f"call_{index}",
        "name": "f",
        "arguments": "a" * (256 * 1024),
        "status": "completed",
    }
    event = {
        "type": "response.output_item.done",
        "output_index": index,
        "item": item,
        "sequence_number": index,
    }
    return chunk(b"event: response.output_item.done\ndata: " + orjson.dumps(event) + b"\n\n")


async def _many_items(request: bytes, writer: asyncio.StreamWriter) -> None:
    """16 finished items of 256 KiB (4 MiB), then the end, without a terminal event."""
    writer.write(EVENT_STREAM_HEAD + b"".join(_done_item(i) for i in range(16)) + b"0\r\n\r\n")
    await writer.drain()


async def test_a_passed_through_responses_stream_keeps_at_most_its_bound(
    servers: Servers,
) -> None:
    bounds = {"max_response_bytes": _MIB}
    scripts = {"items": _many_items}
    with proxied(servers, scripts, provider={"responses": True}, server=bounds) as (_, url, _g):
        body = {"model": "items", "input": "Go", "stream": True}
        status, raw = await _stream_bytes(url, body)
    assert status == 200
    events = _events(raw)
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "response.failed" and kinds.count("response.failed") == 1
    failed = events[-1]["response"]
    assert "limit of 1048576 bytes" in failed["error"]["message"]
    assert len(orjson.dumps(failed["output"])) <= _MIB
    assert len(raw) < 3 * _MIB  # not the 4 MiB relayed and then all of it again
