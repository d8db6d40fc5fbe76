"""proxy.core.metering: the label values and token counts one finished request is attributed."""

from __future__ import annotations

import pytest

from proxy.core.exchange import NO_PROVIDER, UNKNOWN_MODEL, UNKNOWN_TEAM, Exchange
from proxy.core.fix_names import FIXES
from proxy.core.metering import (
    FIX_NAMES,
    TOKEN_TYPES,
    counted_fixes,
    endpoint_label,
    metered_usage,
    status_class,
    status_of,
    stream_label,
    time_to_first_token,
    token_amounts,
    upstream_error_kind,
)
from proxy.core.usage import Usage

UPSTREAM = Usage(8, 4, 12, cached_tokens=2, reasoning_tokens=1, source="upstream")
ESTIMATE = Usage(2, 5, 7, source="estimated")
PROMPT_ONLY = Usage(2, 0, 2, source="estimated")


def exchange(**fields: object) -> Exchange:
    made = Exchange("req-1", str(fields.pop("endpoint", "chat")), 100.0)
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def test_a_fresh_exchange_is_labelled_with_the_fixed_fallbacks() -> None:
    made = exchange()
    assert (made.team, made.model, made.provider) == (UNKNOWN_TEAM, UNKNOWN_MODEL, NO_PROVIDER)


@pytest.mark.parametrize(
    ("status", "disconnected", "expected"),
    [
        (200, False, 200),
        (200, True, 200),  # a stream that had begun keeps its 200
        (404, False, 404),
        (502, True, 502),
        (0, True, 499),  # gone before any response: nginx's "client closed request"
        (0, False, 500),
    ],
)
def test_status_of(status: int, disconnected: bool, expected: int) -> None:
    assert status_of(exchange(status=status, client_disconnected=disconnected)) == expected


@pytest.mark.parametrize(
    ("status", "expected"), [(200, "2xx"), (401, "4xx"), (499, "4xx"), (502, "5xx"), (504, "5xx")]
)
def test_status_class(status: int, expected: str) -> None:
    assert status_class(status) == expected


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("chat", "chat"),
        ("completions", "completions"),
        ("models", "models"),
        ("other", "other"),
        ("embeddings", "embeddings"),
        ("responses", "responses"),
        ("moderations", "other"),
        ("", "other"),
    ],
)
def test_endpoint_label(endpoint: str, expected: str) -> None:
    assert endpoint_label(exchange(endpoint=endpoint)) == expected


@pytest.mark.parametrize(("stream", "expected"), [(True, "true"), (False, "false")])
def test_stream_label(stream: bool, expected: str) -> None:
    assert stream_label(exchange(stream=stream)) == expected


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (None, None),
        ("connect", "connect"),
        ("timeout", "timeout"),
        ("status", "status"),
        ("protocol", "protocol"),
        ("something-new", "protocol"),
    ],
)
def test_upstream_error_kind(kind: str | None, expected: str | None) -> None:
    assert upstream_error_kind(exchange(upstream_error=kind)) == expected


def test_counted_fixes_are_the_known_ones_each_once() -> None:
    fixes = frozenset({"usage", "role", "a-fix-nobody-listed"})
    assert counted_fixes(exchange(fixes=fixes)) == {"usage", "role"}
    assert frozenset(FIXES) == FIX_NAMES


@pytest.mark.parametrize(
    ("usage", "status", "metered"),
    [
        (None, 200, None),
        (UPSTREAM, 200, UPSTREAM),
        (ESTIMATE, 200, ESTIMATE),  # a stream cut short or abandoned: the part generated
        (UPSTREAM, 502, UPSTREAM),  # a failure counts what the upstream reported...
        (ESTIMATE, 504, ESTIMATE),  # ...and what it generated (a whole answer timed out)...
        (PROMPT_ONLY, 502, None),  # ...but not a prompt it never began to answer
        (PROMPT_ONLY, 499, None),
        (ESTIMATE, 499, ESTIMATE),
    ],
)
def test_metered_usage(usage: Usage | None, status: int, metered: Usage | None) -> None:
    assert metered_usage(exchange(usage=usage), status) == metered


def test_token_amounts_follow_the_token_types() -> None:
    assert dict(zip(TOKEN_TYPES, token_amounts(UPSTREAM), strict=True)) == {
        "prompt": 8,
        "completion": 4,
        "cached": 2,
        "reasoning": 1,
    }


@pytest.mark.parametrize(("first", "expected"), [(None, None), (100.25, 0.25), (99.0, 0.0)])
def test_time_to_first_token(first: float | None, expected: float | None) -> None:
    assert time_to_first_token(exchange(first_token_at=first)) == expected
