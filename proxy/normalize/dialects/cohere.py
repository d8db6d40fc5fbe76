"""Cohere's v2 Chat API (``POST {base_url}/v2/chat``), translated both ways.

Its stream (SOURCES.md section G): ``message-start`` (the id), ``content-delta`` (text, or
thinking), ``tool-plan-delta`` (the plan the model makes before calling tools: reasoning),
``tool-call-start``/``-delta``, ``message-end`` (finish_reason and usage); ``content-start``
and ``-end``, ``tool-call-end``, ``citation-*`` and ``debug`` say nothing a client is given, and
event types not known here are skipped. There is no ``[DONE]``: ``message-end`` ends it.

docs/providers/cohere.md says what is translated and what is refused.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.normalize.dialects import cohere_embed
from proxy.normalize.dialects.cohere_request import build_request
from proxy.normalize.dialects.dialect import Dialect, stateless
from proxy.normalize.fields import RequestContext

# Cohere's finish reasons (ChatFinishReason); ERROR and TIMEOUT are failures, not finishes.
_FINISH: Final = {
    "COMPLETE": "stop",
    "STOP_SEQUENCE": "stop",
    "MAX_TOKENS": "length",
    "TOOL_CALL": "tool_calls",
}
_FAILED: Final = frozenset({"ERROR", "TIMEOUT"})


def adapt_event(payload: dict[str, Any], ctx: RequestContext) -> tuple[dict[str, Any] | None, bool]:
    kind = payload.get("type")
    delta = payload.get("delta")
    message = delta.get("message") if isinstance(delta, dict) else None
    if not isinstance(message, dict):
        message = {}
    if kind == "message-start":
        # The id comes here only; the role chunk carries it.
        return _chunk({"role": "assistant"}, chunk_id=payload.get("id"))
    if kind in ("content-start", "content-delta"):
        content = message.get("content")
        if not isinstance(content, dict):
            return None, False
        return _chunk(
            {"content": content.get("text"), "reasoning_content": content.get("thinking")}
        )
    if kind == "tool-plan-delta":
        return _chunk({"reasoning_content": message.get("tool_plan")})
    if kind in ("tool-call-start", "tool-call-delta"):
        call = message.get("tool_calls")
        if not isinstance(call, dict):
            return None, False
        # One call per event, numbered by the event's index.
        return _chunk({"tool_calls": [{**call, "index": payload.get("index")}]})
    if kind == "message-end":
        reason = delta.get("finish_reason") if isinstance(delta, dict) else None
        if _failed(reason):
            return {"error": _failure(reason)}, True
        chunk, _ = _chunk({}, finish_reason=_FINISH.get(str(reason), reason))
        usage = _usage(delta.get("usage")) if isinstance(delta, dict) else None
        if usage is not None:
            chunk["usage"] = usage
        return chunk, True
    return None, False


def _chunk(
    delta: dict[str, Any], *, chunk_id: object = None, finish_reason: object = None
) -> tuple[dict[str, Any], bool]:
    delta = {key: value for key, value in delta.items() if value is not None}
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    chunk: dict[str, Any] = {"choices": [choice]}
    if chunk_id is not None:
        chunk["id"] = chunk_id
    return chunk, False


def _failed(reason: object) -> bool:
    return isinstance(reason, str) and reason in _FAILED


def _failure(reason: object) -> dict[str, Any]:
    return {"message": f"Cohere stopped generating with finish_reason {reason}"}


def _usage(usage: object) -> dict[str, Any] | None:
    """OpenAI's usage from Cohere's: ``tokens`` counts what the model read and wrote;
    ``billed_units`` is only the billable part of it (12 of 507 prompt tokens in
    fixtures/providers/cohere.chat.json), so it is not read. ``cached_tokens`` are prompt
    tokens that hit Cohere's cache, a part of ``input_tokens``."""
    if not isinstance(usage, dict):
        return None
    tokens = usage.get("tokens")
    if not isinstance(tokens, dict):
        return None
    out: dict[str, Any] = {
        "prompt_tokens": tokens.get("input_tokens"),
        "completion_tokens": tokens.get("output_tokens"),
    }
    cached = usage.get("cached_tokens")
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    reason = body.get("finish_reason")
    if _failed(reason):
        return {"error": _failure(reason)}
    message = body.get("message")
    if not isinstance(message, dict):
        return body  # no answer: the normalizer says so
    texts: list[str] = []
    thoughts: list[str] = []
    content = message.get("content")
    for item in content if isinstance(content, list) else ():
        if isinstance(item, dict):
            if item.get("type") == "text" and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif item.get("type") == "thinking" and isinstance(item.get("thinking"), str):
                thoughts.append(item["thinking"])
    plan = message.get("tool_plan")
    if isinstance(plan, str):
        thoughts.append(plan)  # after the thinking, as a stream brings it
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if any(thoughts):
        out["reasoning_content"] = "".join(thoughts)
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = calls  # OpenAI's shape already; the normalizer checks each
    choice = {"index": 0, "message": out, "finish_reason": _FINISH.get(str(reason), reason)}
    return {"id": body.get("id"), "choices": [choice], "usage": _usage(body.get("usage"))}


DIALECT: Final = Dialect(
    "cohere",
    paths={"chat": "/v2/chat", "embeddings": cohere_embed.PATH},
    adapter=stateless(adapt_event),
    adapt_response=adapt_response,
    request=build_request,
    embed_request=cohere_embed.build_embed_request,
    adapt_embeddings=cohere_embed.adapt_embeddings,
    native=True,
)
