"""The Messages API request for a client's OpenAI chat request (docs/providers/anthropic.md).

Every OpenAI field is translated, dropped (it changes nothing in the answer) or refused with a
400 naming it; a field that is not OpenAI's goes up as it is, as one of Anthropic's own (top_k).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proxy.core.errors import InvalidRequest
from proxy.core.request import ClientRequest
from proxy.normalize.dialects.anthropic_messages import Block, invalid, translate_messages
from proxy.normalize.dialects.dialect import RequestOptions

# The tool the proxy adds and forces for response_format: its input is the answer's content
# (anthropic.py). No client tool may take the name.
JSON_TOOL: Final = "json_response"
_JSON_TOOL_DESCRIPTION: Final = "Give your whole answer as this tool's input."
# Anthropic's smallest thinking budget: budget_tokens >= 1024, and below max_tokens.
MIN_THINKING_BUDGET: Final = 1024

# OpenAI parameters that would change the answer and that Anthropic cannot honour, with the
# values that ask for nothing (accepted, and not sent).
_REFUSED: Final[Mapping[str, tuple[object, ...]]] = {
    "n": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "logit_bias": (None, {}),
    "seed": (None,),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "web_search_options": (None,),
    "verbosity": (None, "medium"),
    "functions": (None,),
    "function_call": (None,),
}
# OpenAI parameters with no counterpart that change nothing in the answer: usage always comes
# in Anthropic's stream; storing, predicted outputs and cache routing hints are OpenAI's own.
_DROPPED: Final = frozenset(
    {
        "stream_options",
        "store",
        "metadata",
        "prediction",
        "prompt_cache_key",
        "prompt_cache_retention",
    }
)
_TRANSLATED: Final = frozenset(
    {
        "model",
        "messages",
        "stream",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "response_format",
        "user",
        "safety_identifier",
        "service_tier",
    }
)
_OPENAI_FIELDS: Final = _TRANSLATED | _DROPPED | _REFUSED.keys()
# OpenAI's service tiers that Anthropic has: "auto" may use priority capacity, "default" not.
_SERVICE_TIERS: Final = {"auto": "auto", "default": "standard_only"}
_TOOL_CHOICES: Final = {"auto": "auto", "none": "none", "required": "any"}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """The Messages API body for ``request``; raises ``InvalidRequest`` for what it cannot do."""
    body = request.body
    if request.endpoint != "chat":
        raise InvalidRequest(
            "Anthropic's Messages API serves chat completions only", code="unsupported_endpoint"
        )
    for param, harmless in _REFUSED.items():
        if body.get(param) not in harmless:
            raise InvalidRequest(
                f"'{param}' is not supported with Anthropic: the Messages API has no such "
                "parameter",
                param=param,
                code="unsupported_parameter",
            )
    system, turns = translate_messages(body["messages"])
    # Anthropic wants the signed thinking blocks of a tool loop's turn back, which OpenAI's
    # messages cannot carry: a request that answers tool results goes without thinking.
    last = turns[-1] if turns else None
    in_tool_loop = last is not None and any(b["type"] == "tool_result" for b in last["content"])
    max_tokens, thinking = _thinking(body, request.max_tokens, options, in_tool_loop)

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
    stop = _stop(body.get("stop"))
    if stop:
        out["stop_sequences"] = stop
    # OpenAI's safety_identifier replaces user: an end user's opaque id, as user_id is.
    param = "safety_identifier" if body.get("safety_identifier") else "user"
    user = body.get(param)
    if user is not None and not isinstance(user, str):
        raise invalid(f"'{param}' must be a string", param, "invalid_type")
    if user:
        out["metadata"] = {"user_id": user}
    tier = body.get("service_tier")
    if tier is not None:
        if tier not in _SERVICE_TIERS:
            raise invalid(
                f"service_tier '{tier}' has no counterpart at Anthropic (auto, default do)",
                "service_tier",
            )
        out["service_tier"] = _SERVICE_TIERS[tier]
    if request.stream:
        out["stream"] = True
    for key, value in body.items():
        if key not in _OPENAI_FIELDS:
            if key in out:
                raise invalid(f"'{key}' is also written by the proxy's translation", key)
            out[key] = value
    return out


# -- token limit and thinking ----------------------------------------------------------------


def _thinking(
    body: dict[str, Any], limit: int | None, options: RequestOptions, in_tool_loop: bool
) -> tuple[int, dict[str, Any] | None]:
    """(max_tokens, the thinking parameter or None) for the client's limit and reasoning_effort.

    OpenAI's max_completion_tokens counts reasoning tokens, as Anthropic's max_tokens counts
    thinking: a client's limit stays the limit and the budget is fitted under it. Without one,
    the model's default is the answer's share and the budget comes on top.
    """
    effort = body.get("reasoning_effort")
    if effort is None or effort == "none":
        return (options.max_tokens if limit is None else limit), None
    if not isinstance(effort, str) or effort not in options.thinking_budgets:
        efforts = ", ".join(["none", *options.thinking_budgets])
        raise invalid(f"reasoning_effort must be one of {efforts}", "reasoning_effort")
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
                f"With reasoning_effort, '{param}' must be over {MIN_THINKING_BUDGET}: "
                f"Anthropic's smallest thinking budget is {MIN_THINKING_BUDGET} tokens, and the "
                "limit counts them",
                param,
            )
    return limit, {"type": "enabled", "budget_tokens": budget}


def _stop(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise invalid("'stop' must be a string or an array of strings", "stop", "invalid_type")


# -- tools and response_format ---------------------------------------------------------------


def _tools(
    body: dict[str, Any], *, thinking: bool
) -> tuple[list[Block], dict[str, Any] | None, dict[str, Any] | None]:
    """(tools, tool_choice, output_config)."""
    raw = body.get("tools") or []
    if not isinstance(raw, list):
        raise invalid("'tools' must be an array", "tools", "invalid_type")
    tools = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(raw)]
    choice = _tool_choice(body.get("tool_choice"), bool(tools))
    output_config = None
    schema = _response_schema(body.get("response_format"))
    if schema is not None:
        if thinking:
            # Thinking allows no forced tool: Anthropic's own structured outputs instead, which
            # take a closed schema only (so no json_object).
            if body["response_format"].get("type") == "json_object":
                raise invalid(
                    "response_format json_object cannot be combined with reasoning_effort on "
                    "Anthropic: use json_schema",
                    "response_format",
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
        raise invalid("Only tools of type 'function' can be sent to Anthropic", f"{where}.type")
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise invalid("A function tool needs function.name", f"{where}.function.name")
    if name == JSON_TOOL:
        raise invalid(
            f"The tool name '{JSON_TOOL}' is the proxy's own (response_format)",
            f"{where}.function.name",
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid(
            "function.parameters must be an object", f"{where}.function.parameters", "invalid_type"
        )
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
                raise invalid("tool_choice 'required' needs tools", "tool_choice")
            return None
        return {"type": _TOOL_CHOICES[value]}
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise invalid(
            "tool_choice must be auto, none, required or a named function with Anthropic",
            "tool_choice",
        )
    if not has_tools:
        raise invalid("A named tool_choice needs tools", "tool_choice")
    return {"type": "tool", "name": name}


def _response_schema(value: object) -> dict[str, Any] | None:
    """The JSON schema the answer must follow, or None for free text."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(value, dict) or kind not in ("text", "json_object", "json_schema"):
        raise invalid("response_format must be text, json_object or json_schema", "response_format")
    if kind == "text":
        return None
    spec = value.get("json_schema")
    schema = spec.get("schema") if kind == "json_schema" and isinstance(spec, dict) else None
    if schema is None:
        return {"type": "object"}  # json_object: any object will do
    if not isinstance(schema, dict):
        raise invalid(
            "response_format.json_schema.schema must be an object",
            "response_format.json_schema.schema",
            "invalid_type",
        )
    return schema
