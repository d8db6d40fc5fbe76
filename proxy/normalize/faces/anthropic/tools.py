"""A Messages request's tools and tool_choice as chat's function tools (sans-IO).

A custom tool is a function tool whose parameters are its input_schema; what steers Anthropic's
prompt caching or tool loading (cache_control, defer_loading, eager_input_streaming) is dropped,
the target having no such thing. A server tool (web search, code execution, bash, text editor,
computer use ...: a ``type`` other than ``custom``) runs at Anthropic: refused, naming it.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.normalize.faces.anthropic.content import only_anthropic
from proxy.normalize.responses import params
from proxy.normalize.responses.params import invalid_value, missing, wrong_type

# A custom tool's keys: translated, or dropped as they steer cost and latency, not the answer.
_TRANSLATED: Final = frozenset({"name", "description", "input_schema", "strict", "type"})
_DROPPED: Final = frozenset({"cache_control", "defer_loading", "eager_input_streaming"})
_CHOICES: Final = {"auto": "auto", "any": "required", "none": "none"}


def chat_tools(value: object) -> list[dict[str, Any]]:
    """The function tools of the request's ``tools``."""
    tools = params.array(value, "tools") or []
    return [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def _tool(tool: object, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise wrong_type(where, "an object")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise only_anthropic(where, f"the server tool {kind!r}, which runs at Anthropic")
    for key in tool:
        if key in _TRANSLATED or key in _DROPPED:
            continue
        if key == "allowed_callers" and tool[key] == ["direct"]:
            continue  # the default: the model calls it itself
        raise only_anthropic(f"{where}.{key}", "a tool setting only Anthropic has")
    name = params.text(tool.get("name"), f"{where}.name", required=True)
    if not name:
        raise wrong_type(f"{where}.name", "a non-empty string")
    schema = params.mapping(tool.get("input_schema"), f"{where}.input_schema")
    if schema is None:
        raise missing(f"{where}.input_schema")
    function: dict[str, Any] = {"name": name}
    description = params.text(tool.get("description"), f"{where}.description")
    if description is not None:
        function["description"] = description
    function["parameters"] = schema
    strict = params.flag(tool.get("strict"), f"{where}.strict")
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def chat_tool_choice(value: object, has_tools: bool) -> tuple[object, bool | None]:
    """(chat's tool_choice or None, parallel_tool_calls or None) for the request's."""
    choice = params.mapping(value, "tool_choice")
    if choice is None:
        return None, None
    kind = params.choice(choice.get("type"), "tool_choice.type", ("auto", "any", "tool", "none"))
    if kind is None:
        raise missing("tool_choice.type")
    serial = params.flag(
        choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use"
    )
    parallel = False if serial and kind != "none" else None
    if kind == "tool":
        name = params.text(choice.get("name"), "tool_choice.name", required=True)
        if not has_tools:
            raise invalid_value("tool_choice", "a named tool needs tools")
        return {"type": "function", "function": {"name": name}}, parallel
    if kind == "any" and not has_tools:
        raise invalid_value("tool_choice", "'any' needs tools")
    return _CHOICES[kind], parallel
