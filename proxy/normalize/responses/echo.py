"""What a Response repeats of its request, and the Response object around an answer's output.

Every property that OpenAI's ``Response`` schema requires is present, with the API's default
where the client left it out (``temperature`` and ``top_p`` 1, ``tool_choice`` "auto",
``parallel_tool_calls`` true, ``text.format`` text, ``truncation`` "disabled").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["in_progress", "completed", "incomplete", "failed"]


def _text_format() -> dict[str, Any]:
    return {"type": "text"}


@dataclass(frozen=True, slots=True)
class Echo:
    """The request's settings as a Response shows them (already checked and defaulted)."""

    instructions: str | None = None
    tools: tuple[dict[str, Any], ...] = ()  # function tools, in the Response's flat shape
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text_format: dict[str, Any] = field(default_factory=_text_format)
    verbosity: str = "medium"
    reasoning_effort: str | None = None
    reasoning_summary: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    truncation: str = "disabled"
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    service_tier: str | None = None  # as asked; the answer's own tier wins when it has one
    top_logprobs: int = 0

    def response(
        self,
        *,
        response_id: str,
        created: int,
        model: str,
        status: Status,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        incomplete: str | None = None,
        service_tier: str | None = None,
    ) -> dict[str, Any]:
        """The Response object; ``incomplete`` is the reason of an incomplete one."""
        body: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": created,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": None if incomplete is None else {"reason": incomplete},
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "model": model,
            "output": output,
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": None,
            "prompt_cache_key": self.prompt_cache_key,
            "reasoning": {"effort": self.reasoning_effort, "summary": self.reasoning_summary},
            "safety_identifier": self.safety_identifier,
            "temperature": self.temperature,
            "text": {"format": self.text_format, "verbosity": self.verbosity},
            "tool_choice": self.tool_choice,
            "tools": list(self.tools),
            "top_logprobs": self.top_logprobs,
            "top_p": self.top_p,
            "truncation": self.truncation,
            "metadata": self.metadata,
        }
        if self.prompt_cache_retention is not None:
            body["prompt_cache_retention"] = self.prompt_cache_retention
        tier = service_tier or self.service_tier
        if tier is not None:
            body["service_tier"] = tier
        if usage is not None:
            # Absent rather than made up: ``usage`` is optional in the schema, and an answer
            # without counts is metered by estimate elsewhere.
            body["usage"] = usage
        if self.user is not None:
            body["user"] = self.user  # a string in the schema: never null
        return body


def responses_usage(chat: object) -> dict[str, Any] | None:
    """``ResponseUsage`` for a canonical chat ``usage`` object (None when there is none)."""
    if not isinstance(chat, dict):
        return None
    prompt_details = chat.get("prompt_tokens_details") or {}
    completion_details = chat.get("completion_tokens_details") or {}
    return {
        "input_tokens": chat.get("prompt_tokens", 0),
        "input_tokens_details": {
            "cached_tokens": prompt_details.get("cached_tokens", 0),
            "cache_write_tokens": prompt_details.get("cache_write_tokens", 0),
        },
        "output_tokens": chat.get("completion_tokens", 0),
        "output_tokens_details": {
            "reasoning_tokens": completion_details.get("reasoning_tokens", 0),
        },
        "total_tokens": chat.get("total_tokens", 0),
    }
