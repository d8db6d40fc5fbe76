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
from proxy.normalize.dialects.native_messages import (
    assistant_content,
    called_function,
    function_tool,
    function_tools,
    role_error,
    tool_call_id,
    tool_calls,
)
from proxy.normalize.dialects.native_request import (
    CHAT_FIELDS,
    OPENAI_ONLY,
    extras,
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
    *OPENAI_ONLY,
)
# The same name on both sides, or OpenAI's name and Cohere's.
_SAMPLING: Final = (
    ("temperature", "temperature"),
    ("top_p", "p"),
    ("seed", "seed"),
    ("frequency_penalty", "frequency_penalty"),
    ("presence_penalty", "presence_penalty"),
)


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
        # Cohere's function takes a JSON schema always; OpenAI's may leave it out.
        native["tools"] = [function_tool(function) for function in functions]
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
        return {
            "role": "tool",
            "tool_call_id": tool_call_id(message, where),
            "content": _content(content, f"{where}.content", ("text",)),
        }
    raise role_error(role, where, API)


def _assistant(message: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant"}
    content = assistant_content(message)
    if content:
        out["content"] = _content(content, f"{where}.content", ("text", "refusal"))
    calls = tool_calls(message, where)
    if calls:
        out["tool_calls"] = [_call(call, at) for call, at in calls]
        # The tool plan came to the client as reasoning_content: it goes back as the plan.
        plan = message.get("reasoning_content")
        if isinstance(plan, str) and plan:
            out["tool_plan"] = plan
    elif "content" not in out:
        out["content"] = ""
    return out


def _call(given: object, where: str) -> dict[str, Any]:
    call, function = called_function(given, where, API)
    call_id = call.get("id")
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
