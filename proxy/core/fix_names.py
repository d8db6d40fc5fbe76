"""The fixes the normalizers count for operators: metric label values and access-log fields, a
fixed, bounded set (docs/metrics.md), known to metering without knowing any normalizer."""

from __future__ import annotations

from typing import Final

# Names of the fixes counted for operators (metric label values: a fixed, bounded set).
FIX_ENVELOPE: Final = "envelope"  # id, object, created or model repaired
FIX_EXTRAS: Final = "extra_fields"  # provider-only fields dropped
FIX_ROLE: Final = "role"  # role repeated or missing
FIX_EMPTY_CHUNK: Final = "empty_chunk"  # opener or empty chunk dropped
FIX_FINISH_REASON: Final = "finish_reason"  # mapped to a canonical value
FIX_FINISH_SYNTHESIZED: Final = "finish_reason_synthesized"
FIX_TOOL_CALLS: Final = "tool_calls"  # index, id or first fragment repaired
FIX_REASONING: Final = "reasoning"  # reasoning moved from another spelling
FIX_CONTENT_PARTS: Final = "content_parts"  # content given as an array of parts
FIX_USAGE: Final = "usage"  # usage moved, deduplicated, or recounted
FIX_ERROR_EVENT: Final = "error_event"  # an upstream error object mid-stream
FIX_CUT_SHORT: Final = "cut_short"  # stream ended without [DONE] or finish reasons
FIX_LEGACY: Final = "legacy_dialect"  # a pre-OpenAI event shape rewritten

FIXES: Final = (
    FIX_ENVELOPE,
    FIX_EXTRAS,
    FIX_ROLE,
    FIX_EMPTY_CHUNK,
    FIX_FINISH_REASON,
    FIX_FINISH_SYNTHESIZED,
    FIX_TOOL_CALLS,
    FIX_REASONING,
    FIX_CONTENT_PARTS,
    FIX_USAGE,
    FIX_ERROR_EVENT,
    FIX_CUT_SHORT,
    FIX_LEGACY,
)
