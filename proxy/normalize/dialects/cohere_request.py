"""Cohere's v2 Chat request (``POST /v2/chat``) from a client's OpenAI chat request.

Shapes from Cohere's API reference (docs.cohere.com/reference/chat): messages of the roles
system, user, assistant and tool; ``tool_calls`` and ``tool_plan`` on assistant messages; ``p``,
``k``, ``stop_sequences``, ``thinking``; ``response_format`` ``{type: json_object,
json_schema}``. docs/providers/cohere.md says what is translated and what is refused.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_request import (
    CHAT_FIELDS,
    extras,
    function_tools,
    invalid,
    merge,
    reasoning_effort,
    refuse,
    response_format,
    stop_sequences,
    unsupported,
    wrong_type,
)

API: Final = "Cohere's Chat API"
# OpenAI fields Cohere has no counterpart for, refused when they ask for something.
_REFUSED: Final = (
    "n",
    "logprobs",  # Cohere's are per text chunk, without the token strings OpenAI's carry
    "top_logprobs",
    "logit_bias",
    "parallel_tool_calls",
    "modalities",
    "audio",
    "functions",
    "function_call",
    "prediction",
    "web_search_options",
    "verbosity",
    "moderation",
)
# The same name on both sides, or OpenAI's name and Cohere's.
_SAMPLING: Final = (
    ("temperature", "temperature"),
    ("top_p", "p"),
    ("seed", "seed"),
    ("frequency_penalty", "frequency_penalty"),
    ("presence_penalty", "presence_penalty"),
)
# Cohere's function takes a JSON schema always; OpenAI's may leave a function without one.
_NO_PARAMETERS: Final = {"type": "object", "properties": {}}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    body = request.body
    refuse(body, _REFUSED, API)
    native: dict[str, Any] = {
        "model": options.upstream_model,
        "messages": [_message(m, f"messages[{i}]") for i, m in enumerate(body["messages"])],
        # Cohere answers whole unless asked: always said, so that the answer is what was asked.
        "stream": request.stream,
    }
    functions, mode = function_tools(body, API)
    if functions:
        native["tools"] = [_tool(function) for function in functions]
        strict = {function.get("strict") is True for function in functions}
        if strict == {True}:
            native["strict_tools"] = True
        elif len(strict) > 1:
            # Cohere's strict_tools holds for every tool of the request, or none.
            raise invalid("tools", "Cohere takes strict for all tools or for none")
        if mode != "auto":
            native["tool_choice"] = mode.upper()  # NONE, REQUIRED
    kind, schema = response_format(body, API)
    if kind == "json_object":
        native["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        native["response_format"] = {"type": "json_object", "json_schema": schema}
    if request.max_tokens is not None:
        native["max_tokens"] = request.max_tokens
    stop = stop_sequences(body)
    if stop is not None:
        native["stop_sequences"] = stop
    for ours, theirs in _SAMPLING:
        if body.get(ours) is not None:
            native[theirs] = body[ours]
    effort = reasoning_effort(body)
    if effort is not None:
        native["thinking"] = _thinking(effort, options)
    merge(native, extras(body, CHAT_FIELDS))
    return native


def _thinking(effort: str, options: RequestOptions) -> dict[str, Any]:
    if effort == "none":
        return {"type": "disabled"}
    budget = options.thinking_budgets.get(effort)
    if budget is None:
        levels = ", ".join(["none", *options.thinking_budgets])
        raise invalid("reasoning_effort", f"the model's thinking budgets are for {levels}")
    return {"type": "enabled", "token_budget": budget}


def _tool(function: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": function["name"]}
    if function.get("description") is not None:
        out["description"] = function["description"]
    parameters = function.get("parameters")
    out["parameters"] = _NO_PARAMETERS if parameters is None else parameters
    return {"type": "function", "function": out}


def _message(message: dict[str, Any], where: str) -> dict[str, Any]:
    role = message.get("role")
    content = message.get("content")
    if role in ("system", "developer"):
        return {"role": "system", "content": _content(content, f"{where}.content", ("text",))}
    if role == "user":
        parts = ("text", "image_url")
        return {"role": "user", "content": _content(content, f"{where}.content", parts)}
    if role == "assistant":
        return _assistant(message, where)
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise wrong_type(f"{where}.tool_call_id", "a string")
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "content": _content(content, f"{where}.content", ("text",)),
        }
    if role == "function":
        raise unsupported(f"{where}.role", API, "use tool messages instead of function ones")
    raise invalid(f"{where}.role", f"{role!r} is not a role")


def _assistant(message: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant"}
    content = message.get("content")
    if content is None or content == "" or content == []:
        # What the assistant refused with is what it said.
        content = message.get("refusal")
    if content:
        out["content"] = _content(content, f"{where}.content", ("text", "refusal"))
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise wrong_type(f"{where}.tool_calls", "an array")
        out["tool_calls"] = [
            _call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)
        ]
        # The tool plan came to the client as reasoning_content: it goes back as the plan.
        plan = message.get("reasoning_content")
        if isinstance(plan, str) and plan:
            out["tool_plan"] = plan
    elif "content" not in out:
        out["content"] = ""
    return out


def _call(call: object, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise unsupported(f"{where}.type", API, "it calls functions only")
    function = call.get("function")
    call_id = call.get("id")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise wrong_type(f"{where}.function", "an object with a name")
    arguments = function.get("arguments")
    if not isinstance(call_id, str) or not isinstance(arguments, str):
        raise wrong_type(where, "a call with a string id and string arguments")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def _content(content: object, where: str, kinds: tuple[str, ...]) -> str | list[dict[str, Any]]:
    """A string as it is; parts as Cohere's, with only the keys Cohere knows (an OpenAI cache
    breakpoint has no counterpart there)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise wrong_type(where, "a string or an array of content parts")
    parts = []
    for position, part in enumerate(content):
        at = f"{where}[{position}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or kind not in kinds:
            raise unsupported(f"{at}.type", API, f"it takes no '{kind}' part here")
        if kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str):
                raise wrong_type(f"{at}.image_url", "an object with a url")
            # Cohere takes a web URL or a data URL, and OpenAI's detail levels.
            image_out = {key: image[key] for key in ("url", "detail") if key in image}
            parts.append({"type": "image_url", "image_url": image_out})
            continue
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        if not isinstance(text, str):
            raise wrong_type(f"{at}.{kind}", "a string")
        parts.append({"type": "text", "text": text})
    return parts
