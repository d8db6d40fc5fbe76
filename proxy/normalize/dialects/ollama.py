"""Ollama's native API (``POST {base_url}/api/chat`` and ``/api/generate``, NDJSON streams),
translated both ways.

Each line of a stream is one object: ``message`` (chat: ``content``, ``thinking``, whole
``tool_calls``) or ``response`` (generate), ``created_at`` (RFC 3339), and on the last,
``done: true`` with ``done_reason`` and the counts ``prompt_eval_count`` / ``eval_count``. A
whole answer is that last object with everything in it. A failure is ``{"error": "..."}``.

docs/providers/ollama.md says what is translated and what is refused.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

import orjson

from proxy.normalize.dialects import ollama_embed
from proxy.normalize.dialects.dialect import Dialect, EventAdapter
from proxy.normalize.dialects.ollama_request import build_request
from proxy.normalize.fields import RequestContext

# RFC 3339 with nanoseconds (fixtures/providers/ollama.api-chat.json): Python reads
# microseconds at most, and a second is all that is kept.
_PAST_MICROSECONDS: Final = re.compile(r"(\.\d{6})\d+")


def parse_created(value: object) -> int | None:
    """Unix seconds from ``created_at``; None when it is no time."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(_PAST_MICROSECONDS.sub(r"\1", value))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None  # Ollama always gives the offset; a time without one is no instant
    return int(when.timestamp())


def _finish(reason: object, called: bool) -> object:
    # Ollama says "stop" after tool calls too; "load"/"unload" answer a request with no
    # messages. Absent (older servers): the normalizer decides.
    if reason == "stop" and called:
        return "tool_calls"
    if reason in ("load", "unload"):
        return "stop"
    return reason


def _usage(payload: dict[str, Any]) -> dict[str, Any] | None:
    # Counts of zero are left out of Ollama's JSON (omitempty): a missing one is zero.
    prompt = payload.get("prompt_eval_count")
    completion = payload.get("eval_count")
    if prompt is None and completion is None:
        return None
    # Not ``or 0``: a count that is no count ("", -1) is estimated, not taken for a zero.
    return {
        "prompt_tokens": 0 if prompt is None else prompt,
        "completion_tokens": 0 if completion is None else completion,
    }


def _calls(raw: object, first: int) -> list[dict[str, Any]]:
    """OpenAI's tool calls, numbered from ``first``, each whole: Ollama sends a call at once,
    its arguments an object (JSON-encoded here), its id only from newer servers (made up by
    the normalizer otherwise)."""
    out: list[dict[str, Any]] = []
    for call in raw if isinstance(raw, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
        made: dict[str, Any] = {
            "index": first + len(out),
            "type": "function",
            "function": {"name": function.get("name"), "arguments": arguments},
        }
        if isinstance(call.get("id"), str) and call["id"]:
            made["id"] = call["id"]
        out.append(made)
    return out


def _logprobs(raw: object) -> dict[str, Any] | None:
    """OpenAI's chat logprobs from Ollama's: the same per-token objects, ``bytes`` and
    ``top_logprobs`` left out when empty."""
    if not isinstance(raw, list) or not raw:
        return None

    def token(item: dict[str, Any]) -> dict[str, Any]:
        return {
            "token": item.get("token"),
            "logprob": item.get("logprob"),
            "bytes": item.get("bytes"),
        }

    content = []
    for item in raw:
        if isinstance(item, dict):
            top = item.get("top_logprobs")
            alternatives = (
                [token(t) for t in top if isinstance(t, dict)] if isinstance(top, list) else []
            )
            content.append({**token(item), "top_logprobs": alternatives})
    return {"content": content, "refusal": None}


def _error(error: object) -> object:
    return {"message": error} if isinstance(error, str) else error


class _Stream:
    """One stream's adapter: tool calls are numbered across its lines."""

    __slots__ = ("_calls", "_chat", "_named")

    def __init__(self, ctx: RequestContext) -> None:
        self._chat = ctx.endpoint == "chat"
        self._calls = 0
        self._named = False  # the upstream's model went on (every line repeats it)

    def __call__(self, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        if payload.get("error") is not None:
            return {"error": _error(payload["error"])}, True
        done = payload.get("done") is True
        choice: dict[str, Any] = {"index": 0}
        if self._chat:
            message = payload.get("message")
            if not isinstance(message, dict):
                message = {}
            delta: dict[str, Any] = {}
            if isinstance(message.get("content"), str):
                delta["content"] = message["content"]
            if isinstance(message.get("thinking"), str):
                delta["reasoning_content"] = message["thinking"]
            calls = _calls(message.get("tool_calls"), self._calls)
            if calls:
                delta["tool_calls"] = calls
                self._calls += len(calls)
            choice["delta"] = delta
            choice["logprobs"] = _logprobs(payload.get("logprobs"))
        else:
            # /api/generate: the text continues the prompt; completions have no reasoning.
            choice["text"] = payload.get("response")
        chunk: dict[str, Any] = {"choices": [choice]}
        if not self._named and "model" in payload:
            self._named = True
            chunk["model"] = payload["model"]  # the upstream's, for the span (never shown)
        when = parse_created(payload.get("created_at"))
        if when is not None:
            chunk["created"] = when
        if done:
            choice["finish_reason"] = _finish(payload.get("done_reason"), self._calls > 0)
            usage = _usage(payload)
            if usage is not None:
                chunk["usage"] = usage
        return chunk, done


def adapter(ctx: RequestContext) -> EventAdapter:
    return _Stream(ctx)


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    """A whole answer: the stream's last line with all of it, read as a stream of one line."""
    chunk, _ = _Stream(ctx)(body)
    assert chunk is not None
    choices = chunk.get("choices")
    if not choices:
        return chunk  # an error
    choice = choices[0]
    if ctx.endpoint == "chat":
        message = {"role": "assistant", **choice.pop("delta")}
        calls = message.get("tool_calls")
        if calls:
            for call in calls:
                del call["index"]
            message["content"] = message.get("content") or None
        choice["message"] = message
    choice.setdefault("finish_reason", None)  # not done: the normalizer decides
    return chunk


DIALECT: Final = Dialect(
    "ollama",
    paths={"chat": "/api/chat", "completions": "/api/generate", "embeddings": ollama_embed.PATH},
    adapter=adapter,
    adapt_response=adapt_response,
    request=build_request,
    embed_request=ollama_embed.build_embed_request,
    adapt_embeddings=ollama_embed.adapt_embeddings,
    native=True,
)
