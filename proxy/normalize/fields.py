"""Field-level rewrites shared by the stream and whole-response normalizers."""

from __future__ import annotations

import math
import secrets
import string
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.errors import UpstreamProtocolError, UpstreamStatusError
from proxy.core.fix_names import (
    FIX_CONTENT_PARTS,
    FIX_REASONING,
)
from proxy.core.redact import Redactor
from proxy.core.request import Endpoint
from proxy.normalize.tables import (
    CHAT_LOGPROBS_KEYS,
    COMPLETION_LOGPROBS_KEYS,
    ENVELOPE_TEXT_MAX,
    ERROR_FINISH_REASONS,
    FINISH_REASONS,
    NO_FINISH_REASON,
    REASONING_KEYS,
    SERVICE_TIERS,
)

_ALNUM = string.ascii_letters + string.digits


@dataclass(slots=True)
class RequestContext:
    """What the normalizer needs to know of the request it answers.

    Not frozen, like the other objects made for every request (``ClientRequest``, ``Attempt``,
    ``Answer``, ``Normalized``, ``Usage``, ``proxy.core.exchange.Exchange``): a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, several times slower than a
    plain store. Nothing changes them once made.
    """

    endpoint: Endpoint
    model: str  # the model name the client sent: every object carries it
    created: int  # when the request arrived, Unix seconds
    include_usage: bool = False  # the client asked stream_options.include_usage
    max_tokens: int | None = None  # the request's token limit, to tell "length" from "stop"
    reasoning: bool = True  # False: the model's config drops reasoning_content
    dialect: str = "openai"
    n: int = 1  # choices the client asked for; with 1, any upstream choice index means choice 0
    # The messages or prompt: measured (usage.prompt_chars) only for an estimate, when the
    # upstream counts nothing. Out of repr (a logged context must not carry the conversation)
    # and of eq (the size is all that matters, and comparing conversations would cost).
    prompt: object = field(default=None, compare=False, repr=False)
    # Takes every configured secret out of an upstream's error text.
    redact: Redactor | None = None
    choices: int = 0  # the most choices relayed (0: no bound); those past it are dropped
    encoding: str = "float"  # embeddings: "float" or "base64", as the client asked
    # The most bytes a Responses stream keeps to repeat at its end (server.max_response_bytes;
    # 0: no bound): past it, the stream ends failed.
    keeps: int = 0


def make_id(endpoint: Endpoint) -> str:
    return ("chatcmpl-" if endpoint == "chat" else "cmpl-") + secrets.token_hex(16)


def make_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def plausible_created(value: object) -> int | None:
    """Unix seconds from an upstream ``created``, or None when it is no plausible time.

    Floats are floored (SambaNova); milli-, micro- and nanoseconds are scaled down (Friendli's
    usage chunk carries nanoseconds); 0 (Azure's opener, Anthropic's compat layer) is no time.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    seconds = int(value)
    if seconds > 10**17:
        seconds //= 10**9
    elif seconds > 10**14:
        seconds //= 10**6
    elif seconds > 10**11:
        seconds //= 10**3
    # Before 1973 or after 2286 is a counter, a placeholder or garbage, not a creation time.
    return seconds if 10**8 <= seconds < 10**10 else None


def canonical_finish_reason(value: object) -> str | None:
    """The canonical finish_reason for an upstream value; None for "not finished yet".

    Unknown strings become "stop": the choice did finish, and the schema allows only its enum.
    """
    if value is None or not isinstance(value, str):
        return None
    if value.lower() in NO_FINISH_REASON:
        return None
    return FINISH_REASONS.get(value, FINISH_REASONS.get(value.lower(), "stop"))


def is_error_finish(value: object) -> bool:
    return isinstance(value, str) and value in ERROR_FINISH_REASONS


def split_content(content: object) -> tuple[str | None, str | None, bool]:
    """(text, reasoning, was_parts) from a content value that may be an array of parts.

    Mistral's magistral models send ``[{type: "thinking", thinking: [{type: "text", text}]},
    {type: "text", text}]``: text parts are the content, thinking parts are reasoning.
    """
    if content is None or isinstance(content, str):
        return content, None, False
    if not isinstance(content, list):
        return None, None, True
    text: list[str] = []
    thinking: list[str] = []
    for part in content:
        if isinstance(part, str):
            text.append(part)
        elif isinstance(part, dict):
            kind = part.get("type")
            if kind == "thinking":
                inner = part.get("thinking")
                t, _, _ = split_content(inner)
                if isinstance(inner, str):
                    thinking.append(inner)
                elif t:
                    thinking.append(t)
            elif isinstance(part.get("text"), str):
                text.append(part["text"])
    return ("".join(text) if text else None), ("".join(thinking) if thinking else None), True


def take_text(source: dict[str, Any], fixes: set[str]) -> tuple[str | None, str | None]:
    """(content, reasoning) of a delta or message, whatever the spellings; the fixes noted.

    Content may come as an array of parts whose thinking parts are reasoning (Mistral).
    """
    content = source.get("content")
    thinking = None
    if content is not None and not isinstance(content, str):
        content, thinking, _ = split_content(content)
        fixes.add(FIX_CONTENT_PARTS)
    reasoning, moved = take_reasoning(source)
    if moved:
        fixes.add(FIX_REASONING)
    if thinking:
        reasoning = reasoning + thinking if reasoning else thinking
    return content, reasoning


def take_reasoning(source: dict[str, Any]) -> tuple[str | None, bool]:
    """The reasoning text of a delta or message, whichever key spells it, and whether it moved.

    ``reasoning_details`` (OpenRouter) repeats what ``reasoning`` says, so it is never read.
    """
    for key in REASONING_KEYS:
        value = source.get(key)
        if isinstance(value, str):
            return value, key != "reasoning_content"
    return None, False


def chat_logprobs(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    out = {
        key: value.get(key) if isinstance(value.get(key), list) else None
        for key in CHAT_LOGPROBS_KEYS
    }
    return out if out["content"] is not None or out["refusal"] is not None else None


def completion_logprobs(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    out = {key: value[key] for key in COMPLETION_LOGPROBS_KEYS if isinstance(value.get(key), list)}
    return out or None


def service_tier(value: object) -> str | None:
    return value if isinstance(value, str) and value in SERVICE_TIERS else None


def upstream_model(body: dict[str, Any]) -> str | None:
    """The model an upstream's answer (or chunk) says it is (``gen_ai.response.model``), as it
    came: the client's answer carries the client's name instead."""
    model = body.get("model")
    return model if type(model) is str and 0 < len(model) <= ENVELOPE_TEXT_MAX else None


def upstream_object(raw: bytes) -> dict[str, Any]:
    """An upstream's whole 200 answer as the JSON object it must be, or UpstreamProtocolError."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError("The upstream answered with a body that is not JSON") from exc
    if not isinstance(body, dict):
        raise UpstreamProtocolError("The upstream answered with JSON that is not an object")
    return body


def upstream_error(error: object, status: int = 502) -> UpstreamStatusError:
    """The exception for an upstream ``error`` value, in any envelope it came.

    OpenAI: ``{message, type, param, code}``; OpenRouter: ``code`` an int and the kind in
    ``metadata.error_type``; some servers send a bare string. An adapter that knows the error
    exactly (Bedrock's stream exceptions, by their type) hands over the exception itself.
    """
    if isinstance(error, UpstreamStatusError):
        return error
    if isinstance(error, str):
        return UpstreamStatusError(error or "upstream error", upstream_status=status)
    if not isinstance(error, dict):
        return UpstreamStatusError("upstream error", upstream_status=status)
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = "upstream error"
    code = error.get("code")
    kind = error.get("type")
    if not isinstance(kind, str):
        metadata = error.get("metadata")
        kind = metadata.get("error_type") if isinstance(metadata, dict) else None
    param = error.get("param")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        # OpenRouter puts the HTTP status of the failure in code (429 for a rate limit), and
        # Google too, with the failure's name in status (RESOURCE_EXHAUSTED): that is the code.
        status = code
        google = error.get("status")
        if isinstance(google, str) and google:
            code = google
    return UpstreamStatusError(
        message,
        upstream_status=status,
        upstream_type=kind if isinstance(kind, str) else None,
        param=param if isinstance(param, str) else None,
        code=str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
    )
