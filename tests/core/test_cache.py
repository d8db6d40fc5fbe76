"""The response cache's pure parts: its configuration, the key, Cache-Control and entries."""

from __future__ import annotations

import copy
import zlib
from typing import Any

import orjson
import pytest
import yaml

from proxy.core.cache.config import CacheConfig
from proxy.core.cache.control import Control, read_control
from proxy.core.cache.entry import Entry, decode_entry, encode_entry, entry_for
from proxy.core.cache.key import NAMESPACE, cache_key
from proxy.core.config import Config, parse_config
from proxy.core.errors import ConfigError
from proxy.core.usage import Usage

BASE = """
providers: {p: {base_url: 'https://p.example/v1'}}
models: {m: {provider: p, model: up}}
"""


def parse(extra: str, team: str = "{keys: [tk-one-1], models: ['*']}") -> Config:
    return parse_config(yaml.safe_load(f"{BASE}\nteams: {{t: {team}}}\n{extra}"), {})


def problems(extra: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(extra)
    return caught.value.problems


# --- configuration ------------------------------------------------------------------------


def test_no_section_no_cache() -> None:
    config = parse("")
    assert config.cache is None
    assert config.teams["t"].cache is True


def test_empty_section_is_the_defaults() -> None:
    assert parse("cache: {}").cache == CacheConfig()


def test_everything_given() -> None:
    config = parse(
        "state: {redis: 'redis://cache:6379/0'}\n"
        "cache: {backend: redis, ttl_seconds: 60, max_entry_bytes: 2048, scope: global,"
        " models: ['gpt-*', m], timeout: 0.05}",
    )
    assert config.cache == CacheConfig("redis", 60, 10_000, 2048, "global", ("gpt-*", "m"), 0.05)


def test_a_team_opts_out() -> None:
    config = parse("cache: {}", team="{keys: [tk-one-1], models: ['*'], cache: false}")
    assert config.teams["t"].cache is False


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("cache: {backend: redis}", "cache.backend: redis needs state.redis or state.sentinel"),
        ("cache: {backend: disk}", "cache.backend"),
        ("cache: {ttl_seconds: 0}", "cache.ttl_seconds: must be a whole number of seconds"),
        ("cache: {ttl_seconds: 1.5}", "cache.ttl_seconds"),
        ("cache: {max_entries: -1}", "cache.max_entries"),
        ("cache: {max_entry_bytes: 0}", "cache.max_entry_bytes"),
        ("cache: {scope: tenant}", "cache.scope"),
        ("cache: {models: []}", "cache.models"),
        ("cache: {models: [1]}", "cache.models"),
        ("cache: {timeout: 0.1}", "cache.timeout: is only for backend: redis"),
        ("cache: {colour: blue}", "cache"),
        ("cache: [memory]", "cache"),
        (
            "state: {redis: 'redis://c:6379'}\ncache: {backend: redis, max_entries: 5}",
            "cache.max_entries: is only for backend: memory",
        ),
        ("state: {redis: 'redis://c:6379'}\ncache: {backend: redis, timeout: 9}", "cache.timeout"),
    ],
)
def test_bad_sections_are_named(section: str, expected: str) -> None:
    assert any(problem.startswith(expected) for problem in problems(section)), problems(section)


def test_a_team_cache_flag_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as caught:
        parse("cache: {}", team="{keys: [tk-one-1], models: ['*'], cache: sometimes}")
    assert any("teams.t.cache" in problem for problem in caught.value.problems)


def test_model_globs() -> None:
    cache = CacheConfig(models=("gpt-*", "claude"))
    assert cache.caches("gpt-4o")
    assert cache.caches("claude")
    assert not cache.caches("claude-2")


# --- the key ------------------------------------------------------------------------------

BODY: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "auto",
    "response_format": {"type": "text"},
    "temperature": 0.5,
    "top_p": 1,
    "n": 1,
    "seed": 7,
    "max_tokens": 100,
    "stop": ["x"],
}

# Every field that can change the answer, and another value for it.
CHANGES = [
    ("messages", [{"role": "user", "content": "hello"}]),
    ("messages", [{"role": "system", "content": "hi"}]),
    ("tools", []),
    ("tool_choice", "required"),
    ("tool_choice", {"type": "function", "function": {"name": "f"}}),
    ("response_format", {"type": "json_object"}),
    ("temperature", 0.6),
    ("top_p", 0.9),
    ("n", 2),
    ("seed", 8),
    ("max_tokens", 101),
    ("max_completion_tokens", 100),
    ("stop", ["y"]),
    ("presence_penalty", 0.1),
    ("frequency_penalty", 0.1),
    ("logit_bias", {"50256": -100}),
    ("logprobs", True),
    ("top_logprobs", 2),
    ("reasoning_effort", "low"),
    ("parallel_tool_calls", False),
    ("prediction", {"type": "content", "content": "x"}),
    ("modalities", ["text"]),
    ("an_unknown_field", 1),
    ("prompt", "a completion's prompt"),
    ("input", "an embedding's input"),
    ("encoding_format", "base64"),
    ("dimensions", 256),
]


@pytest.mark.parametrize(("field", "value"), CHANGES)
def test_each_field_changes_the_key(field: str, value: object) -> None:
    changed = {**copy.deepcopy(BODY), field: value}
    assert cache_key("chat", "m", changed, "t") != cache_key("chat", "m", BODY, "t")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", True),
        ("stream_options", {"include_usage": True}),
        ("user", "someone"),
        ("model", "the client's own alias"),  # the configured model is keyed instead
    ],
)
def test_delivery_fields_share_the_key(field: str, value: object) -> None:
    changed = {**BODY, field: value}
    assert cache_key("chat", "m", changed, "t") == cache_key("chat", "m", BODY, "t")


def test_key_order_does_not_matter_at_any_depth() -> None:
    reordered = dict(reversed(list(BODY.items())))
    reordered["tools"] = [
        {"function": {"parameters": {"type": "object"}, "name": "f"}, "type": "function"}
    ]
    assert cache_key("chat", "m", reordered, "t") == cache_key("chat", "m", BODY, "t")


def test_endpoint_model_and_team_are_keyed() -> None:
    key = cache_key("chat", "m", BODY, "t")
    assert cache_key("completions", "m", BODY, "t") != key
    assert cache_key("chat", "m2", BODY, "t") != key
    assert cache_key("chat", "m", BODY, "u") != key
    assert cache_key("chat", "m", BODY, None) != key
    # The parts cannot run into each other.
    assert cache_key("chat", "ab", BODY, "c") != cache_key("chat", "a", BODY, "bc")


def test_key_is_namespaced_and_holds_no_text() -> None:
    key = cache_key("chat", "m", {"messages": [{"role": "user", "content": "secret"}]}, "t")
    assert key.startswith(NAMESPACE)
    digest = key[len(NAMESPACE) :]
    assert len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


def test_a_lone_surrogate_in_a_team_name_is_keyed() -> None:
    assert cache_key("chat", "m", BODY, "t\udcff").startswith(NAMESPACE)


# --- Cache-Control ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, Control()),
        ("", Control()),
        ("no-cache", Control(lookup=False)),
        ("No-Cache", Control(lookup=False)),
        ("no-store", Control(lookup=False, store=False)),
        ("max-age=60", Control(max_age=60)),
        ('max-age="60"', Control(max_age=60)),
        ("max-age=0", Control(lookup=False, max_age=0)),
        ("max-age=-5", Control(lookup=False, max_age=0)),  # invalid: every entry stale
        ("max-age=abc", Control(lookup=False, max_age=0)),
        ("max-age=١٢", Control(lookup=False, max_age=0)),  # not ASCII digits
        ("max-age=60, max-age=10", Control(max_age=10)),
        ("no-transform, max-age=5", Control(max_age=5)),
        (" no-cache , no-store ", Control(lookup=False, store=False)),
        ("private", Control()),
    ],
)
def test_cache_control(header: str | None, expected: Control) -> None:
    assert read_control(header) == expected


# --- entries ------------------------------------------------------------------------------


def chat(*finishes: str | None, obj: str = "chat.completion") -> bytes:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": "x"}, "finish_reason": reason}
        for i, reason in enumerate(finishes)
    ]
    return orjson.dumps({"id": "c", "object": obj, "choices": choices, "usage": {}})


USAGE = Usage(10, 5, 15)


@pytest.mark.parametrize(
    ("body", "endpoint", "n", "stored"),
    [
        (chat("stop"), "chat", 1, True),
        (chat("tool_calls"), "chat", 1, True),
        (chat("length"), "chat", 1, True),
        (chat("stop", "stop"), "chat", 2, True),
        (chat("stop"), "chat", 2, False),  # n asked, fewer answered
        (chat("stop", None), "chat", 2, False),
        (chat("content_filter"), "chat", 1, False),
        (chat("stop", "content_filter"), "chat", 2, False),
        (chat(), "chat", 1, False),
        (chat("stop", obj="text_completion"), "completions", 1, True),
        (chat("stop", "stop", "stop", obj="text_completion"), "completions", 1, True),  # a batch
        (chat("stop", None, obj="text_completion"), "completions", 1, False),
        (orjson.dumps({"object": "list", "data": [{"embedding": [0.1]}]}), "embeddings", 1, True),
        (b"[1]", "chat", 1, False),
    ],
)
def test_what_may_be_stored(body: bytes, endpoint: str, n: int, stored: bool) -> None:
    assert (entry_for(body, USAGE, 1.0, endpoint, n, 1 << 20) is not None) is stored


@pytest.mark.parametrize(
    "text",
    [
        '"finish_reason":"content_filter"',
        '"finish_reason":null',
        '{"index":1,"finish_reason":"stop"}',
    ],
)
def test_words_in_an_answer_are_not_taken_for_its_keys(text: str) -> None:
    # An answer that talks about finish reasons: its quotes are escaped in JSON.
    body = orjson.dumps(
        {
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    )
    assert entry_for(body, USAGE, 1.0, "chat", 1, 1 << 20) is not None


def test_an_answer_over_the_limit_is_not_stored() -> None:
    body = chat("stop")
    assert entry_for(body, USAGE, 1.0, "chat", 1, len(body)) is not None
    assert entry_for(body, USAGE, 1.0, "chat", 1, len(body) - 1) is None


def test_entries_round_trip_compressed() -> None:
    body = chat("stop") * 1  # any bytes: the body is kept as it is
    entry = Entry(orjson.dumps({"text": "abc " * 500}), 1700000000.25, 12, 34, "estimated")
    raw = encode_entry(entry)
    assert len(raw) < len(entry.body) / 4
    assert b"abc" not in raw
    assert decode_entry(raw) == entry
    assert decode_entry(encode_entry(Entry(body, 1.0, 0, 0, "upstream"))) is not None


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not zlib",
        zlib.compress(b"no header line"),
        zlib.compress(b'[2, 1.0, 1, 1, "upstream"]\n{}'),  # another version
        zlib.compress(b'[1, 1.0, 1, 1, "guessed"]\n{}'),
        zlib.compress(b'[1, 1.0, "1", 1, "upstream"]\n{}'),
        zlib.compress(b'[1, "then", 1, 1, "upstream"]\n{}'),
        zlib.compress(b'[1, 1.0, 1, 1, "upstream"]\n'),
        zlib.compress(b"[1, 1.0]\n{}"),
    ],
)
def test_anything_else_in_the_store_is_a_miss(raw: bytes) -> None:
    assert decode_entry(raw) is None
