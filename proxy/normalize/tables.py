"""The mapping tables of the OpenAI-compatible normalizer (SOURCES.md sections B, C, E).

Quirks are not tied to a provider's name: any upstream may send any of these spellings.
"""

from __future__ import annotations

from typing import Final

# SOURCES.md E: every finish_reason spelling seen from OpenAI-compatible servers and the
# canonical value it means. Values not listed here are unknown and counted as a fix to "stop".
FINISH_REASONS: Final[dict[str, str]] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "function_call",
    "eos": "stop",  # Together
    "eos_token": "stop",  # TGI <= 2.0
    "stop_sequence": "stop",  # TGI, Anthropic-compatible layers
    "end_turn": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_length": "length",  # Mistral
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
    "recitation": "stop",
    "abort": "stop",
}

# Reasons that only say "the model stopped by itself": when tool calls were streamed, the
# canonical reason is tool_calls (TGI eos_token). A literal "stop" is left alone, because OpenAI
# itself answers "stop" to a forced tool_choice.
STOP_MEANS_TOOL_CALLS: Final = frozenset({"eos", "eos_token", "stop_sequence", "end_turn"})

# Spellings that are not a reason but "no reason yet" (TGI "", Friendli's "null").
NO_FINISH_REASON: Final = frozenset({"", "null", "none"})

# Finish reasons that announce a failure; the stream ends in an error event.
ERROR_FINISH_REASONS: Final = frozenset({"error", "insufficient_system_resource"})

# Reasoning text spellings on a delta or message, in order of preference (SOURCES.md C).
REASONING_KEYS: Final = ("reasoning_content", "reasoning", "thinking")

# The longest id or system_fingerprint passed on: a stream repeats them on every chunk, so a
# huge one would be multiplied by the number of chunks. A longer id is replaced by one the proxy
# makes; a longer fingerprint is dropped.
ENVELOPE_TEXT_MAX: Final = 128

SERVICE_TIERS: Final = frozenset({"auto", "default", "flex", "scale", "priority", "fast"})

CHAT_LOGPROBS_KEYS: Final = ("content", "refusal")
COMPLETION_LOGPROBS_KEYS: Final = ("text_offset", "token_logprobs", "tokens", "top_logprobs")
