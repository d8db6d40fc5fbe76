"""The usage estimate's prompt size (``prompt_chars``): the characters of text in a request's
messages or prompt, however its parts nest, and nothing else."""

from __future__ import annotations

import pytest

from proxy.core.usage import estimated_usage, prompt_chars
from proxy.normalize import RequestContext

CASES: list[tuple[str, object, int]] = [
    ("a prompt string", "Say hi", 6),
    ("a list of prompts", ["ab", "cde"], 5),
    (
        "text messages",
        [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}],
        10,
    ),
    (
        "content parts: text counts, an image's URL does not",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                ],
            }
        ],
        13,
    ),
    (
        "an assistant's tool call and the tool's answer: only content is text here",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        5,
    ),
    ("parts nested in parts", [{"content": [{"content": [{"text": "abc"}]}]}], 3),
    ("token ids and other non-text values", [[1, 2, 3], None, True, 4.5], 0),
    ("nothing at all", None, 0),
]


@pytest.mark.parametrize(
    ("value", "chars"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_prompt_chars(value: object, chars: int) -> None:
    assert prompt_chars(value) == chars


def test_an_estimate_is_about_four_characters_a_token_and_at_least_an_event_a_token() -> None:
    usage = estimated_usage(prompt_chars("x" * 10), completion_chars=9, completion_events=5)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3, 5, 8)
    assert usage.source == "estimated"


def test_the_context_carries_the_prompt_out_of_its_repr_and_eq() -> None:
    """The request context keeps the conversation for a later estimate: a logged context must
    not print it, and two contexts compare by what the normalizer reads, not by it."""
    messages = [{"role": "user", "content": "my secret plan"}]
    ctx = RequestContext(endpoint="chat", model="m", created=1, prompt=messages)
    assert "secret" not in repr(ctx)
    assert ctx == RequestContext(endpoint="chat", model="m", created=1)
    assert prompt_chars(ctx.prompt) == len("my secret plan")
