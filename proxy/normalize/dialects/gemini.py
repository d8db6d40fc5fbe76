"""Google's Gemini API (``{base_url}/v1beta/models/{model}:generateContent``), translated both
ways.

Its answer, streamed or whole, is a ``GenerateContentResponse``: ``candidates`` (each with
``content.parts`` and, on its last chunk, a ``finishReason``), ``usageMetadata`` (cumulative, on
every chunk of a stream) and a ``responseId``. Each candidate becomes the choice of its
``index``; text parts marked ``thought`` are reasoning; ``functionCall`` parts are tool calls,
given ids here, as Gemini gives none. A stream has no terminator: every choice finishing ends it.

docs/providers/gemini.md says what is translated, what is refused and what to set.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

from proxy.core.errors import UpstreamProtocolError
from proxy.normalize.dialects import gemini_embed
from proxy.normalize.dialects.dialect import Dialect
from proxy.normalize.dialects.gemini_calls import Candidate, Unreadable
from proxy.normalize.dialects.gemini_request import build_request
from proxy.normalize.fields import RequestContext

_FINISH_REASONS: Final = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    # The safety family, and recitation: the output was withheld by a filter.
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "LANGUAGE": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "MODEL_ARMOR": "content_filter",
}
_RFC3339: Final = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)\Z")


def _auth(api_key: str) -> dict[str, str]:
    return {"x-goog-api-key": api_key}


# -- candidates -------------------------------------------------------------------------------


def _index(raw: dict[str, Any]) -> int:
    index = raw.get("index", 0)  # proto3 JSON leaves out a 0
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else 0


def _read(raw: dict[str, Any], state: Candidate) -> tuple[str, str, list[dict[str, Any]]]:
    """(text, thoughts, tool-call fragments) of one candidate's parts; other parts (inline
    data, executable code, thought signatures) carry no text for the client."""
    text: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    content = raw.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        call = part.get("functionCall")
        if isinstance(call, dict):
            calls += state.take(call)
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") is True else text).append(part["text"])
    if raw.get("finishReason"):
        calls += state.flush()
    return "".join(text), "".join(thoughts), calls


def _finish(value: object, called: bool) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    # Gemini says STOP after a function call too. Any reason not listed (OTHER,
    # MALFORMED_FUNCTION_CALL, ...) still ended the candidate, and the schema allows only stop.
    if value == "STOP" and called:
        return "tool_calls"
    return _FINISH_REASONS.get(value, "stop")


def _blocked(payload: dict[str, Any]) -> bool:
    """The prompt itself was blocked: no candidate comes, only promptFeedback.blockReason."""
    feedback = payload.get("promptFeedback")
    return isinstance(feedback, dict) and bool(feedback.get("blockReason"))


def _logprobs(result: object) -> dict[str, Any] | None:
    """OpenAI's logprobs from a candidate's logprobsResult (a list of the tokens chosen at each
    step, beside the top candidates of that step)."""
    if not isinstance(result, dict):
        return None
    chosen = result.get("chosenCandidates")
    if not isinstance(chosen, list) or not chosen:
        return None
    tops = result.get("topCandidates")
    tops = tops if isinstance(tops, list) else []
    content = []
    for step, token in enumerate(chosen):
        if not isinstance(token, dict):
            continue
        entry = _token(token)
        top = tops[step] if step < len(tops) and isinstance(tops[step], dict) else {}
        alternatives = top.get("candidates")
        entry["top_logprobs"] = (
            [_token(t) for t in alternatives if isinstance(t, dict)]
            if isinstance(alternatives, list)
            else []
        )
        content.append(entry)
    return {"content": content, "refusal": None}


def _token(candidate: dict[str, Any]) -> dict[str, Any]:
    token = candidate.get("token")
    token = token if isinstance(token, str) else ""
    logprob = candidate.get("logProbability", 0.0)  # proto3 JSON leaves out a 0
    if isinstance(logprob, bool) or not isinstance(logprob, int | float):
        logprob = 0.0
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _usage(meta: object) -> dict[str, Any] | None:
    """OpenAI's usage from usageMetadata. candidatesTokenCount leaves out the thinking, which
    OpenAI counts in completion_tokens; a prompt's cached part is within promptTokenCount."""
    if not isinstance(meta, dict):
        return None
    prompt = _count(meta.get("promptTokenCount"))
    candidates = _count(meta.get("candidatesTokenCount"))
    thoughts = _count(meta.get("thoughtsTokenCount"))
    if prompt is None and candidates is None and thoughts is None:
        return None  # Vertex's chunks before the last carry only trafficType
    completion = (candidates or 0) + (thoughts or 0)
    usage: dict[str, Any] = {"completion_tokens": completion}
    if prompt is not None:  # else no count of the prompt: the normalizer estimates it
        prompt_tokens = prompt + (_count(meta.get("toolUsePromptTokenCount")) or 0)
        total = _count(meta.get("totalTokenCount"))
        usage["prompt_tokens"] = prompt_tokens
        usage["total_tokens"] = total if total is not None else prompt_tokens + completion
    cached = _count(meta.get("cachedContentTokenCount"))
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if thoughts is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    return usage


def _created(value: object) -> int | None:
    """Unix seconds from Vertex's createTime (RFC 3339); the Gemini API gives no time."""
    found = _RFC3339.match(value) if isinstance(value, str) else None
    if found is None:
        return None
    offset = "+00:00" if found[2] == "Z" else found[2]
    try:
        return int(datetime.fromisoformat(found[1] + offset).timestamp())
    except ValueError:
        return None


def _envelope(payload: dict[str, Any], ctx: RequestContext, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {"object": kind, "created": _created(payload.get("createTime"))}
    if out["created"] is None:
        out["created"] = ctx.created
    response_id = payload.get("responseId")
    if isinstance(response_id, str) and response_id:
        out["id"] = response_id
    if "modelVersion" in payload:
        out["model"] = payload["modelVersion"]  # the upstream's, for the span (never shown)
    return out


# -- the stream and the whole answer ------------------------------------------------------------


class _StreamAdapter:
    """One stream's chunks, from its events (``alt=sse`` events and JSON array elements alike)."""

    __slots__ = ("_candidates", "_ctx")

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx
        self._candidates: dict[int, Candidate] = {}

    def __call__(self, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        candidates = payload.get("candidates")
        if payload.get("error") and not candidates:
            return {"error": payload["error"]}, False  # Google's error envelope, mid-stream
        choices = []
        try:
            for raw in candidates if isinstance(candidates, list) else ():
                if isinstance(raw, dict):
                    choices.append(self._choice(raw))
        except Unreadable as exc:
            return {"error": {"message": f"The upstream sent {exc}"}}, False
        if not choices and _blocked(payload):
            choices.append({"index": 0, "delta": {}, "finish_reason": "content_filter"})
        chunk = _envelope(payload, self._ctx, "chat.completion.chunk")
        chunk["choices"] = choices
        usage = _usage(payload.get("usageMetadata"))
        if usage is not None:
            chunk["usage"] = usage
            if self._ctx.n > 1 and len(choices) == 1:
                # The normalizer reads usage on a chunk of one choice as that choice's own
                # (TGI's per-prompt counts); Gemini's are the whole response's. An empty
                # second entry for the same choice says so, and adds nothing.
                choices.append({"index": choices[0]["index"], "delta": {}})
        return chunk, False

    def _choice(self, raw: dict[str, Any]) -> dict[str, Any]:
        index = _index(raw)
        state = self._candidates.get(index)
        if state is None:
            state = self._candidates[index] = Candidate()
        text, thoughts, calls = _read(raw, state)
        delta: dict[str, Any] = {}
        if text:
            delta["content"] = text
        if thoughts:
            delta["reasoning_content"] = thoughts
        if calls:
            delta["tool_calls"] = calls
        choice: dict[str, Any] = {"index": index, "delta": delta}
        logprobs = _logprobs(raw.get("logprobsResult"))
        if logprobs is not None:
            choice["logprobs"] = logprobs
        reason = _finish(raw.get("finishReason"), state.calls > 0)
        if reason is not None:
            choice["finish_reason"] = reason
        return choice


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    """The chat.completion for a whole ``generateContent`` answer."""
    candidates = body.get("candidates")
    if body.get("error") and not candidates:
        return {"error": body["error"]}
    choices = []
    for raw in candidates if isinstance(candidates, list) else ():
        if not isinstance(raw, dict):
            continue
        state = Candidate()
        try:
            text, thoughts, fragments = _read(raw, state)
            fragments += state.flush()
        except Unreadable as exc:
            raise UpstreamProtocolError(f"The upstream sent {exc}") from None
        calls: list[dict[str, Any]] = []
        for fragment in fragments:  # an announcement, then perhaps the arguments apart
            if "id" in fragment:
                calls.append({key: fragment[key] for key in ("id", "type", "function")})
            else:
                calls[fragment["index"]]["function"]["arguments"] += fragment["function"][
                    "arguments"
                ]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if thoughts:
            message["reasoning_content"] = thoughts
        if calls:
            message["tool_calls"] = calls
        choices.append(
            {
                "index": _index(raw),
                "message": message,
                "logprobs": _logprobs(raw.get("logprobsResult")),
                "finish_reason": _finish(raw.get("finishReason"), bool(calls)),
            }
        )
    if not choices and _blocked(body):
        message = {"role": "assistant", "content": None}
        choices.append({"index": 0, "message": message, "finish_reason": "content_filter"})
    out = _envelope(body, ctx, "chat.completion")
    out["choices"] = sorted(choices, key=lambda choice: choice["index"])
    usage = _usage(body.get("usageMetadata"))
    if usage is not None:
        out["usage"] = usage
    return out


DIALECT: Final = Dialect(
    "gemini",
    paths={"chat": "/v1beta/models/{model}:generateContent", "embeddings": gemini_embed.PATH},
    # alt=sse: events, not the JSON array Gemini streams otherwise (which is read all the same).
    stream_paths={"chat": "/v1beta/models/{model}:streamGenerateContent?alt=sse"},
    adapter=_StreamAdapter,
    adapt_response=adapt_response,
    request=build_request,
    embed_request=gemini_embed.build_embed_request,
    adapt_embeddings=gemini_embed.adapt_embeddings,
    auth=_auth,
    json_array_stream=True,
    native=True,
)
