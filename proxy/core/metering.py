"""What one finished request counts for, in bounded label values (sans-IO).

Metrics and the access log read the same ``Exchange``; the rules that turn it into label values
and token counts live here, once:

- ``team``, ``model`` and ``provider`` are taken as the exchange holds them: ``app.py`` sets them
  only from the configuration, else they keep the fixed fallbacks of ``proxy.core.exchange``, so a
  made-up key or model name never becomes a label value;
- every other label (endpoint, stream, status class, token type, source, error kind, fix) has a
  closed set of values, listed here;
- a request whose client went away before any response was sent has no status of its own: it
  counts as 499, nginx's "client closed request", so it lands in ``4xx``;
- usage is attributed as the exchange has it (``metered_usage``): the upstream's counts where it
  gave them, else the estimate (``source="estimated"``), also for a stream that the client
  abandoned or that failed after it began: that is the part generated before the end. A request
  answered with an error status counts what the upstream reported, and an estimate only of
  text it generated (a whole answer collected from a stream that then timed out: the provider
  bills it); an estimate of the prompt alone, for an answer that never began, is not counted.
"""

from __future__ import annotations

from typing import Final

from proxy.core.exchange import Exchange
from proxy.core.fix_names import FIXES
from proxy.core.usage import Usage

ENDPOINTS: Final = ("chat", "completions", "responses", "messages", "embeddings", "models", "other")
STREAM_VALUES: Final = ("true", "false")
STATUS_CLASSES: Final = ("2xx", "4xx", "5xx")
TOKEN_TYPES: Final = ("prompt", "completion", "cached", "reasoning")
SOURCES: Final = ("upstream", "estimated")
UPSTREAM_ERROR_KINDS: Final = ("connect", "timeout", "status", "protocol", "credentials")
FIX_NAMES: Final = frozenset(FIXES)

CLIENT_CLOSED: Final = 499
_ENDPOINT_SET: Final = frozenset(ENDPOINTS)
_KIND_SET: Final = frozenset(UPSTREAM_ERROR_KINDS)


def status_of(exchange: Exchange) -> int:
    """The status the request ended with; 499 when the client left before any response."""
    if exchange.status:
        return exchange.status
    # Without a status and without a disconnect the handler died of something not an Exception
    # (Gateway.handle maps every Exception to a 500): count it as the 500 it would have been.
    return CLIENT_CLOSED if exchange.client_disconnected else 500


def status_class(status: int) -> str:
    # The proxy answers only 200, 4xx and 5xx; anything else would still be one of five values.
    return f"{status // 100}xx"


def endpoint_label(exchange: Exchange) -> str:
    return exchange.endpoint if exchange.endpoint in _ENDPOINT_SET else "other"


def stream_label(exchange: Exchange) -> str:
    return "true" if exchange.stream else "false"


def upstream_error_kind(exchange: Exchange) -> str | None:
    """The kind of upstream failure, if the request had one; an unknown kind is a protocol one."""
    kind = exchange.upstream_error
    if kind is None or kind in _KIND_SET:
        return kind
    return "protocol"


def counted_fixes(exchange: Exchange) -> frozenset[str]:
    """The fix kinds this request needed, each once, from the fixed set of FIXES."""
    return exchange.fixes & FIX_NAMES


def metered_usage(exchange: Exchange, status: int) -> Usage | None:
    """The usage attributed to a request that ended with ``status`` (see the module docstring)."""
    usage = exchange.usage
    if usage is None or (
        status >= 400 and usage.source == "estimated" and not usage.completion_tokens
    ):
        return None
    return usage


def token_amounts(usage: Usage) -> tuple[int, int, int, int]:
    """The count of each of TOKEN_TYPES, in its order; cached is part of prompt, reasoning of
    completion."""
    return (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_tokens,
        usage.reasoning_tokens,
    )


def time_to_first_token(exchange: Exchange) -> float | None:
    """Seconds from arrival to the first byte of a stream's body; None if none was sent."""
    if exchange.first_token_at is None:
        return None
    return max(0.0, exchange.first_token_at - exchange.started)
