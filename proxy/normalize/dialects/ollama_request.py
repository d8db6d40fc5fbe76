"""Ollama's native requests from a client's OpenAI ones: ``/api/chat`` for chat,
``/api/generate`` for completions.

Shapes from Ollama's API reference (docs/api.md in ollama/ollama): ``messages`` whose content
is one string, with base64 ``images``, ``thinking``, ``tool_calls`` (arguments an object) and
``tool_name``; sampling in ``options`` (``num_predict``, ``temperature``, ``top_p``, ``stop``,
``seed``, ...); ``format`` "json" or a JSON schema; ``think`` true/false or a level; ``stream``
true unless it is sent false. docs/providers/ollama.md says what is translated and refused.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_messages import (
    assistant_content,
    called_function,
    function_tool,
    function_tools,
    role_error,
    text_of,
    tool_call_id,
    tool_calls,
)
from proxy.normalize.dialects.native_request import (
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    OPENAI_ONLY,
    extras,
    invalid,
    is_set,
    merge,
    merge_part,
    reasoning_effort,
    refuse,
    response_format,
    single_prompt,
    stop_sequences,
    unsupported,
    wrong_type,
)

API: Final = "Ollama's API"
_CHAT_REFUSED: Final = ("n", "logit_bias", "parallel_tool_calls", *OPENAI_ONLY)
# Completions' logprobs has offsets into the text that Ollama's per-token ones do not give.
_COMPLETION_REFUSED: Final = ("n", "best_of", "logprobs", "echo", "logit_bias")
_OPTIONS: Final = ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty")
# reasoning_effort -> think. Ollama takes true/false or the levels low, medium, high and max
# (gpt-oss's and others'); OpenAI's scale reaches past both ends, clamped as Ollama's own
# OpenAI-compatible endpoint clamps it.
_THINK: Final = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "max",
    "max": "max",
}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    body = request.body
    native: dict[str, Any] = {"model": options.upstream_model}
    if request.endpoint == "chat":
        refuse(body, _CHAT_REFUSED, API)
        _chat(body, native)
        given = extras(body, CHAT_FIELDS)
    else:
        refuse(body, _COMPLETION_REFUSED, API)
        native["prompt"] = single_prompt(body, API)
        suffix = body.get("suffix")
        if suffix is not None and not isinstance(suffix, str):
            raise wrong_type("suffix", "a string")
        if suffix:
            # The model's template makes prompt and suffix a fill-in-the-middle prompt.
            native["suffix"] = suffix
        else:
            # A completion continues the prompt as it is (OpenAI's legacy endpoint, TGI's
            # /generate); without raw, Ollama would wrap it in the model's chat template.
            native["raw"] = True
        # A completion is all the model writes: Ollama would take a thinking model's <think>
        # text out of it (even raw), and completions have no place for reasoning.
        native["think"] = False
        given = extras(body, COMPLETION_FIELDS)
    # Ollama streams unless told not to: always told.
    native["stream"] = request.stream
    sampling: dict[str, Any] = {}
    if request.max_tokens is not None:
        sampling["num_predict"] = request.max_tokens
    stop = stop_sequences(body)
    if stop is not None:
        sampling["stop"] = stop
    for name in _OPTIONS:
        if body.get(name) is not None:
            sampling[name] = body[name]
    merge_part(sampling, given, "options")  # num_ctx and the like, Ollama's own
    if sampling:
        native["options"] = sampling
    merge(native, given)
    return native


def _chat(body: dict[str, Any], native: dict[str, Any]) -> None:
    messages = body["messages"]
    names = _call_names(messages)
    native["messages"] = [_message(m, f"messages[{i}]", names) for i, m in enumerate(messages)]
    functions, mode = function_tools(body, API)
    if mode == "required":
        raise unsupported("tool_choice", API, "it cannot be made to call a tool")
    if functions and mode == "auto":
        # tool_choice none: no tool is offered, so none is called.
        # strict has no counterpart: Ollama does not hold arguments to the schema.
        native["tools"] = [function_tool(function) for function in functions]
    kind, schema = response_format(body, API)
    if kind == "json_object":
        native["format"] = "json"
    elif kind == "json_schema":
        native["format"] = schema
    effort = reasoning_effort(body)
    if effort is not None:
        if effort not in _THINK:
            raise invalid("reasoning_effort", f"{effort!r} is none of {', '.join(_THINK)}")
        native["think"] = _THINK[effort]
    if body.get("logprobs") is True:
        # Ollama's log probabilities are OpenAI's per-token objects.
        native["logprobs"] = True
        if body.get("top_logprobs") is not None:
            native["top_logprobs"] = body["top_logprobs"]
    elif is_set(body, "top_logprobs"):
        raise invalid("top_logprobs", "it needs logprobs true")


def _call_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Each tool call's function name by its id: a tool message's ``tool_name`` (Ollama's
    templates name the tool a result comes from)."""
    names = {}
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(call.get("id"), str):
                name = function.get("name")
                if isinstance(name, str):
                    names[call["id"]] = name
    return names


def _message(message: dict[str, Any], where: str, names: dict[str, str]) -> dict[str, Any]:
    role = message.get("role")
    content = message.get("content")
    if role in ("system", "developer"):
        return {"role": "system", "content": text_of(content, f"{where}.content", API)}
    if role == "user":
        return _user(content, f"{where}.content")
    if role == "assistant":
        return _assistant(message, where)
    if role == "tool":
        call_id = tool_call_id(message, where)
        out = {"role": "tool", "content": text_of(content, f"{where}.content", API)}
        out["tool_call_id"] = call_id
        if call_id in names:
            out["tool_name"] = names[call_id]
        return out
    raise role_error(role, where, API)


def _user(content: object, where: str) -> dict[str, Any]:
    if not isinstance(content, list):
        return {"role": "user", "content": text_of(content, where, API)}
    texts: list[dict[str, Any]] = []
    images = []
    for position, part in enumerate(content):
        at = f"{where}[{position}]"
        if isinstance(part, dict) and part.get("type") == "image_url":
            images.append(_image(part.get("image_url"), f"{at}.image_url"))
        else:
            texts.append(part)
    out: dict[str, Any] = {"role": "user", "content": text_of(texts, where, API)}
    if images:
        out["images"] = images
    return out


def _image(image: object, where: str) -> str:
    """The base64 data of a data URL: Ollama takes images as data only."""
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise wrong_type(where, "an object with a url")
    if url.startswith(("http://", "https://")):
        raise unsupported(f"{where}.url", API, "it takes images as data URLs, not web URLs")
    head, comma, data = url.partition(",")
    if not (head.startswith("data:") and head.endswith(";base64") and comma):
        raise invalid(f"{where}.url", "expected a base64 data URL")
    return data


def _assistant(message: dict[str, Any], where: str) -> dict[str, Any]:
    content = assistant_content(message)
    if isinstance(content, list):
        # A refusal part is what the assistant said too.
        content = [
            {"type": "text", "text": part.get("refusal")}
            if isinstance(part, dict) and part.get("type") == "refusal"
            else part
            for part in content
        ]
    out: dict[str, Any] = {
        "role": "assistant",
        "content": text_of(content, f"{where}.content", API),
    }
    thinking = message.get("reasoning_content")
    if isinstance(thinking, str) and thinking:
        out["thinking"] = thinking  # the reasoning the client was given, back in its place
    calls = tool_calls(message, where)
    if calls:
        out["tool_calls"] = [_call(call, at) for call, at in calls]
    return out


def _call(given: object, where: str) -> dict[str, Any]:
    call, function = called_function(given, where, API)
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        raise wrong_type(f"{where}.function.arguments", "a string")
    try:
        # Ollama's arguments are an object, OpenAI's its JSON text.
        parsed = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise invalid(f"{where}.function.arguments", "Ollama takes a JSON object")
    out: dict[str, Any] = {"function": {"name": function["name"], "arguments": parsed}}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out
