"""A canonical chat completion made a Response (sans-IO).

The message is fed to the same ``Output`` a stream drives, in the order a stream brings it
(reasoning, text, refusal, tool calls), so both shapes of one answer give the same Response.
"""

from __future__ import annotations

from typing import Any

from proxy.normalize.responses.echo import Echo, responses_usage
from proxy.normalize.responses.output import Output, outcome


def response_body(
    chat: dict[str, Any], echo: Echo, *, response_id: str, created: int, model: str
) -> dict[str, Any]:
    """The Response for ``chat``, a canonical ``CreateChatCompletionResponse``
    (docs/canonical-output.md)."""
    choices = chat.get("choices") or []
    choice = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), {})
    message = choice.get("message")
    if not isinstance(message, dict):
        message = {}
    output = Output()
    output.reasoning(message.get("reasoning_content"))
    output.content(message.get("content"))
    output.content(message.get("refusal"), "refusal")
    for index, call in enumerate(message.get("tool_calls") or ()):
        if isinstance(call, dict):
            output.call({**call, "index": index})
    status, reason = outcome(choice.get("finish_reason"))
    output.finish(status)
    tier = chat.get("service_tier")
    return echo.response(
        response_id=response_id,
        created=created,
        model=model,
        status=status,
        output=output.items(),
        usage=responses_usage(chat.get("usage")),
        incomplete=reason,
        service_tier=tier if isinstance(tier, str) else None,
    )
