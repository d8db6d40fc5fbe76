"""What the native request builders share: reading a client's OpenAI fields, and refusing with
a clear 400 what a native API cannot do, rather than dropping what would change the answer.

Every field of OpenAI's request schema (``spec/openai-schemas.json``) is either translated by
the dialect, dropped here because it changes nothing in the answer, or refused. A field that is
not OpenAI's is taken for one of the native API's own (Cohere's ``documents``, Ollama's
``keep_alive``, TGI's ``top_k``) and passed on as it came, as CANONICAL.md section 5 passes an
unknown field on to an OpenAI-compatible upstream; it may not set what the translation sets.
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
    "metadata", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention",
    "safety_identifier", "service_tier", "store", "stream_options", "user",
})  # fmt: skip
# Values that ask for nothing beyond a native API's own behaviour.
_NO_EFFECT: Final[Mapping[str, tuple[object, ...]]] = {
    "n": (1,),
    "best_of": (1,),
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
    "logprobs": "its log probabilities cannot be given in OpenAI's shape",
    "top_logprobs": "its log probabilities cannot be given in OpenAI's shape",
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


def text_of(content: object, param: str, api: str) -> str:
    """A message's content as one string: text parts are joined as they come."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise wrong_type(param, "a string or an array of content parts")
    texts = []
    for position, part in enumerate(content):
        where = f"{param}[{position}]"
        if not isinstance(part, dict):
            raise wrong_type(where, "a content part object")
        if part.get("type") != "text":
            raise unsupported(f"{where}.type", api, f"it takes no '{part.get('type')}' part here")
        text = part.get("text")
        if not isinstance(text, str):
            raise wrong_type(f"{where}.text", "a string")
        texts.append(text)
    return "".join(texts)


def function_tools(body: Mapping[str, Any], api: str) -> tuple[list[dict[str, Any]], str]:
    """The functions the model may call (OpenAI's ``function`` objects, checked) and how it
    must choose: "auto", "none" or "required". A named ``tool_choice``, or ``allowed_tools``,
    leaves only those functions: forcing one is offering only it and requiring a call."""
    raw = body.get("tools")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise wrong_type("tools", "an array")
    functions = []
    for position, tool in enumerate(raw):
        where = f"tools[{position}]"
        if not isinstance(tool, dict):
            raise wrong_type(where, "an object")
        if tool.get("type") != "function":
            raise unsupported(f"{where}.type", api, "it calls functions only")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise wrong_type(f"{where}.function", "an object with a name")
        functions.append(function)
    choice = body.get("tool_choice")
    if choice is None or choice == "auto":
        return functions, "auto"
    if choice in ("none", "required"):
        if choice == "required" and not functions:
            raise invalid("tool_choice", "'required' needs tools")
        return functions, str(choice)
    if not isinstance(choice, dict):
        raise wrong_type("tool_choice", "'none', 'auto', 'required' or an object")
    kind = choice.get("type")
    if kind == "function":
        named = choice.get("function")
        name = named.get("name") if isinstance(named, dict) else None
        return _only(functions, [name], "tool_choice.function.name"), "required"
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools")
        if not isinstance(allowed, dict) or allowed.get("mode") not in ("auto", "required"):
            raise wrong_type("tool_choice.allowed_tools", "an object with mode auto or required")
        tools = allowed.get("tools")
        if not isinstance(tools, list):
            raise wrong_type("tool_choice.allowed_tools.tools", "an array")
        names = [
            tool["function"].get("name") if isinstance(tool.get("function"), dict) else None
            for tool in tools
            if isinstance(tool, dict)
        ]
        only = _only(functions, names, "tool_choice.allowed_tools.tools")
        return only, str(allowed["mode"])
    raise unsupported("tool_choice.type", api, "it calls functions only")


def _only(functions: list[dict[str, Any]], names: list[object], param: str) -> list[dict[str, Any]]:
    by_name = {function["name"]: function for function in functions}
    chosen = []
    for name in names:
        if not isinstance(name, str) or name not in by_name:
            raise invalid(param, f"{name!r} is not one of the request's tools")
        chosen.append(by_name[name])
    return chosen


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
