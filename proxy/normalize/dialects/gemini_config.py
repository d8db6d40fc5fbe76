"""The Gemini request's tools, ``toolConfig`` and ``generationConfig``, from a client's OpenAI
fields (sans-IO).

Field names are those of Google's reference (https://ai.google.dev/api/generate-content).
"""

from __future__ import annotations

import re
from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_request import (
    invalid,
    is_set,
    reasoning_effort,
    response_format,
    stop_sequences,
    unsupported,
    wrong_type,
)

# How the request builder's refusals name the API.
API: Final = "the Gemini API"

_SAMPLING: Final = (
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
)
_TOOL_MODES: Final = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
# allowed_tools: "auto" may answer in text or call one of them, which is Gemini's VALIDATED.
_ALLOWED_MODES: Final = {"auto": "VALIDATED", "required": "ANY"}
_GENERATION: Final = re.compile(r"(?:^|/)gemini-(\d+)")


# -- tools ------------------------------------------------------------------------------------


def declare_functions(tools: object) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise wrong_type("tools", "an array")
    declarations = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise wrong_type(param, "an object")
        if tool.get("type", "function") != "function":
            raise unsupported(f"{param}.type", API, "it calls functions only")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise wrong_type(f"{param}.function", "an object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise wrong_type(f"{param}.function.name", "a non-empty string")
        declaration: dict[str, Any] = {"name": name}
        description = function.get("description")
        if isinstance(description, str) and description:
            declaration["description"] = description
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise wrong_type(f"{param}.function.parameters", "an object")
            # parametersJsonSchema takes JSON Schema as OpenAI's tools carry it; `parameters`
            # takes only Google's OpenAPI subset.
            declaration["parametersJsonSchema"] = parameters
        declarations.append(declaration)
    return declarations


def build_tool_config(choice: object, has_tools: bool) -> dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        mode = _TOOL_MODES.get(choice)
        if mode is None:
            raise invalid("tool_choice", "must be none, auto, required or a function")
        if not has_tools:
            if mode == "ANY":
                raise invalid("tool_choice", "'required' needs tools")
            return None
        return {"functionCallingConfig": {"mode": mode}}
    if not isinstance(choice, dict):
        raise wrong_type("tool_choice", "a string or an object")
    if not has_tools:
        raise invalid("tool_choice", "a function choice needs tools")
    kind = choice.get("type")
    if kind == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise wrong_type("tool_choice.function.name", "a non-empty string")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools")
        if not isinstance(allowed, dict):
            raise wrong_type("tool_choice.allowed_tools", "an object")
        mode = _ALLOWED_MODES.get(str(allowed.get("mode")))
        if mode is None:
            raise invalid("tool_choice.allowed_tools.mode", "must be auto or required")
        return {"functionCallingConfig": {"mode": mode, "allowedFunctionNames": _names(allowed)}}
    raise unsupported("tool_choice.type", API, "it calls functions only")


def _names(allowed: dict[str, Any]) -> list[str]:
    tools = allowed.get("tools")
    if not isinstance(tools, list) or not tools:
        raise wrong_type("tool_choice.allowed_tools.tools", "a non-empty array")
    names = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise unsupported(
                f"tool_choice.allowed_tools.tools[{i}]", API, "it calls functions only"
            )
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise wrong_type(f"tool_choice.allowed_tools.tools[{i}].function.name", "a string")
        names.append(name)
    return names


# -- generationConfig -------------------------------------------------------------------------


def _number(body: dict[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
        raise wrong_type(key, "an integer" if kinds is int else "a number")
    return value


def build_generation_config(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    body = request.body
    config: dict[str, Any] = {}
    for key, native in _SAMPLING:
        value = _number(body, key, (int, float))
        if value is not None:
            config[native] = value
    seed = _number(body, "seed", int)
    if seed is not None:
        config["seed"] = seed
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.n > 1:
        config["candidateCount"] = request.n
    stop = stop_sequences(body)
    if stop:
        config["stopSequences"] = stop
    kind, schema = response_format(body, API)
    if kind != "text":
        config["responseMimeType"] = "application/json"
    if schema is not None:
        # responseJsonSchema takes JSON Schema itself; responseSchema only an OpenAPI subset.
        config["responseJsonSchema"] = schema
    config.update(_logprobs(body))
    thinking = _thinking(reasoning_effort(body), options)
    if thinking is not None:
        config["thinkingConfig"] = thinking
    return config


def _logprobs(body: dict[str, Any]) -> dict[str, Any]:
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise wrong_type("logprobs", "a boolean")
    top = _number(body, "top_logprobs", int)
    if not wanted:
        if is_set(body, "top_logprobs"):
            raise invalid("top_logprobs", "needs 'logprobs' set to true")
        return {}
    out: dict[str, Any] = {"responseLogprobs": True}
    if top:
        out["logprobs"] = top
    return out


def _thinking(effort: str | None, options: RequestOptions) -> dict[str, Any] | None:
    """thinkingConfig for reasoning_effort: Gemini 3 and later take a thinkingLevel of the same
    names; earlier models (and names that tell no generation) the configured budget, which
    Gemini 3 also accepts. includeThoughts, or Gemini keeps its thoughts to itself."""
    if effort is None:
        return None
    if effort == "none":
        return {"thinkingBudget": 0}
    budget = options.thinking_budgets.get(effort)
    if budget is None:
        efforts = ", ".join(["none", *options.thinking_budgets])
        raise invalid("reasoning_effort", f"must be one of {efforts}")
    found = _GENERATION.search(options.upstream_model)
    if found is not None and int(found[1]) >= 3:
        return {"thinkingLevel": effort, "includeThoughts": True}
    return {"thinkingBudget": budget, "includeThoughts": True}
