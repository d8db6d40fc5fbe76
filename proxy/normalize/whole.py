"""The whole-response normalizer for every OpenAI-compatible upstream (sans-IO).

docs/canonical-output.md section 1: strict keys, the envelope repaired, ``message.role`` assistant,
``content`` a string or null, ``refusal`` present, ``tool_calls`` only when there are any,
``finish_reason`` never null, ``usage`` always present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import UpstreamProtocolError
from proxy.core.exchange import Answered
from proxy.core.fix_names import (
    FIX_ENVELOPE,
    FIX_EXTRAS,
    FIX_FINISH_REASON,
    FIX_FINISH_SYNTHESIZED,
    FIX_TOOL_CALLS,
    FIX_USAGE,
)
from proxy.core.usage import (
    Usage,
    canonical_usage,
    estimate_tokens,
    estimated_usage,
    prompt_chars,
    usage_value,
)
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.fields import (
    RequestContext,
    canonical_finish_reason,
    chat_logprobs,
    completion_logprobs,
    is_error_finish,
    make_call_id,
    make_id,
    plausible_created,
    service_tier,
    take_text,
    upstream_error,
    upstream_model,
    upstream_object,
)
from proxy.normalize.tables import (
    ENVELOPE_TEXT_MAX,
    STOP_MEANS_TOOL_CALLS,
)

_RESPONSE_KEYS = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier"}
)
_CHAT_CHOICE_KEYS = frozenset({"index", "message", "logprobs", "finish_reason"})
_MESSAGE_KEYS = frozenset(
    {"role", "content", "refusal", "tool_calls", "function_call", "annotations"}
)
_COMPLETION_REASONS = frozenset({"stop", "length", "content_filter"})
_ORDINARY_MESSAGE_KEYS = frozenset({"role", "content", "refusal", "annotations"})
_NO_FIXES: frozenset[str] = frozenset()


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class Normalized:
    body: bytes
    usage: Usage
    fixes: frozenset[str]
    # What the answer says of itself (``Answered``), kept apart: only a traced request needs it.
    response_id: str | None = None
    response_model: str | None = None  # the upstream's, as it came
    finish_reasons: tuple[str, ...] = ()

    @property
    def answered(self) -> Answered:
        return Answered(self.response_id, self.response_model, self.finish_reasons)


def normalize_response(raw: bytes, ctx: RequestContext) -> Normalized:
    """The canonical body for an upstream's 200 answer; raises ``UpstreamError`` otherwise."""
    body = upstream_object(raw)
    adapt = DIALECTS[ctx.dialect].adapt_response
    if adapt is not None:
        body = adapt(body, ctx)
    choices = body.get("choices")
    if body.get("error") and not choices:
        raise upstream_error(body["error"])
    if not isinstance(choices, list) or not choices:
        raise UpstreamProtocolError("The upstream answered without any choice")
    if ctx.endpoint == "chat":
        ordinary = _ordinary(body, choices, ctx)
        if ordinary is not None:
            return ordinary
    return _Builder(ctx).build(body, choices)


def _ordinary(body: dict[str, Any], choices: list[Any], ctx: RequestContext) -> Normalized | None:
    """The usual chat answer, made without the builder; None for anything else.

    Usual: one choice of text that ended with ``stop`` or ``length``, no reasoning, refusal,
    tool call, logprobs or annotation, counts in canonical shape, a sound envelope; nothing to
    fix but ``model``. That is most answers, and this is measurably quicker than the builder
    (docs/performance.md).
    The answer is byte for byte the builder's (tests/normalize/test_normalize_ordinary_response.py).
    """
    if len(choices) != 1 or not body.keys() <= _RESPONSE_KEYS:
        return None
    choice = choices[0]
    if type(choice) is not dict or not choice.keys() <= _CHAT_CHOICE_KEYS:
        return None
    message = choice.get("message")
    if type(message) is not dict or not message.keys() <= _ORDINARY_MESSAGE_KEYS:
        return None
    content = message.get("content")
    index = choice.get("index")
    finish = choice.get("finish_reason")
    if (
        type(content) is not str
        or message.get("refusal") is not None
        or message.get("annotations")  # [] is none, anything else is the builder's to judge
        or choice.get("logprobs") is not None
        or type(index) is not int
        or index < 0
        or (finish != "stop" and finish != "length")  # not "in" a set: it may be unhashable
    ):
        return None
    upstream_id = body.get("id")
    created = body.get("created")
    if (
        body.get("object") != "chat.completion"
        or type(upstream_id) is not str
        or not 0 < len(upstream_id) <= ENVELOPE_TEXT_MAX
        or type(created) is not int
        or not 10**8 <= created < 10**10  # plausible_created keeps it as it is
    ):
        return None
    raw_usage = body.get("usage")
    usage = canonical_usage(raw_usage, lambda: estimate_tokens(prompt_chars(ctx.prompt)))
    if usage is None or usage.keys() != raw_usage.keys():  # type: ignore[union-attr]
        return None
    out: dict[str, Any] = {
        "id": upstream_id,
        "object": "chat.completion",
        "created": created,
        "model": ctx.model,
    }
    fingerprint = body.get("system_fingerprint")
    if type(fingerprint) is str and 0 < len(fingerprint) <= ENVELOPE_TEXT_MAX:
        out["system_fingerprint"] = fingerprint
    tier = service_tier(body.get("service_tier"))
    if tier is not None:
        out["service_tier"] = tier
    message_out = {"role": "assistant", "content": content, "refusal": None}
    out["choices"] = [
        {"index": index, "message": message_out, "logprobs": None, "finish_reason": finish}
    ]
    out["usage"] = usage
    return Normalized(
        orjson.dumps(out),
        usage_value(usage),
        _NO_FIXES,
        upstream_id,
        upstream_model(body),
        (finish,),
    )


class _Builder:
    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.fixes: set[str] = set()
        self.text_chars = 0
        self.text_events = 0

    def _prompt_estimate(self) -> int:
        return estimate_tokens(prompt_chars(self.ctx.prompt))

    def build(self, body: dict[str, Any], choices: list[Any]) -> Normalized:
        ctx = self.ctx
        if not body.keys() <= _RESPONSE_KEYS:
            self.fixes.add(FIX_EXTRAS)
        raw_usage = body.get("usage")
        if raw_usage is None and isinstance(body.get("x_groq"), dict):
            raw_usage = body["x_groq"].get("usage")
        usage = canonical_usage(raw_usage, self._prompt_estimate)
        if usage is not None and usage.keys() != raw_usage.keys():  # type: ignore[union-attr]
            self.fixes.add(FIX_USAGE)

        chat = ctx.endpoint == "chat"
        out_choices: list[dict[str, Any]] = []
        for position, raw in enumerate(choices):
            if not isinstance(raw, dict):
                raise UpstreamProtocolError(
                    "The upstream answered with a choice that is not an object"
                )
            index = raw.get("index")
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                index = position
                self.fixes.add(FIX_ENVELOPE)
            if ctx.choices and len(out_choices) >= ctx.choices:
                self.fixes.add(FIX_EXTRAS)  # a choice beyond what was asked
                continue
            choice = self._chat_choice(raw, usage) if chat else self._completion_choice(raw, usage)
            choice["index"] = index
            out_choices.append(choice)

        if usage is not None:
            value = usage_value(usage)
        else:
            value = estimated_usage(prompt_chars(ctx.prompt), self.text_chars, self.text_events)
            usage = {
                "prompt_tokens": value.prompt_tokens,
                "completion_tokens": value.completion_tokens,
                "total_tokens": value.total_tokens,
            }
            self.fixes.add(FIX_USAGE)

        out = self._envelope(body, "chat.completion" if chat else "text_completion")
        out["choices"] = out_choices
        out["usage"] = usage
        finishes = tuple(
            choice["finish_reason"] for choice in sorted(out_choices, key=_choice_index)
        )
        return Normalized(
            orjson.dumps(out),
            value,
            frozenset(self.fixes),
            out["id"],
            upstream_model(body),
            finishes,
        )

    def _envelope(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        upstream_id = body.get("id")
        created = plausible_created(body.get("created"))
        if not (isinstance(upstream_id, str) and 0 < len(upstream_id) <= ENVELOPE_TEXT_MAX):
            upstream_id = None
        if body.get("object") != kind or not upstream_id or created is None:
            self.fixes.add(FIX_ENVELOPE)
        out: dict[str, Any] = {
            "id": upstream_id
            if isinstance(upstream_id, str) and upstream_id
            else make_id(self.ctx.endpoint),
            "object": kind,
            "created": created if created is not None else self.ctx.created,
            "model": self.ctx.model,
        }
        fingerprint = body.get("system_fingerprint")
        if isinstance(fingerprint, str) and 0 < len(fingerprint) <= ENVELOPE_TEXT_MAX:
            out["system_fingerprint"] = fingerprint
        tier = service_tier(body.get("service_tier"))
        if tier is not None and kind == "chat.completion":
            out["service_tier"] = tier
        return out

    def _finish(self, raw: dict[str, Any], has_calls: bool, usage: dict[str, Any] | None) -> str:
        value = raw.get("finish_reason")
        if is_error_finish(value):
            raise upstream_error(
                raw.get("error") or f"The upstream stopped with finish_reason '{value}'"
            )
        reason = canonical_finish_reason(value)
        if reason is None:
            self.fixes.add(FIX_FINISH_SYNTHESIZED)
            limit = self.ctx.max_tokens
            if has_calls:
                reason = "tool_calls"
            elif limit is not None and usage is not None and usage["completion_tokens"] >= limit:
                reason = "length"
            else:
                reason = "stop"
        elif reason != value:
            self.fixes.add(FIX_FINISH_REASON)
        # isinstance first: a value that is no string (a list) is unhashable.
        if has_calls and isinstance(value, str) and value in STOP_MEANS_TOOL_CALLS:
            reason = "tool_calls"
        return reason

    def _chat_choice(self, raw: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
        if not raw.keys() <= _CHAT_CHOICE_KEYS:
            self.fixes.add(FIX_EXTRAS)
        message = raw.get("message")
        if not isinstance(message, dict):
            raise UpstreamProtocolError("The upstream answered with a choice without a message")
        if not message.keys() <= _MESSAGE_KEYS | {"reasoning_content"}:
            self.fixes.add(FIX_EXTRAS)
        content, reasoning = take_text(message, self.fixes)
        refusal = message.get("refusal")
        refusal = refusal if isinstance(refusal, str) else None

        out: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
        for text in (content, reasoning, refusal):
            if text:
                self.text_chars += len(text)
                self.text_events += 1
        if reasoning and self.ctx.reasoning:
            out["reasoning_content"] = reasoning
        tool_calls = self._tool_calls(message.get("tool_calls"))
        if tool_calls:
            out["tool_calls"] = tool_calls
        function_call = message.get("function_call")
        if isinstance(function_call, dict):
            name, arguments = function_call.get("name"), function_call.get("arguments")
            if isinstance(name, str) and isinstance(arguments, str):
                out["function_call"] = {"name": name, "arguments": arguments}
        annotations = _annotations(message.get("annotations"))
        if annotations:
            out["annotations"] = annotations
        return {
            "index": 0,
            "message": out,
            "logprobs": chat_logprobs(raw.get("logprobs")),
            "finish_reason": self._finish(raw, bool(tool_calls), usage),
        }

    def _tool_calls(self, raw: object) -> list[dict[str, Any]]:
        if isinstance(raw, dict):
            raw = [raw]
            self.fixes.add(FIX_TOOL_CALLS)
        if not isinstance(raw, list):
            return []
        calls = []
        for call in raw:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                self.fixes.add(FIX_TOOL_CALLS)
                continue
            arguments = function.get("arguments")
            if isinstance(arguments, dict | list):
                arguments = orjson.dumps(arguments).decode()
                self.fixes.add(FIX_TOOL_CALLS)
            elif not isinstance(arguments, str):
                arguments = ""
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = make_call_id()
                self.fixes.add(FIX_TOOL_CALLS)
            self.text_chars += len(arguments)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": function["name"], "arguments": arguments},
                }
            )
        return calls

    def _completion_choice(
        self, raw: dict[str, Any], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        text = raw.get("text")
        if not isinstance(text, str):
            raise UpstreamProtocolError("The upstream answered with a choice without text")
        self.text_chars += len(text)
        self.text_events += 1
        reason = self._finish(raw, False, usage)
        if reason not in _COMPLETION_REASONS:
            reason = "stop"
        return {
            "index": 0,
            "text": text,
            "logprobs": completion_logprobs(raw.get("logprobs")),
            "finish_reason": reason,
        }


def _choice_index(choice: dict[str, Any]) -> int:
    index: int = choice["index"]
    return index


def _annotations(raw: object) -> list[dict[str, Any]]:
    """OpenAI's url_citation annotations, with only the keys its schema defines."""
    if not isinstance(raw, list):
        return []
    out = []
    for item in raw:
        if not isinstance(item, dict) or item.get("type") != "url_citation":
            continue
        citation = item.get("url_citation")
        if isinstance(citation, dict):
            keys = ("end_index", "start_index", "url", "title")
            if all(key in citation for key in keys):
                out.append({"type": "url_citation", "url_citation": {k: citation[k] for k in keys}})
    return out
