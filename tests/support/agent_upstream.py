"""A scripted upstream for an agent's tool loop, in OpenAI's chat shape and Anthropic's.

Recordings cannot answer an agent: its second request carries the result of a tool it ran. This
upstream plays the model's part of one loop. A request offering the tool ``tool`` and carrying no
result yet is answered with a call of that tool (``tool_input``); a request carrying the tool's
result is answered with text quoting it; any other request (an agent's background calls: titles,
summaries) with a short text. ``/v1/chat/completions`` answers in OpenAI's chat shape,
``/v1/messages`` in Anthropic's (``count_tokens`` too), streamed when asked. Every request is
kept in ``requests`` for the test to read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

CALL_ID = "toolu_scripted_01"
ANSWER_PREFIX = "The tool said: "
BACKGROUND_TEXT = "Scripted title"


@dataclass
class AgentUpstream:
    """Plays the model of one tool loop; ``requests`` holds (path, body) of every request."""

    tool: str
    tool_input: dict[str, Any]
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        return app

    def results(self) -> list[str]:
        """The tool results the upstream received, in either shape."""
        found: list[str] = []
        for _, body in self.requests:
            for message in body.get("messages", []):
                if message.get("role") == "tool":
                    found.append(_text(message.get("content")))
                content = message.get("content")
                if isinstance(content, list):
                    found.extend(
                        _text(block.get("content"))
                        for block in content
                        if block.get("type") == "tool_result"
                    )
        return found

    def _reply(self, body: dict[str, Any], result: str | None) -> tuple[str, str | None]:
        """(text, tool to call) for a request: the loop's next step."""
        if result is not None:
            return ANSWER_PREFIX + result, None
        names = {(tool.get("function") or tool).get("name") for tool in body.get("tools", [])}
        if self.tool in names:
            return "", self.tool
        return BACKGROUND_TEXT, None

    # --- OpenAI's chat shape ------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append((request.path, body))
        tool_messages = [m for m in body["messages"] if m.get("role") == "tool"]
        result = _text(tool_messages[-1]["content"]) if tool_messages else None
        text, tool = self._reply(body, result)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool:
            arguments = orjson.dumps(self.tool_input).decode()
            message["tool_calls"] = [
                {
                    "id": CALL_ID,
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
            ]
        finish = "tool_calls" if tool else "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        head = {"id": "chatcmpl-scripted", "created": 1764600000, "model": body["model"]}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            whole = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            return web.json_response(whole)
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if text:
            deltas += [{"content": text[:8]}, {"content": text[8:]}]
        if tool:
            call = message["tool_calls"][0]
            deltas.append(
                {"tool_calls": [{"index": 0, **call, "function": {"name": tool, "arguments": ""}}]}
            )
            for part in (arguments[:10], arguments[10:]):
                deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            for delta in deltas
        ]
        events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        events.append({**chunk, "choices": [], "usage": usage})
        frames = [b"data: " + orjson.dumps(event) + b"\n\n" for event in events]
        return await _sse(request, [*frames, b"data: [DONE]\n\n"])

    # --- Anthropic's Messages shape -------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append((request.path, body))
        last = body["messages"][-1]
        results = [
            _text(block.get("content"))
            for block in (last["content"] if isinstance(last["content"], list) else [])
            if block.get("type") == "tool_result"
        ]
        text, tool = self._reply(body, results[-1] if results else None)
        block: dict[str, Any] = (
            {"type": "tool_use", "id": CALL_ID, "name": tool, "input": self.tool_input}
            if tool
            else {"type": "text", "text": text}
        )
        stop = "tool_use" if tool else "end_turn"
        usage = {
            "input_tokens": 100,
            "output_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.json_response(message)
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        if tool:
            opened = {**block, "input": {}}
            arguments = orjson.dumps(self.tool_input).decode()
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in (arguments[:10], arguments[10:])
            ]
        else:
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in (text[:8], text[8:])]
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": opened},
            ),
            *(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
                for delta in deltas
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 10},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        frames = [
            b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps(data))
            for name, data in events
        ]
        return await _sse(request, frames)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, orjson.loads(await request.read())))
        return web.json_response({"input_tokens": 100})


async def _sse(request: web.Request, frames: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for frame in frames:
        await response.write(frame)
    await response.write_eof()
    return response


def _text(content: Any) -> str:
    """A tool result's text, whether a string or blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""
