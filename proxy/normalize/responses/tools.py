"""A Responses request's function tools and tool_choice, in chat's shape (sans-IO).

A Responses function tool is flat (``{"type": "function", "name", "parameters", ...}``), a chat
one nests it under ``function``. Every other kind of tool (web_search, file_search, computer,
code_interpreter, mcp, image_generation, custom, shell, ...) is one that OpenAI runs, or whose
call a chat model cannot make: it is refused, naming the tool.
"""

from __future__ import annotations

from typing import Any

from proxy.normalize.responses import params
from proxy.normalize.responses.params import unsupported, wrong_type


def chat_tools(value: object) -> tuple[list[dict[str, Any]], tuple[dict[str, Any], ...]]:
    """The chat ``tools`` (nested ``function`` objects) and the Response's (flat)."""
    chat: list[dict[str, Any]] = []
    echo: list[dict[str, Any]] = []
    for i, tool in enumerate(params.array(value, "tools") or ()):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise wrong_type(where, "an object")
        kind = tool.get("type")
        if kind != "function":
            raise unsupported(
                f"{where}.type",
                f"{where} is a {kind!r} tool, which the proxy cannot offer: it answers through "
                "a chat completions model, which calls function tools only (built-in tools "
                "run at OpenAI).",
            )
        name = params.text(tool.get("name"), f"{where}.name", required=True)
        description = params.text(tool.get("description"), f"{where}.description")
        parameters = params.mapping(tool.get("parameters"), f"{where}.parameters")
        strict = params.flag(tool.get("strict"), f"{where}.strict")
        function: dict[str, Any] = {"name": name}
        for key, given in (
            ("description", description),
            ("parameters", parameters),
            ("strict", strict),
        ):
            if given is not None:
                function[key] = given
        chat.append({"type": "function", "function": function})
        echo.append(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": parameters,
                "strict": strict,
            }
        )
    return chat, tuple(echo)


def chat_tool_choice(value: object) -> tuple[object, str | dict[str, Any]]:
    """The chat ``tool_choice`` (None: leave it out) and the Response's."""
    if value is None:
        return None, "auto"
    if isinstance(value, str):
        params.choice(value, "tool_choice", ("none", "auto", "required"))
        return value, value
    if not isinstance(value, dict):
        raise wrong_type("tool_choice", "a string or an object")
    kind = value.get("type")
    if kind == "function":
        name = params.text(value.get("name"), "tool_choice.name", required=True)
        return {"type": "function", "function": {"name": name}}, {"type": "function", "name": name}
    if kind == "allowed_tools":
        mode = params.choice(value.get("mode"), "tool_choice.mode", ("auto", "required"))
        names = []
        for i, tool in enumerate(params.array(value.get("tools"), "tool_choice.tools") or ()):
            where = f"tool_choice.tools[{i}]"
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise unsupported(where, f"{where}: only function tools can be allowed")
            names.append(params.text(tool.get("name"), f"{where}.name", required=True))
        mode = mode or "auto"
        return (
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": mode,
                    "tools": [{"type": "function", "function": {"name": n}} for n in names],
                },
            },
            {
                "type": "allowed_tools",
                "mode": mode,
                "tools": [{"type": "function", "name": n} for n in names],
            },
        )
    raise unsupported(
        "tool_choice.type",
        f"tool_choice {kind!r} names a tool the proxy cannot offer: only function tools",
    )
