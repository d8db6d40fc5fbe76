"""The Messages API request for a client's OpenAI chat request (docs/providers/anthropic.md).

Every OpenAI field is translated, dropped (it changes nothing in the answer) or refused with a
400 naming it, as native_request.py judges it for every native API; a field that is not
OpenAI's goes up as it is, as one of Anthropic's own (top_k).
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.anthropic_messages import API, Block, translate_messages
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_request import (
    CHAT_FIELDS,
    OPENAI_ONLY,
    extras,
    invalid,
    merge,
    reasoning_effort,
    refuse,
    require_chat,
    response_format,
    stop_sequences,
    unsupported,
    wrong_type,
)

# The tool the proxy adds and forces for response_format: its input is the answer's content
# (anthropic.py). No client tool may take the name.
JSON_TOOL: Final = "json_response"
_JSON_TOOL_DESCRIPTION: Final = "Give your whole answer as this tool's input."
# Anthropic's smallest thinking budget: budget_tokens >= 1024, and below max_tokens.
MIN_THINKING_BUDGET: Final = 1024

# OpenAI's fields that would change the answer and that Anthropic cannot honour. Anthropic
# translates parallel_tool_calls (disable_parallel_tool_use), unlike most native APIs.
_REFUSED: Final = (
    "n",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "seed",
    *OPENAI_ONLY,
)
# OpenAI's service tiers that Anthropic has: "auto" may use priority capacity, "default" not.
_SERVICE_TIERS: Final = {"auto": "auto", "default": "standard_only"}
_TOOL_CHOICES: Final = {"auto": "auto", "none": "none", "required": "any"}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """The Messages API body for ``request``; raises ``InvalidRequest`` for what it cannot do."""
    body = request.body
    require_chat(request.endpoint, API)
    refuse(body, _REFUSED, API)
    system, turns = translate_messages(body["messages"])
    # Anthropic wants the signed thinking blocks of a tool loop's turn back, which OpenAI's
    # messages cannot carry: a request that answers tool results goes without thinking.
    last = turns[-1] if turns else None
    in_tool_loop = last is not None and any(b["type"] == "tool_result" for b in last["content"])
    max_tokens, thinking = thinking_budget(body, request.max_tokens, options, in_tool_loop)

    out: dict[str, Any] = {"model": options.upstream_model, "max_tokens": max_tokens}
    if system:
        out["system"] = system
    out["messages"] = turns
    if thinking is not None:
        out["thinking"] = thinking
    tools, tool_choice, output_config = _tools(body, thinking=thinking is not None)
    if tools:
        out["tools"] = tools
    if tool_choice is not None:
        out["tool_choice"] = tool_choice
    if output_config is not None:
        out["output_config"] = output_config
    for param in ("temperature", "top_p"):
        if body.get(param) is not None:
            out[param] = body[param]  # Anthropic's own 400 tells a value it takes not
    stop = stop_sequences(body)
    if stop:
        out["stop_sequences"] = stop
    # OpenAI's safety_identifier replaces user: an end user's opaque id, as user_id is.
    param = "safety_identifier" if body.get("safety_identifier") else "user"
    user = body.get(param)
    if user is not None and not isinstance(user, str):
        raise wrong_type(param, "a string")
    if user:
        out["metadata"] = {"user_id": user}
    tier = body.get("service_tier")
    if tier is not None:
        if not isinstance(tier, str) or tier not in _SERVICE_TIERS:
            raise invalid(
                "service_tier", f"{tier!r} has no counterpart at Anthropic (auto, default do)"
            )
        out["service_tier"] = _SERVICE_TIERS[tier]
    if request.stream:
        out["stream"] = True
    merge(out, extras(body, CHAT_FIELDS))
    return out


# -- token limit and thinking ----------------------------------------------------------------


def thinking_budget(
    body: dict[str, Any], limit: int | None, options: RequestOptions, in_tool_loop: bool
) -> tuple[int, dict[str, Any] | None]:
    """(max_tokens, the thinking parameter or None) for the client's limit and reasoning_effort.

    OpenAI's max_completion_tokens counts reasoning tokens, as Anthropic's max_tokens counts
    thinking: a client's limit stays the limit and the budget is fitted under it. Without one,
    the model's default is the answer's share and the budget comes on top.
    """
    effort = reasoning_effort(body)
    if effort is None or effort == "none":
        return (options.max_tokens if limit is None else limit), None
    if effort not in options.thinking_budgets:
        efforts = ", ".join(["none", *options.thinking_budgets])
        raise invalid("reasoning_effort", f"must be one of {efforts}")
    if in_tool_loop:
        return (options.max_tokens if limit is None else limit), None
    budget = options.thinking_budgets[effort]
    if limit is None:
        return options.max_tokens + budget, {"type": "enabled", "budget_tokens": budget}
    if budget >= limit:
        budget = limit - 1
        if budget < MIN_THINKING_BUDGET:
            param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            raise invalid(
                param,
                f"with reasoning_effort it must be over {MIN_THINKING_BUDGET}: Anthropic's "
                f"smallest thinking budget is {MIN_THINKING_BUDGET} tokens, and the limit "
                "counts them",
            )
    return limit, {"type": "enabled", "budget_tokens": budget}


# -- tools and response_format ---------------------------------------------------------------


def _tools(
    body: dict[str, Any], *, thinking: bool
) -> tuple[list[Block], dict[str, Any] | None, dict[str, Any] | None]:
    """(tools, tool_choice, output_config)."""
    raw = body.get("tools") or []
    if not isinstance(raw, list):
        raise wrong_type("tools", "an array")
    tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(raw)]
    choice = _tool_choice(body.get("tool_choice"), bool(tools))
    output_config = None
    kind, schema = response_format(body, API)
    if kind == "json_object":
        schema = {"type": "object"}  # any object will do
    if schema is not None:
        if thinking:
            # Thinking allows no forced tool: Anthropic's own structured outputs instead, which
            # take a closed schema only (so no json_object).
            if kind == "json_object":
                raise invalid(
                    "response_format",
                    "json_object cannot be combined with reasoning_effort on Anthropic: use "
                    "json_schema",
                )
            output_config = {"format": {"type": "json_schema", "schema": schema}}
        elif choice is None or choice["type"] in ("auto", "none"):
            # A client's "required" or named tool asks for a call, not an answer: then the
            # format has nothing to shape. Otherwise the answer is a call of the proxy's tool.
            free = bool(tools) and (choice is None or choice["type"] == "auto")
            tools.append(
                {"name": JSON_TOOL, "description": _JSON_TOOL_DESCRIPTION, "input_schema": schema}
            )
            # With the client's tools free to call, any tool will do (a call or the answer).
            choice = {"type": "any"} if free else {"type": "tool", "name": JSON_TOOL}
    if body.get("parallel_tool_calls") is False and tools:
        choice = choice or {"type": "auto"}
        if choice["type"] != "none":
            choice = {**choice, "disable_parallel_tool_use": True}
    return tools, choice, output_config


def _tool(tool: object, where: str) -> Block:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise unsupported(f"{where}.type", API, "it calls functions only")
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise invalid(f"{where}.function.name", "a function tool needs a name")
    if name == JSON_TOOL:
        raise invalid(
            f"{where}.function.name", f"'{JSON_TOOL}' is the proxy's own (response_format)"
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise wrong_type(f"{where}.function.parameters", "an object")
    # Anthropic requires input_schema; OpenAI's absent parameters mean "no arguments".
    out: Block = {"name": name, "input_schema": parameters or {"type": "object", "properties": {}}}
    if isinstance(function.get("description"), str):
        out["description"] = function["description"]
    if "cache_control" in tool:
        out["cache_control"] = tool["cache_control"]
    return out


def _tool_choice(value: object, has_tools: bool) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str) and value in _TOOL_CHOICES:
        if not has_tools:
            if value == "required":
                raise invalid("tool_choice", "'required' needs tools")
            return None
        return {"type": _TOOL_CHOICES[value]}
    if isinstance(value, dict) and value.get("type") not in ("function", None):
        # allowed_tools, custom: Anthropic names one tool or none.
        raise unsupported("tool_choice.type", API, "it takes auto, none, required or a function")
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise invalid("tool_choice", "must be auto, none, required or a named function")
    if not has_tools:
        raise invalid("tool_choice", "a named tool_choice needs tools")
    return {"type": "tool", "name": name}
