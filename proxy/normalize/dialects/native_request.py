"""The field policy every native request builder follows, and the readers of a client's OpenAI
fields they share: one judgement of a field for every native API.

Every field of OpenAI's request schema (``spec/openai-schemas.json``) is either translated by
the dialect, dropped because it changes nothing in the answer (``NEUTRAL``), or refused with a
400 naming it (``refuse``), its no-op values (``n: 1``, ``presence_penalty: 0``) being as good
as leaving it out. A field that is not OpenAI's is taken for one of the native API's own (a
sampling option OpenAI has not, say) and passed on as it came (``extras``), as
docs/canonical-output.md section 5 passes an unknown field on to an OpenAI-compatible upstream. It
may not set what the translation sets (``merge``), but may add its own keys to an object the
translation writes when the dialect says so (``merge_part``: sampling options, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proxy.core.errors import InvalidRequest

# The properties of CreateChatCompletionRequest and CreateCompletionRequest.
CHAT_FIELDS: Final = frozenset({
    "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model",
    "moderation", "n", "parallel_tool_calls", "prediction", "presence_penalty",
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning_effort",
    "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    "verbosity", "web_search_options",
})  # fmt: skip
COMPLETION_FIELDS: Final = frozenset({
    "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "model", "n",
    "presence_penalty", "prompt", "seed", "stop", "stream", "stream_options", "suffix",
    "temperature", "top_p", "user",
})  # fmt: skip
# OpenAI fields that say nothing about the answer's text (who asks, what OpenAI stores or
# bills, how its cache is keyed; usage always comes from a native API): dropped.
NEUTRAL: Final = frozenset({
    "metadata", "prediction", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "safety_identifier", "service_tier", "store", "stream_options",
    "user",
})  # fmt: skip
# OpenAI's features that no native API here is given: every dialect refuses them when set.
OPENAI_ONLY: Final = (
    "modalities", "audio", "functions", "function_call", "web_search_options", "verbosity",
    "moderation",
)  # fmt: skip
# Values that ask for nothing beyond a native API's own behaviour.
_NO_EFFECT: Final[Mapping[str, tuple[object, ...]]] = {
    "n": (1,),
    "best_of": (1,),
    "verbosity": ("medium",),  # OpenAI's default, which some clients always send
    "logprobs": (False,),
    "echo": (False,),
    "logit_bias": ({},),
    "parallel_tool_calls": (True,),
    "modalities": (["text"],),
    "top_logprobs": (0,),
    "suffix": ("",),
    # OpenAI's defaults, which some clients send whatever they want (LangChain's do).
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
}
# Why a field cannot be translated, for the refusal's message.
_WHY: Final[Mapping[str, str]] = {
    "n": "one choice is generated per request",
    "best_of": "it has no best_of",
    "logprobs": "it gives no log probabilities in OpenAI's shape",
    "top_logprobs": "it gives no log probabilities in OpenAI's shape",
    "echo": "it does not echo the prompt",
    "logit_bias": "it takes no logit bias",
    "parallel_tool_calls": "it cannot be kept to one tool call",
    "modalities": "it answers with text only",
    "audio": "it answers with text only",
    "functions": "use tools instead of the deprecated functions",
    "function_call": "use tool_choice instead of the deprecated function_call",
    "prediction": "it takes no predicted output",
    "web_search_options": "it has no web search",
    "verbosity": "it has no verbosity setting",
    "moderation": "it runs no moderation",
    "suffix": "it takes no suffix",
    "presence_penalty": "it has no presence penalty",
    "frequency_penalty": "it has no frequency penalty",
    "reasoning_effort": "it has no reasoning setting",
    "seed": "it takes no seed",
}


def unsupported(param: str, api: str, why: str | None = None) -> InvalidRequest:
    reason = why or _WHY.get(param.split("[", 1)[0].split(".", 1)[0])
    tail = f": {reason}" if reason else ""
    return InvalidRequest(
        f"'{param}' is not supported by {api}{tail}", param=param, code="unsupported_parameter"
    )


def invalid(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for '{param}': {message}", param=param, code="invalid_value"
    )


def wrong_type(param: str, expected: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}", param=param, code="invalid_type"
    )


def require_chat(endpoint: str, api: str) -> None:
    """A 400 for any endpoint but chat, for an API that serves chat completions only."""
    if endpoint != "chat":
        raise InvalidRequest(
            f"Only chat completions are served by {api}", code="unsupported_endpoint"
        )


def is_set(body: Mapping[str, Any], param: str) -> bool:
    """Whether the client asked for something with ``param``: null and the no-op values are
    as good as leaving it out."""
    value = body.get(param)
    # By type too: a completions request's logprobs 0 asks for log probabilities, False not.
    return value is not None and not any(
        type(value) is type(same) and value == same for same in _NO_EFFECT.get(param, ())
    )


def refuse(body: Mapping[str, Any], params: tuple[str, ...], api: str) -> None:
    """A 400 naming the first of ``params`` that the client set to something ``api`` cannot do."""
    for param in params:
        if is_set(body, param):
            raise unsupported(param, api)


def extras(body: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The client's fields that are not OpenAI's: the native API's own, passed on."""
    return {key: value for key, value in body.items() if key not in known}


def merge(native: dict[str, Any], given: Mapping[str, Any], where: str = "") -> None:
    """Add the client's own native fields to ``native``; one the translation has set already is
    refused, whichever of the two was meant."""
    for key, value in given.items():
        if key in native:
            name = f"{where}.{key}" if where else key
            raise invalid(name, "the proxy sets it from the request's OpenAI fields; send one")
        native[key] = value


def merge_part(part: dict[str, Any], given: dict[str, Any], key: str) -> None:
    """Move the client's own ``key`` object out of ``given`` into ``part``, the translation's
    object of that name, key by key: the native API's own options beside the translated ones."""
    own = given.pop(key, None)
    if own is None:
        return
    if not isinstance(own, dict):
        raise wrong_type(key, "an object")
    merge(part, own, key)


def stop_sequences(body: Mapping[str, Any]) -> list[str] | None:
    stop = body.get("stop")
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        return stop
    raise wrong_type("stop", "a string or an array of strings")


def single_prompt(body: Mapping[str, Any], api: str) -> str:
    """A completions prompt as the one string a native API generates from."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(item, str) for item in prompt):
        raise unsupported("prompt", api, "it generates from one prompt at a time")
    raise unsupported("prompt", api, "it takes the prompt as text, not as token ids")


def reasoning_effort(body: Mapping[str, Any]) -> str | None:
    effort = body.get("reasoning_effort")
    if effort is None or isinstance(effort, str):
        return effort
    raise wrong_type("reasoning_effort", "a string")


def response_format(body: Mapping[str, Any], api: str) -> tuple[str, Any]:
    """("text", None), ("json_object", None) or ("json_schema", the schema)."""
    value = body.get("response_format")
    if value is None:
        return "text", None
    if not isinstance(value, dict):
        raise wrong_type("response_format", "an object")
    kind = value.get("type")
    if kind in ("text", "json_object"):
        return str(kind), None
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:  # no schema given: any JSON
            return "json_object", None
        if not isinstance(schema, dict):
            raise wrong_type("response_format.json_schema.schema", "an object")
        return "json_schema", schema
    raise unsupported("response_format.type", api, f"it has no '{kind}' format")
