"""Token usage: one value per request, and the rules that make any upstream's counts canonical.

docs/canonical-output.md section 3: ``completion_tokens`` includes reasoning tokens (OpenAI's
convention), ``total_tokens`` is the upstream's total or the sum, cached and reasoning counts move
to their ``*_details`` homes. Upstreams spell counts in many ways (SOURCES.md section F); every
spelling that an OpenAI-compatible upstream uses is read here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Source = Literal["upstream", "estimated"]

# The *_details keys that OpenAI's CompletionUsage schema defines; anything else is dropped.
_PROMPT_DETAILS = (
    "cached_tokens",
    "audio_tokens",
    "text_tokens",
    "image_tokens",
    "cache_write_tokens",
)
_COMPLETION_DETAILS = (
    "reasoning_tokens",
    "audio_tokens",
    "accepted_prediction_tokens",
    "rejected_prediction_tokens",
    "text_tokens",
)


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class Usage:
    """What one request consumed, as metering sees it."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    source: Source = "upstream"

    @property
    def is_empty(self) -> bool:
        return self.prompt_tokens == 0 and self.completion_tokens == 0


# No real count comes near this; beyond it a "count" is garbage (and 2**53 is where JSON
# numbers stop being exact in many clients).
_MAX_COUNT = 2**53


def _count(value: object) -> int | None:
    # Not isinstance: bool is an int subclass, and a count of True is a bug upstream, not a
    # count (JSON makes no other int subclass). An exact type test is also the cheapest.
    if type(value) is int:
        return value if 0 <= value < _MAX_COUNT else None
    if isinstance(value, float) and value.is_integer() and 0 <= value < _MAX_COUNT:
        return int(value)
    return None


def _first_count(raw: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = _count(raw.get(key))
        if value is not None:
            return value
    return None


def _details(raw: object, keys: tuple[str, ...]) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    out = {}
    for key in keys:
        value = raw.get(key)
        if value is not None and (value := _count(value)) is not None:
            out[key] = value
    return out


def canonical_usage(
    raw: object, prompt_estimate: Callable[[], int] | None = None
) -> dict[str, Any] | None:
    """OpenAI's ``CompletionUsage`` from an upstream's usage object, or None if it has no counts.

    ``prompt_estimate``: the prompt's tokens, estimated, for a usage whose completion is counted
    and whose prompt is not (missing, negative, fractional, a string, past 2**53)."""
    if not isinstance(raw, dict):
        return None
    prompt = _first_count(raw, "prompt_tokens", "input_tokens")
    completion = _first_count(raw, "completion_tokens", "output_tokens")
    if prompt is None and completion is None:
        return None
    total = _first_count(raw, "total_tokens")
    if prompt is None:
        # The prompt was read all the same: metered as estimated, never as free. The
        # upstream's total holds the count it garbled, so it is made again from the parts.
        prompt = prompt_estimate() if prompt_estimate is not None else 0
        total = None
    completion = completion or 0

    prompt_details = _details(raw.get("prompt_tokens_details"), _PROMPT_DETAILS)
    if "cached_tokens" not in prompt_details:
        # DeepSeek: prompt_cache_hit_tokens; some servers put cached_tokens at the top level.
        cached = _first_count(raw, "prompt_cache_hit_tokens", "cached_tokens")
        if cached is not None:
            prompt_details["cached_tokens"] = cached
    completion_details = _details(raw.get("completion_tokens_details"), _COMPLETION_DETAILS)
    if "reasoning_tokens" not in completion_details:
        # SGLang (Azure Foundry) reports reasoning_tokens at the top level.
        reasoning = _first_count(raw, "reasoning_tokens")
        if reasoning is not None:
            completion_details["reasoning_tokens"] = reasoning

    reasoning = completion_details.get("reasoning_tokens", 0)
    if total is None:
        total = prompt + completion
    elif reasoning and prompt + completion != total and prompt + completion + reasoning == total:
        # xAI counts reasoning only in the total; OpenAI's completion_tokens includes it.
        completion += reasoning

    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
    }
    if prompt_details:
        usage["prompt_tokens_details"] = prompt_details
    if completion_details:
        usage["completion_tokens_details"] = completion_details
    return usage


def sum_usage(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One canonical usage for several (one per choice of a batch), counts and details added."""
    total: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for report in reports:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            total[key] += report[key]
        for key in ("prompt_tokens_details", "completion_tokens_details"):
            for name, count in report.get(key, {}).items():
                details = total.setdefault(key, {})
                details[name] = details.get(name, 0) + count
    return total


def usage_value(usage: dict[str, Any], source: Source = "upstream") -> Usage:
    """The metering value of a canonical usage object (as made by ``canonical_usage``)."""
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        total_tokens=usage["total_tokens"],
        cached_tokens=prompt_details.get("cached_tokens", 0),
        reasoning_tokens=completion_details.get("reasoning_tokens", 0),
        source=source,
    )


def estimate_tokens(chars: int) -> int:
    """A rough token count for text of ``chars`` characters (about four characters a token).

    Used only where an upstream reports nothing; the result is always marked as estimated.
    """
    return (chars + 3) // 4


def prompt_chars(value: object) -> int:
    """Characters of text in messages or a prompt, however deeply the parts nest.

    Counted only when an estimate is made (an upstream that reports no usage), not for every
    request: walking every part of a long conversation is not free.
    """
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(prompt_chars(item) for item in value)
    if isinstance(value, dict):
        return sum(
            prompt_chars(value.get(key)) for key in ("content", "text", "prompt") if key in value
        )
    return 0


def estimated_usage(prompt_chars: int, completion_chars: int, completion_events: int) -> Usage:
    """An estimate for a request whose upstream gave no counts.

    Most servers that omit usage stream one token per event, so the event count is a floor;
    the character estimate covers those that batch tokens.
    """
    prompt = estimate_tokens(prompt_chars)
    completion = max(completion_events, estimate_tokens(completion_chars))
    return Usage(prompt, completion, prompt + completion, source="estimated")
