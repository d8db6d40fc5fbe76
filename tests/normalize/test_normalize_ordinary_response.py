"""The whole-response normalizer's shortcut for the usual chat answer says exactly what its general
path (the builder) says: the same bytes, usage and fixes, or the same error, for every recorded
answer and for answers that sit on the shortcut's edges.

``normalize_response`` takes the shortcut (``_ordinary``) where it applies; the builder, called
directly on the same parsed body, is the general path's answer.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.errors import ProxyError
from proxy.normalize import RequestContext
from proxy.normalize.dialects import DIALECTS
from proxy.normalize.whole import Normalized, _Builder, _ordinary, normalize_response
from tests.normalize.test_normalize_fixtures import context
from tests.support.replay import FIXTURES, Golden, goldens

# The answers with choices: an error body never reaches the shortcut or the builder.
WHOLE = [g for g in goldens() if not g.stream and b'"choices"' in g.body()]
OPENAI = orjson.loads((FIXTURES / "openai.chat.json").read_bytes())
_MADE_UP_ID = re.compile(rb'"id":"(chat)?cmpl-[0-9a-f]{32}"')


def _outcome(make: Any) -> Normalized | str:
    try:
        result: Normalized = make()
    except ProxyError as exc:
        return f"{type(exc).__name__}: {exc.message}"
    # An id the upstream did not send is made up, at random, by each path: set it aside.
    body = _MADE_UP_ID.sub(b'"id":"made-up"', result.body)
    return Normalized(body, result.usage, result.fixes)


def _general(raw: bytes, ctx: RequestContext) -> Normalized:
    """normalize_response without the shortcut: its first steps, then the builder."""
    body = orjson.loads(raw)
    adapt = DIALECTS[ctx.dialect].adapt_response
    if adapt is not None:
        body = adapt(body, ctx)
    return _Builder(ctx).build(body, body["choices"])


def _same(raw: bytes, ctx: RequestContext) -> None:
    assert _outcome(lambda: normalize_response(raw, ctx)) == _outcome(lambda: _general(raw, ctx))


@pytest.mark.parametrize("golden", WHOLE, ids=lambda g: g.name)
def test_recorded_answers_are_unchanged(golden: Golden) -> None:
    _same(golden.body(), context(golden, False))


def test_openai_answer_takes_the_shortcut() -> None:
    """Not vacuous: OpenAI's own answer (the benchmark's) is served by the shortcut."""
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000)
    assert _ordinary(OPENAI, OPENAI["choices"], ctx) is not None
    _same(orjson.dumps(OPENAI), ctx)


def _usage(**overrides: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": 16,
        "completion_tokens": 363,
        "total_tokens": 379,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }
    usage.update(overrides)
    return usage


# Each variant changes one thing of OpenAI's answer, (where, key, value): on an edge of the
# shortcut, either what it must leave to the builder or what it takes as it is. DROP removes
# the key.
class _Drop:
    def __repr__(self) -> str:
        # The same in every process, so that parallel runs (pytest-xdist) collect the same ids.
        return "DROP"


DROP = _Drop()
VARIANTS: list[tuple[str, str, Any]] = [
    ("body", "x_groq", {"usage": _usage()}),
    ("body", "extra", 1),
    ("body", "choices", [OPENAI["choices"][0], {**OPENAI["choices"][0], "index": 1}]),
    ("body", "choices", ["not a choice"]),
    ("body", "object", "chat.completion.chunk"),
    ("body", "object", "chat_completion"),
    ("body", "object", DROP),
    ("body", "id", ""),
    ("body", "id", None),
    ("body", "id", 5),
    ("body", "id", DROP),
    ("body", "created", 1_770_933_883.5),
    ("body", "created", 1_770_933_883_000),
    ("body", "created", 0),
    ("body", "created", True),
    ("body", "created", "1770933883"),
    ("body", "created", 99_999_999),
    ("body", "created", 9_999_999_999),
    ("body", "created", DROP),
    ("body", "model", DROP),
    ("body", "system_fingerprint", ""),
    ("body", "system_fingerprint", None),
    ("body", "system_fingerprint", 5),
    ("body", "system_fingerprint", DROP),
    ("body", "service_tier", "flex"),
    ("body", "service_tier", "weird"),
    ("body", "service_tier", None),
    ("body", "service_tier", DROP),
    ("body", "usage", None),
    ("body", "usage", DROP),
    ("body", "usage", {}),
    ("body", "usage", {"prompt_tokens": 16, "completion_tokens": 363, "total_tokens": 379}),
    ("body", "usage", _usage(prompt_tokens=16.0)),
    ("body", "usage", _usage(prompt_tokens=True)),
    ("body", "usage", _usage(prompt_tokens=-1)),
    ("body", "usage", _usage(total_tokens=DROP)),
    ("body", "usage", _usage(cost=0.1)),
    ("body", "usage", _usage(completion_tokens_details={"reasoning_tokens": 5}, total_tokens=384)),
    ("body", "usage", _usage(prompt_tokens_details={"cached_tokens": 3, "weird": 1})),
    ("body", "usage", _usage(prompt_tokens_details=None)),
    ("body", "error", {"message": "boom"}),
    ("choice", "index", 1),
    ("choice", "index", -1),
    ("choice", "index", True),
    ("choice", "index", 0.0),
    ("choice", "index", None),
    ("choice", "index", DROP),
    ("choice", "logprobs", {"content": []}),
    ("choice", "logprobs", {}),
    ("choice", "logprobs", DROP),
    ("choice", "finish_reason", "length"),
    ("choice", "finish_reason", "tool_calls"),
    ("choice", "finish_reason", "eos"),
    ("choice", "finish_reason", "STOP"),
    ("choice", "finish_reason", None),
    ("choice", "finish_reason", ["stop"]),
    ("choice", "finish_reason", "error"),
    ("choice", "finish_reason", DROP),
    ("choice", "message", "text"),
    ("choice", "message", DROP),
    ("choice", "token", 7),
    ("message", "content", ""),
    ("message", "content", 'é "q" \\ \u2028 \U0001f600'),
    ("message", "content", None),
    ("message", "content", ["a"]),
    ("message", "content", [{"type": "text", "text": "a"}]),
    ("message", "content", 5),
    ("message", "content", DROP),
    ("message", "role", "user"),
    ("message", "role", DROP),
    ("message", "refusal", "no"),
    ("message", "refusal", 5),
    ("message", "refusal", DROP),
    ("message", "annotations", DROP),
    ("message", "annotations", None),
    ("message", "annotations", "x"),
    ("message", "annotations", [{"type": "url_citation"}]),
    (
        "message",
        "annotations",
        [
            {
                "type": "url_citation",
                "url_citation": {"end_index": 1, "start_index": 0, "url": "u", "title": "t"},
            }
        ],
    ),
    ("message", "reasoning_content", "think"),
    ("message", "reasoning_content", None),
    ("message", "reasoning", "think"),
    ("message", "tool_calls", []),
    ("message", "tool_calls", None),
    (
        "message",
        "tool_calls",
        [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    ),
    ("message", "function_call", {"name": "f", "arguments": "{}"}),
    ("message", "audio", None),
]


def _variant(changes: list[tuple[str, str, Any]]) -> dict[str, Any]:
    body = copy.deepcopy(OPENAI)
    for where, key, value in changes:
        if where == "body":
            target = body
        else:
            choice = body["choices"][0] if body.get("choices") else None
            if not isinstance(choice, dict):
                continue
            target = choice if where == "choice" else choice.get("message")
            if not isinstance(target, dict):
                continue
        if value is DROP:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(
                {k: v for k, v in value.items() if v is not DROP}
                if isinstance(value, dict)
                else value
            )
    return body


@pytest.mark.parametrize("max_tokens", [None, 363])
@pytest.mark.parametrize("variant", VARIANTS, ids=repr)
def test_each_edge(variant: tuple[str, str, Any], max_tokens: int | None) -> None:
    ctx = RequestContext(endpoint="chat", model="m", created=1_700_000_000, max_tokens=max_tokens)
    _same(orjson.dumps(_variant([variant])), ctx)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=st.lists(st.sampled_from(VARIANTS), max_size=4),
    reasoning=st.booleans(),
    max_tokens=st.sampled_from([None, 1, 363, 10_000]),
)
def test_answers_on_the_edges(
    changes: list[tuple[str, str, Any]], reasoning: bool, max_tokens: int | None
) -> None:
    ctx = RequestContext(
        endpoint="chat",
        model="m",
        created=1_700_000_000,
        max_tokens=max_tokens,
        reasoning=reasoning,
        prompt="x" * 40,
    )
    _same(orjson.dumps(_variant(changes)), ctx)
