"""A canonical chat completion as Anthropic's ``message`` object (sans-IO).

The pieces a whole answer and a stream share: the ``stop_reason`` for a ``finish_reason``, the
``usage`` for a canonical usage, a tool call's ``input``. The canonical answer does not say
which stop sequence ended it, so ``stop_sequence`` is always null and a stop is ``end_turn``.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.core.errors import UpstreamProtocolError

__all__ = ["message_body", "message_usage", "stop_reason", "tool_input"]

# finish_reason -> stop_reason: the inverse of dialects/anthropic.py's table (its round trip
# is tested). A finish_reason of the future is a turn that ended.
_STOP_REASONS: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def stop_reason(finish: object) -> str:
    """Anthropic's ``stop_reason`` for a canonical ``finish_reason``."""
    return _STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def message_usage(usage: object) -> dict[str, int]:
    """Anthropic's four counts for a canonical usage (zeros where it says nothing).

    Anthropic's ``input_tokens`` leaves out the cached prefix, read or written, which the
    canonical ``prompt_tokens`` counts (dialects/anthropic.py ``openai_usage``, inverted)."""
    if not isinstance(usage, dict):
        usage = {}
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        details = {}
    read = _count(details.get("cached_tokens"))
    written = _count(details.get("cache_write_tokens"))
    return {
        "input_tokens": max(_count(usage.get("prompt_tokens")) - read - written, 0),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": _count(usage.get("completion_tokens")),
    }


def tool_input(arguments: object) -> dict[str, Any]:
    """A tool call's ``input`` for its canonical ``arguments``.

    No arguments are ``{}``; arguments that are not a JSON object are the upstream's failure
    (UpstreamProtocolError): Anthropic's ``input`` is an object, and ``{}`` in their place
    would run the tool with arguments the model did not give."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamProtocolError(
            "The upstream sent tool call arguments that are not a JSON object"
        )
    return value


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Thinking, text (the refusal's text too: Anthropic has no other place for it), then
    each tool call, as a stream of the same answer shows them."""
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        # The model did not sign it: an Anthropic model would refuse it sent back, and the
        # request translation drops it (faces/anthropic/request.py).
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = "".join(
        part for key in ("content", "refusal") if isinstance(part := message.get(key), str)
    )
    if text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": tool_input(function.get("arguments")),
            }
        )
    return blocks


def message_body(chat: object, *, message_id: str, model: str) -> dict[str, Any]:
    """The ``message`` object for a canonical ``chat.completion`` (its choice 0)."""
    if not isinstance(chat, dict):
        raise UpstreamProtocolError("The answer is not a chat completion")
    choices = chat.get("choices")
    choice = (
        next(
            (c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0),
            None,
        )
        if isinstance(choices, list)
        else None
    )
    if choice is None:
        raise UpstreamProtocolError("The answer has no choice")
    message = choice.get("message")
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(message if isinstance(message, dict) else {}),
        "stop_reason": stop_reason(choice.get("finish_reason")),
        "stop_sequence": None,
        "usage": message_usage(chat.get("usage")),
    }
