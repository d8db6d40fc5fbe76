"""The tolerant stream normalizer for every OpenAI-compatible upstream (sans-IO).

Events go in (``feed``), canonical SSE frames come out, ready to write
(docs/canonical-output.md section 2):

- the envelope (``id``, ``object``, ``created``, ``model``) is fixed on the first chunk and kept;
- each choice gets ``role`` once, on its first chunk; empty and opener chunks are dropped;
- ``finish_reason`` is held back until the upstream ends, then sent on one last chunk per
  choice: that is the only way to keep it off every chunk but the last when an upstream sends
  text after (or together with) its finish chunk;
- usage is read from wherever it hides, never passed on in place, and shown once, right before
  ``[DONE]``, only to a client that asked for it;
- an upstream error object becomes one error event, and the stream ends there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.errors import ProxyError, UpstreamProtocolError, error_body
from proxy.core.exchange import Answered
from proxy.core.fix_names import (
    FIX_CUT_SHORT,
    FIX_EMPTY_CHUNK,
    FIX_ENVELOPE,
    FIX_ERROR_EVENT,
    FIX_EXTRAS,
    FIX_FINISH_REASON,
    FIX_FINISH_SYNTHESIZED,
    FIX_LEGACY,
    FIX_ROLE,
    FIX_USAGE,
)
from proxy.core.sse import DONE_FRAME, Event, encode_data, is_done
from proxy.core.usage import (
    Usage,
    canonical_usage,
    estimate_tokens,
    estimated_usage,
    prompt_chars,
    sum_usage,
    usage_value,
)
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.fields import (
    RequestContext,
    canonical_finish_reason,
    chat_logprobs,
    completion_logprobs,
    is_error_finish,
    make_id,
    plausible_created,
    service_tier,
    take_text,
    upstream_error,
    upstream_model,
)
from proxy.normalize.tables import (
    ENVELOPE_TEXT_MAX,
    REASONING_KEYS,
    STOP_MEANS_TOOL_CALLS,
)
from proxy.normalize.toolcalls import ToolCalls

_CHUNK_KEYS = frozenset(
    {"id", "object", "created", "model", "choices", "system_fingerprint", "service_tier"}
)
_CHAT_CHOICE_KEYS = frozenset({"index", "delta", "logprobs", "finish_reason"})
_COMPLETION_CHOICE_KEYS = frozenset({"index", "text", "logprobs", "finish_reason"})
# The end of an ordinary content chunk's frame, after its JSON-encoded text (``_ordinary``).
_ORDINARY_TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'


class _Failed:
    """A choice whose finish_reason announced a failure (OpenRouter "error")."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(slots=True)
class _Choice:
    role_sent: bool = False
    finish: str | None = None
    calls: ToolCalls = field(default_factory=ToolCalls)


class StreamNormalizer:
    """One streamed response: ``feed`` each upstream event, ``finish`` at the upstream's EOF."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.fixes: set[str] = set()
        self.error: ProxyError | None = None
        self.ended = False  # the client's stream is complete ([DONE] or error event sent)
        self._chat = ctx.endpoint == "chat"
        self._object = "chat.completion.chunk" if self._chat else "text_completion"
        self._id: str | None = None
        self._created: int | None = None
        self._fingerprint: str | None = None
        self._tier: str | None = None  # service_tier, canonical (fields.service_tier)
        self._tier_seen: object = None  # the upstream's last service_tier, as it came
        self._model: str | None = None  # the upstream's model, as it first came (``answered``)
        self._finishes: tuple[str, ...] = ()  # each choice's, as sent at the end
        self._choices: dict[int, _Choice] = {}
        self._usage: dict[str, Any] | None = None  # reported for the whole response
        self._choice_usage: dict[int, dict[str, Any]] = {}  # reported on one choice's chunks
        self._running: dict[str, Any] | None = None  # the latest on any choice's chunk
        self._batch = _batched(ctx)
        self._complete = False  # a legacy dialect's own "this was the last event"
        self._text_chars = 0
        self._text_events = 0
        # Frame heads for ordinary content chunks, by choice index (``_ordinary``); emptied
        # whenever what they were made of changes (the fingerprint).
        self._heads: dict[int, bytes] = {}
        # The upstream's own events need the dialect's adapter first, unless it speaks OpenAI's.
        dialect = DIALECTS[ctx.dialect]
        self._adapt = None if dialect.adapter is None else dialect.adapter(ctx)
        self._native = dialect.native
        # The shortcut for ordinary text chunks (``_ordinary``): tried on an OpenAI upstream's
        # own events (``_fast``), and on what an adapter makes of a native one.
        self._shortcut = self._chat
        self._fast = self._shortcut and self._adapt is None
        # A chat stream whose client asked for one choice may still bring several (a default
        # n, best_of), or TGI <= 2.0's token positions as indices (``_index``, ``_holds``).
        self._single = self._chat and ctx.n <= 1
        self._aliases: dict[int, int] = {}  # upstream index -> the client's choice index
        self._last_index: int | None = None  # the upstream index of the latest choice
        self._positional = False  # indices were seen counting token positions
        self._held: dict[str, Any] | None = None  # a chunk whose index the next one tells

    # -- input ---------------------------------------------------------------------------

    def feed(self, event: Event) -> list[bytes]:
        if self.ended:
            return []
        data = event.data
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            # Neither [DONE] nor a blank event is JSON: asked here, they cost a chunk nothing.
            if is_done(data):
                return self._end(done=True)
            if not data.strip():
                return []
            return self.fail(UpstreamProtocolError("The upstream sent an event that is not JSON"))
        if not isinstance(payload, dict):
            return self.fail(
                UpstreamProtocolError("The upstream sent an event that is not an object")
            )
        if event.event == "error" or (payload.get("type") == "error" and "error" in payload):
            self.fixes.add(FIX_ERROR_EVENT)
            return self.fail(upstream_error(payload.get("error", payload)))
        if self._fast:
            frame = self._ordinary(payload)
            if frame is not None:
                return [frame]
        adapt = self._adapt
        if adapt is not None:
            adapted, complete = adapt(payload)
            self._complete = self._complete or complete
            if adapted is not payload and not self._native:
                self.fixes.add(FIX_LEGACY)
            if adapted is None:
                return []
            payload = adapted
            if self._shortcut:
                # An adapter's text chunk is as ordinary as an OpenAI upstream's own.
                frame = self._ordinary(payload)
                if frame is not None:
                    return [frame]
        return self._chunk(payload)

    def finish(self) -> list[bytes]:
        """The upstream's body ended (with or without ``[DONE]``)."""
        if self.ended:
            return []
        return self._end(done=self._complete)

    def fail(self, exc: ProxyError) -> list[bytes]:
        """End the client's stream with one error event (docs/canonical-output.md section 4)."""
        if self.ended:
            return []
        frames = self._release(None)  # text held back still reaches the client, before it
        if self.ended:
            return frames
        self.ended = True
        self.error = exc
        if self.ctx.redact is not None:  # the upstream's words, on their way to the client
            self.ctx.redact.error(exc)
        return [*frames, encode_data(orjson.dumps(error_body(exc)))]

    # -- results -------------------------------------------------------------------------

    @property
    def usage(self) -> Usage:
        """What the request consumed: the upstream's counts, else an estimate marked as one."""
        usage = self._final_usage()
        if usage is not None:
            return usage_value(usage)
        return estimated_usage(prompt_chars(self.ctx.prompt), self._text_chars, self._text_events)

    @property
    def answered(self) -> Answered:
        """What the client's stream said of itself, with the upstream's model."""
        return Answered(self._id, self._model, self._finishes)

    def usage_report(self) -> dict[str, Any]:
        """The usage object the stream shows (or would show, had the client asked for it)."""
        usage = self._final_usage()
        return usage if usage is not None else self._estimate()

    # -- one chunk -----------------------------------------------------------------------

    def _chunk(self, payload: dict[str, Any]) -> list[bytes]:
        if not self._single:
            return self._frames(payload)
        frames = self._release(payload)
        if self.ended:
            return frames
        if self._holds(payload):
            self._held = payload
            return frames
        return frames + self._frames(payload) if frames else self._frames(payload)

    def _frames(self, payload: dict[str, Any]) -> list[bytes]:
        error = payload.get("error")
        if error:
            # HTTP 200 then {"error": {...}}, or OpenRouter's error chunk with a fake choice.
            self.fixes.add(FIX_ERROR_EVENT)
            return self.fail(upstream_error(error))
        if FIX_EXTRAS not in self.fixes and not payload.keys() <= _CHUNK_KEYS:
            self.fixes.add(FIX_EXTRAS)
        self._take_usage(payload)
        self._take_envelope(payload)

        choices = payload.get("choices")
        out: list[dict[str, Any]] = []
        if isinstance(choices, list):
            limit = self.ctx.choices
            for raw in choices:
                if isinstance(raw, dict):
                    if limit and self._index(raw) >= limit:
                        self.fixes.add(FIX_EXTRAS)  # a choice beyond what was asked
                        continue
                    try:
                        choice = (
                            self._chat_choice(raw) if self._chat else self._completion_choice(raw)
                        )
                    except UpstreamProtocolError as exc:  # tool calls it cannot relay
                        return self.fail(exc)
                    if isinstance(choice, _Failed):
                        message = f"The upstream stopped with finish_reason '{choice.reason}'"
                        return self.fail(upstream_error(raw.get("error") or message))
                    if choice is not None:
                        out.append(choice)
        if not out:
            if choices:
                self.fixes.add(FIX_EMPTY_CHUNK)
            return []
        return [encode_data(orjson.dumps(self._envelope(out)))]

    def _ordinary(self, payload: dict[str, Any]) -> bytes | None:
        """The frame for an ordinary chat chunk, or None to take the general path (``_chunk``).

        Nearly every chunk of a stream is one choice's next piece of text and nothing else. Once
        that choice's role has gone out, such a chunk needs no fix and its frame differs from
        the previous one only in the text, so the frame is a head made once per choice, the
        JSON-encoded text and a constant tail: byte for byte what ``_chunk`` would write, in
        about a third of the time. Anything else (a second choice in the chunk, a finish,
        logprobs, usage, an error, any other delta key, a new fingerprint, an index the general
        path would fix) goes the general way.
        """
        choices = payload.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return None
        raw = choices[0]
        if type(raw) is not dict:
            return None
        index = raw.get("index")
        # Exactly int: True and 0.0 would find a head (they hash as 1 and 0), but the general
        # path fixes them.
        if type(index) is not int:
            return None
        delta = raw.get("delta")
        if type(delta) is not dict or len(delta) != 1:
            return None
        content = delta.get("content")
        if type(content) is not str or not content:
            return None
        if raw.get("finish_reason") is not None or raw.get("logprobs") is not None:
            return None
        if (
            payload.get("usage") is not None
            or "x_groq" in payload
            or payload.get("error")
            or payload.get("object") != self._object
        ):
            return None
        fingerprint = payload.get("system_fingerprint")
        if fingerprint is not None and fingerprint != self._fingerprint:
            return None
        tier = payload.get("service_tier")
        if (tier is not None and tier != self._tier_seen) or self._held is not None:
            return None
        head = self._heads.get(index)
        if head is None:
            head = self._ordinary_head(index)
            if head is None:
                return None
        if FIX_EXTRAS not in self.fixes and not (
            payload.keys() <= _CHUNK_KEYS and raw.keys() <= _CHAT_CHOICE_KEYS
        ):
            self.fixes.add(FIX_EXTRAS)
        self._text_chars += len(content)
        self._text_events += 1
        self._last_index = index
        return head + orjson.dumps(content) + _ORDINARY_TAIL

    def _ordinary_head(self, index: int) -> bytes | None:
        """The frame up to the text for choice ``index``, once the general path has set it up."""
        if self._id is None or self._created is None:
            return None  # the envelope is fixed by the first chunk, on the general path
        if index < 0 or (self._single and self._aliases.get(index) != index):
            return None  # an index the general path fixes (and notes)
        state = self._choices.get(index)
        if state is None or not state.role_sent:
            return None  # the choice's first chunk carries its role
        envelope = orjson.dumps(self._envelope([]))
        # '{..."choices":[]}' without its last '[]}', then this choice's opening.
        head = b'data: %s[{"index":%d,"delta":{"content":' % (envelope[:-3], index)
        self._heads[index] = head
        return head

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        if self._id is None:
            self._id = make_id(self.ctx.endpoint)
        if self._created is None:
            self._created = self.ctx.created
        chunk: dict[str, Any] = {
            "id": self._id,
            "object": self._object,
            "created": self._created,
            "model": self.ctx.model,
        }
        if self._tier is not None:
            chunk["service_tier"] = self._tier
        if self._fingerprint is not None:
            chunk["system_fingerprint"] = self._fingerprint
        chunk["choices"] = choices
        return chunk

    def _take_envelope(self, payload: dict[str, Any]) -> None:
        if payload.get("object") != self._object:
            self.fixes.add(FIX_ENVELOPE)
        if self._id is None:
            upstream_id = payload.get("id")
            if isinstance(upstream_id, str) and 0 < len(upstream_id) <= ENVELOPE_TEXT_MAX:
                self._id = upstream_id
            else:
                self.fixes.add(FIX_ENVELOPE)
        if self._created is None:
            self._created = plausible_created(payload.get("created"))
            if self._created is None:
                self.fixes.add(FIX_ENVELOPE)
        if self._model is None:
            self._model = upstream_model(payload)
        fingerprint = payload.get("system_fingerprint")
        if (
            isinstance(fingerprint, str)
            and 0 < len(fingerprint) <= ENVELOPE_TEXT_MAX
            and fingerprint != self._fingerprint
        ):
            self._fingerprint = fingerprint
            self._heads.clear()
        raw_tier = payload.get("service_tier")
        if raw_tier is not None and raw_tier != self._tier_seen:
            self._tier_seen = raw_tier
            # The completions chunk schema has no service_tier (docs/canonical-output.md section 1).
            tier = service_tier(raw_tier) if self._chat else None
            if tier is not None and tier != self._tier:
                self._tier = tier
                self._heads.clear()

    def _take_usage(self, payload: dict[str, Any]) -> None:
        raw = payload.get("usage")
        if raw is None:
            extension = payload.get("x_groq")
            raw = extension.get("usage") if isinstance(extension, dict) else None
            if raw is None:
                return
        usage = canonical_usage(raw, self._prompt_estimate)
        if usage is None:
            return
        choices = payload.get("choices")
        if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict):
            # Usage on a choice's own chunk: the response's running total (Perplexity, xAI 2024),
            # or, in a batch, its prompt's own count (``_final_usage``).
            self._choice_usage[self._index(choices[0])] = usage
            self._running = usage
            self.fixes.add(FIX_USAGE)
        else:
            self._usage = usage
            if choices or not self.ctx.include_usage:
                self.fixes.add(FIX_USAGE)

    def _prompt_estimate(self) -> int:
        return estimate_tokens(prompt_chars(self.ctx.prompt))

    def _final_usage(self) -> dict[str, Any] | None:
        """The response's usage: its own report, else what its choices' chunks reported.

        Those are the response's running totals, the last one standing whichever choice the
        chunk carries, so that its prompt is counted once; unless the choices answer prompts of
        their own (``_per_prompt``): then each choice's latest report is its prompt's, added up.
        """
        if self._usage is not None:
            return self._usage
        if len(self._choice_usage) > 1 and self._per_prompt():
            return sum_usage(list(self._choice_usage.values()))
        return self._running

    def _per_prompt(self) -> bool:
        """Whether the choices' reports each count a prompt of their own: the request was a
        batch, or they count different prompts (TGI's batch, whatever the request said)."""
        if self._batch:
            return True
        return len({report["prompt_tokens"] for report in self._choice_usage.values()}) > 1

    def _index(self, raw: dict[str, Any]) -> int:
        index = raw.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            self.fixes.add(FIX_ENVELOPE)
            return 0
        if not self._single:
            return index
        self._last_index = index
        alias = self._aliases.get(index)
        if alias is None:
            # The first index is choice 0; a later one that ``_holds`` did not take for a token
            # position is a choice of its own: text is never merged
            # (docs/canonical-output.md section 2).
            alias = self._aliases[index] = self._next_choice(index) if self._aliases else 0
        if alias != index:
            self.fixes.add(FIX_ENVELOPE)
        return alias

    def _next_choice(self, index: int) -> int:
        """The client's index for a new upstream choice: its own when that keeps them dense."""
        taken = set(self._aliases.values())
        last = max(taken)
        return index if index not in taken and index <= last + 1 else last + 1

    # -- one choice asked for, several indices seen ------------------------------------------

    def _holds(self, payload: dict[str, Any]) -> bool:
        """Whether this chunk's index might be a token position (TGI <= 2.0 counts one up per
        chunk): then only the next chunk tells, and the chunk waits for it (``_release``).

        It might when it is the one choice of its chunk, new, one past the latest index, whose
        choice has not finished, and not a choice's opener (a role with no text yet): a real
        second choice opens so, unless the stream has already shown token positions."""
        choices = payload.get("choices")
        if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
            return False
        raw = choices[0]
        index = raw.get("index")
        last = self._last_index
        if type(index) is not int or last is None or index != last + 1 or index in self._aliases:
            return False
        state = self._choices.get(self._aliases.get(last, -1))
        if state is None or state.finish is not None or payload.get("error"):
            return False
        return self._positional or not _opens(raw)

    def _release(self, after: dict[str, Any] | None) -> list[bytes]:
        """The frames of the chunk held back, now that ``after`` (None: the end) tells what its
        index was: a token position if ``after`` counts on (or nothing contradicts it), else a
        choice of its own (it revisits an index, repeats its own, or is no single choice)."""
        held = self._held
        if held is None:
            return []
        self._held = None
        index: int = held["choices"][0]["index"]
        if after is None or _continues(after, index, self._aliases):
            self._aliases[index] = self._aliases[index - 1]
            self._positional = True
        return self._frames(held)

    def _state(self, raw: dict[str, Any]) -> tuple[int, _Choice]:
        index = self._index(raw)
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = _Choice()
        return index, state

    def _take_finish(self, raw: dict[str, Any], state: _Choice) -> _Failed | None:
        """Record the choice's finish_reason; a ``_Failed`` when it announces a failure."""
        value = raw.get("finish_reason")
        if value is None:
            return None
        if is_error_finish(value):
            self.fixes.add(FIX_ERROR_EVENT)
            return _Failed(str(value))
        reason = canonical_finish_reason(value)
        if reason is None:
            return None
        if reason != value:
            self.fixes.add(FIX_FINISH_REASON)
        if value in STOP_MEANS_TOOL_CALLS and state.calls.emitted:
            reason = "tool_calls"
        if state.finish is None:
            state.finish = reason
        return None

    def _chat_choice(self, raw: dict[str, Any]) -> dict[str, Any] | _Failed | None:
        if FIX_EXTRAS not in self.fixes and not raw.keys() <= _CHAT_CHOICE_KEYS:
            self.fixes.add(FIX_EXTRAS)
        index, state = self._state(raw)
        delta = raw.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        out: dict[str, Any] = {}

        content, reasoning = take_text(delta, self.fixes)
        refusal = delta.get("refusal")

        if content:
            out["content"] = content
            self._count_text(content)
        if reasoning:
            self._count_text(reasoning)
            if self.ctx.reasoning:
                out["reasoning_content"] = reasoning
        if isinstance(refusal, str) and refusal:
            out["refusal"] = refusal
            self._count_text(refusal)
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            fragments = state.calls.take(tool_calls, self.fixes)
            if fragments:
                out["tool_calls"] = fragments
                for fragment in fragments:
                    if arguments := fragment["function"]["arguments"]:
                        self._count_text(arguments)
        function_call = delta.get("function_call")
        if isinstance(function_call, dict):
            legacy_call = {
                k: v
                for k, v in function_call.items()
                if k in ("name", "arguments") and isinstance(v, str)
            }
            if legacy_call:
                out["function_call"] = legacy_call

        logprobs = chat_logprobs(raw.get("logprobs"))
        failed = self._take_finish(raw, state)
        if failed is not None:
            return failed
        if not out and logprobs is None:
            # Nothing to say yet, except perhaps the role: keep the upstream's own role opener.
            if state.role_sent or delta.get("role") is None:
                return None
            if content == "":
                out["content"] = ""
        if state.role_sent:
            if "role" in delta:
                self.fixes.add(FIX_ROLE)
        else:
            state.role_sent = True
            out = {"role": "assistant", **out}
        return {"index": index, "delta": out, "logprobs": logprobs, "finish_reason": None}

    def _completion_choice(self, raw: dict[str, Any]) -> dict[str, Any] | _Failed | None:
        if FIX_EXTRAS not in self.fixes and not raw.keys() <= _COMPLETION_CHOICE_KEYS:
            self.fixes.add(FIX_EXTRAS)
        index, state = self._state(raw)
        text = raw.get("text")
        logprobs = completion_logprobs(raw.get("logprobs"))
        failed = self._take_finish(raw, state)
        if failed is not None:
            return failed
        if not isinstance(text, str) or not text:
            if logprobs is None:
                return None
            text = ""
        self._count_text(text)
        state.role_sent = True
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": None}

    def _count_text(self, text: str) -> None:
        self._text_chars += len(text)
        self._text_events += 1

    # -- the end -------------------------------------------------------------------------

    def _end(self, *, done: bool) -> list[bytes]:
        if self._held is not None:
            frames = self._release(None)
            return frames if self.ended else frames + self._end(done=done)
        if not self._choices:
            return self.fail(UpstreamProtocolError("The upstream stream ended without any choice"))
        unfinished = [state for state in self._choices.values() if state.finish is None]
        if unfinished and not done:
            self.fixes.add(FIX_CUT_SHORT)
            return self.fail(UpstreamProtocolError("The upstream stream was cut short"))
        frames = []
        finishes = []
        for index in sorted(self._choices):
            choice = self._finish_choice(index)
            finishes.append(choice["finish_reason"])
            frames.append(encode_data(orjson.dumps(self._envelope([choice]))))
        self._finishes = tuple(finishes)
        if self.ctx.include_usage:
            chunk = self._envelope([])
            chunk["usage"] = self.usage_report()
            frames.append(encode_data(orjson.dumps(chunk)))
        frames.append(DONE_FRAME)
        self.ended = True
        return frames

    def _finish_choice(self, index: int) -> dict[str, Any]:
        state = self._choices[index]
        reason = state.finish
        if reason is None:
            self.fixes.add(FIX_FINISH_SYNTHESIZED)
            reason = self._synthesized_finish(index, state)
        if not self._chat:
            # The legacy completions schema knows only these three reasons.
            if reason not in ("stop", "length", "content_filter"):
                reason = "stop"
            return {"index": index, "text": "", "logprobs": None, "finish_reason": reason}
        delta: dict[str, Any] = {}
        if not state.role_sent:
            state.role_sent = True
            delta["role"] = "assistant"
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}

    def _synthesized_finish(self, index: int, state: _Choice) -> str:
        if state.calls.emitted:
            return "tool_calls"
        limit = self.ctx.max_tokens
        if limit is None:
            return "stop"
        # The choice's own count (a batch's), or the response's when it has only this choice.
        usage = self._choice_usage.get(index) if self._per_prompt() else None
        if usage is None and len(self._choices) == 1:
            usage = self._final_usage()
        return "length" if usage is not None and usage["completion_tokens"] >= limit else "stop"

    def _estimate(self) -> dict[str, Any]:
        usage = self.usage
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }


def _batched(ctx: RequestContext) -> bool:
    """Whether the request is a batch: legacy completions' ``prompt`` as several strings or token
    lists (one list of token ids is one prompt), each answered by choices of its own."""
    prompt = ctx.prompt
    return (
        ctx.endpoint == "completions"
        and isinstance(prompt, list)
        and len(prompt) > 1
        and type(prompt[0]) is not int
    )


def _opens(raw: dict[str, Any]) -> bool:
    """Whether a chat choice's chunk only opens it: a role, and no text or call yet."""
    delta = raw.get("delta")
    if type(delta) is not dict or delta.get("role") is None:
        return False
    return not any(delta.get(key) for key in ("content", "tool_calls", *REASONING_KEYS))


def _continues(payload: dict[str, Any], index: int, aliases: dict[int, int]) -> bool:
    """Whether ``payload`` goes on counting token positions from ``index``; a chunk with no
    choice (usage, say) says nothing against it."""
    choices = payload.get("choices")
    if type(choices) is not list or not choices:
        return True
    if len(choices) != 1 or type(choices[0]) is not dict:
        return False
    following = choices[0].get("index")
    return following == index + 1 and following not in aliases
