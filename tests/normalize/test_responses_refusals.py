"""A chat refusal told to a Responses client names the Responses parameters it sent."""

from __future__ import annotations

import pytest

from proxy.core.errors import InvalidRequest, NotFound
from proxy.normalize.responses.call import as_responses_refusal


@pytest.mark.parametrize(
    ("param", "message", "renamed", "shown"),
    [
        (
            "max_completion_tokens",
            "Invalid value for 'max_completion_tokens': with reasoning_effort it must be over 1024",
            "max_output_tokens",
            "Invalid value for 'max_output_tokens': with reasoning.effort it must be over 1024",
        ),
        (
            "reasoning_effort",
            "'reasoning_effort' is not supported by TGI: it has no reasoning setting",
            "reasoning.effort",
            "'reasoning.effort' is not supported by TGI: it has no reasoning setting",
        ),
        (
            "verbosity",
            "'verbosity' is not supported by Ollama: it has no verbosity setting",
            "text.verbosity",
            "'text.verbosity' is not supported by Ollama: it has no verbosity setting",
        ),
        (
            "response_format.type",
            "'response_format.type' is not supported by Cohere: it has no 'x' format",
            "text.format.type",
            "'text.format.type' is not supported by Cohere: it has no 'x' format",
        ),
        (
            "response_format.json_schema.schema",
            "Invalid type for 'response_format.json_schema.schema': expected an object",
            "text.format.schema",
            "Invalid type for 'text.format.schema': expected an object",
        ),
        (
            "messages[2].content",
            "Invalid type for 'messages[2].content': expected a string",
            "input",
            "Invalid type for 'input': expected a string",
        ),
        ("messages", "'messages' must not be empty", "input", "'input' must not be empty"),
        # What both APIs call alike, or chat alone has, is left as it is.
        ("temperature", "'temperature' is not supported", "temperature", None),
        ("tools[0].function.name", "Invalid value", "tools[0].function.name", None),
        ("messagesx", "Invalid value", "messagesx", None),
        ("verbosity_level", "Invalid value", "verbosity_level", None),
    ],
)
def test_chat_names_become_the_responses_ones(
    param: str, message: str, renamed: str, shown: str | None
) -> None:
    refusal = InvalidRequest(message, param=param, code="invalid_value")
    made = as_responses_refusal(refusal)
    assert (made.param, made.message, made.code) == (renamed, shown or message, "invalid_value")
    assert made.status == 400


def test_other_errors_and_no_param_are_left_alone() -> None:
    unnamed = InvalidRequest("The model does not serve /v1/responses", code="x")
    assert as_responses_refusal(unnamed) is unnamed
    missing = NotFound("no such model", param="messages")
    assert as_responses_refusal(missing) is missing
