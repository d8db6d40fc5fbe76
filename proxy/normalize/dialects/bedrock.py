"""Amazon Bedrock's Converse and ConverseStream APIs (``POST {base_url}/model/{model}/converse``
and ``/converse-stream``), translated both ways; embeddings through InvokeModel
(bedrock_embed.py).

ConverseStream answers in AWS event stream frames (proxy.core.eventstream), each event an
object named by its type (Bedrock Runtime API reference, ConverseStreamOutput):
``messageStart``, ``contentBlockStart`` (a tool call's id and name), ``contentBlockDelta``
(text, a tool call's input in pieces, or ``reasoningContent``), ``contentBlockStop``,
``messageStop`` (the ``stopReason``) and ``metadata`` (usage, after the stop), or an exception
(``throttlingException``, ...). A whole Converse answer is ``{output: {message}, stopReason,
usage}``. Requests carry no key: the proxy signs them (SigV4) or sends a Bedrock API key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.normalize.dialects import bedrock_embed, bedrock_invoke
from proxy.normalize.dialects.anthropic import openai_usage
from proxy.normalize.dialects.bedrock_errors import STREAM_EXCEPTIONS, stream_error
from proxy.normalize.dialects.bedrock_request import build_request
from proxy.normalize.dialects.dialect import Dialect, EventAdapter, MessagesThrough
from proxy.normalize.fields import RequestContext

# stopReason -> finish_reason; "tool_use" depends on whether a call was given.
_FINISH: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
# The model failed to say what it meant: no answer to give the client.
_FAILED: Final = frozenset({"malformed_model_output", "malformed_tool_use"})
_OBJECT: Final = "chat.completion.chunk"


def finish_reason(stop_reason: object, called: bool) -> str | None:
    if not isinstance(stop_reason, str):
        return None
    if stop_reason == "tool_use":
        return "tool_calls" if called else "stop"
    return _FINISH.get(stop_reason, "stop")  # a reason added since: the turn did end


def _failure(stop_reason: object) -> dict[str, Any]:
    return {"message": f"Bedrock stopped with stopReason {stop_reason}: no answer was made"}


def usage_of(usage: object) -> dict[str, Any] | None:
    """OpenAI's usage for Bedrock's TokenUsage: inputTokens leaves the cache out, read or
    written, as Anthropic's input_tokens does, so it is counted as Anthropic's are."""
    if not isinstance(usage, Mapping):
        return None
    return openai_usage({
        "input_tokens": usage.get("inputTokens"),
        "cache_read_input_tokens": usage.get("cacheReadInputTokens"),
        "cache_creation_input_tokens": usage.get("cacheWriteInputTokens"),
        "output_tokens": usage.get("outputTokens"),
    })  # fmt: skip


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"object": _OBJECT, "choices": [choice]}


class _Stream:
    """One stream's events. A tool call's deltas name only their block's index: the adapter
    remembers which blocks are calls, and numbers the calls from 0."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[object, int] = {}  # contentBlockIndex -> its call's index

    def __call__(self, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        event = payload.get("contentBlockDelta")  # nearly every event
        if event is not None:
            return self._delta(event), False
        event = payload.get("contentBlockStart")
        if event is not None:
            return self._start(event), False
        event = payload.get("messageStop")
        if event is not None:
            reason = event.get("stopReason") if isinstance(event, dict) else None
            if reason in _FAILED:
                return {"error": _failure(reason)}, True
            return _chunk({}, finish_reason(reason, bool(self._calls))), True
        event = payload.get("metadata")
        if event is not None:
            usage = usage_of(event.get("usage")) if isinstance(event, dict) else None
            return (
                None if usage is None else {"object": _OBJECT, "choices": [], "usage": usage}
            ), False
        for name, body in payload.items():
            if name in STREAM_EXCEPTIONS or name.endswith("Exception"):
                return {"error": stream_error(name, body)}, False
        # messageStart (no role chunk yet: an exception right after it is still an HTTP
        # error, tried again), contentBlockStop, and event types added since.
        return None, False

    def _start(self, event: object) -> dict[str, Any] | None:
        start = event.get("start") if isinstance(event, dict) else None
        call = start.get("toolUse") if isinstance(start, dict) else None
        if not isinstance(call, dict):
            return None
        assert isinstance(event, dict)
        position = self._calls[event.get("contentBlockIndex")] = len(self._calls)
        function = {"name": call.get("name"), "arguments": ""}
        announced = {"index": position, "id": call.get("toolUseId"), "type": "function"}
        announced["function"] = function
        return _chunk({"tool_calls": [announced]})

    def _delta(self, event: object) -> dict[str, Any] | None:
        delta = event.get("delta") if isinstance(event, dict) else None
        if not isinstance(delta, dict):
            return None
        text = delta.get("text")
        if text is not None:
            return _chunk({"content": text}) if isinstance(text, str) and text else None
        reasoning = delta.get("reasoningContent")
        if reasoning is not None:
            # Its signature (and redacted reasoning) has no place in OpenAI's chunk.
            text = reasoning.get("text") if isinstance(reasoning, dict) else None
            return _chunk({"reasoning_content": text}) if isinstance(text, str) and text else None
        call = delta.get("toolUse")
        fragment = call.get("input") if isinstance(call, dict) else None
        assert isinstance(event, dict)
        position = self._calls.get(event.get("contentBlockIndex"))
        if not isinstance(fragment, str) or not fragment or position is None:
            return None  # citations, images, kinds added since; a call that never started
        return _chunk({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]})


def _adapter(ctx: RequestContext) -> EventAdapter:
    return _Stream()


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    """The chat.completion for a whole Converse answer."""
    output = body.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    if not isinstance(message, dict):
        raise UpstreamProtocolError("Bedrock answered without an output message")
    reason = body.get("stopReason")
    if reason in _FAILED:
        return {"error": _failure(reason)}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    blocks = message.get("content")
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("reasoningContent"), dict):
            thought = block["reasoningContent"].get("reasoningText")
            if isinstance(thought, dict) and isinstance(thought.get("text"), str):
                reasoning.append(thought["text"])
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            function = {"name": use.get("name"), "arguments": _json_text(use.get("input", {}))}
            calls.append({"id": use.get("toolUseId"), "type": "function", "function": function})
    answer: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if reasoning:
        answer["reasoning_content"] = "".join(reasoning)
    if calls:
        answer["tool_calls"] = calls
    finish = finish_reason(reason, bool(calls))
    choice = {"index": 0, "message": answer, "logprobs": None, "finish_reason": finish}
    out: dict[str, Any] = {"object": "chat.completion", "choices": [choice]}
    usage = usage_of(body.get("usage"))
    if usage is not None:
        out["usage"] = usage
    return out


def _json_text(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        # orjson writes less deep a document than it reads.
        raise UpstreamProtocolError("The upstream sent tool input nested too deeply") from None


DIALECT: Final = Dialect(
    "bedrock",
    paths={"chat": "/model/{model}/converse", "embeddings": bedrock_embed.PATH},
    stream_paths={"chat": "/model/{model}/converse-stream"},
    adapter=_adapter,
    adapt_response=adapt_response,
    request=build_request,
    embed_request=bedrock_embed.build_embed_request,
    adapt_embeddings=bedrock_embed.adapt_embeddings,
    # A Bedrock API key (the provider's api_key) is a bearer token, the default; without one
    # each request is signed with SigV4 (proxy.http.cloud).
    native=True,
    # Inference profiles and ARNs have ":" and "/": escaped, as botocore escapes the modelId.
    model_safe="",
    aws_errors=True,
    messages=MessagesThrough(
        "/model/{model}/invoke",
        "/model/{model}/invoke-with-response-stream",
        bedrock_invoke.takes,
        bedrock_invoke.invoke_body,
        bedrock_invoke.InvokeChunks,
    ),
)
