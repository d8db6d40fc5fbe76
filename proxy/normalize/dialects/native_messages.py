"""What the native chat builders share in reading a client's OpenAI messages and tools: the
checks and the refusals are the same for every native API, whatever it makes of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from proxy.core.errors import InvalidRequest
from proxy.normalize.dialects.native_request import invalid, unsupported, wrong_type


# For an API that wants every function's JSON schema, where OpenAI's may leave it out.
def _no_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


def role_error(role: object, where: str, api: str) -> InvalidRequest:
    """The 400 for a message whose role is none of system, developer, user, assistant, tool."""
    if role == "function":
        return unsupported(f"{where}.role", api, "use tool messages instead of function ones")
    return invalid(f"{where}.role", f"{role!r} is not a role")


def tool_call_id(message: Mapping[str, Any], where: str) -> str:
    """The id of the call a tool message answers."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise wrong_type(f"{where}.tool_call_id", "a string")
    return call_id


def assistant_content(message: Mapping[str, Any]) -> object:
    """What an assistant message said: its content, or what it refused with when it has none."""
    content = message.get("content")
    if content is None or content == "" or content == []:
        return message.get("refusal")
    return content


def tool_calls(message: Mapping[str, Any], where: str) -> list[tuple[object, str]]:
    """An assistant message's tool calls, each with its place in the request."""
    calls = message.get("tool_calls")
    if not calls:
        return []
    if not isinstance(calls, list):
        raise wrong_type(f"{where}.tool_calls", "an array")
    return [(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]


def called_function(call: object, where: str, api: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the tool call, its ``function``), checked to be a call of a function with a name."""
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise unsupported(f"{where}.type", api, "it calls functions only")
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise wrong_type(f"{where}.function", "an object with a name")
    return call, function


def function_tool(function: Mapping[str, Any]) -> dict[str, Any]:
    """A function of ``function_tools`` as a tool of OpenAI's shape, its schema always given
    (none is an object without properties: no arguments)."""
    out: dict[str, Any] = {"name": function["name"]}
    if function.get("description") is not None:
        out["description"] = function["description"]
    parameters = function.get("parameters")
    out["parameters"] = _no_parameters() if parameters is None else parameters
    return {"type": "function", "function": out}


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


def data_url(url: str, param: str) -> tuple[str, str]:
    """(media type, base64 data) of a ``data:<media type>;base64,<data>`` URL, as given."""
    header, comma, data = url[len("data:") :].partition(",")
    media_type, *attributes = header.split(";")
    if not comma or "base64" not in attributes or not media_type:
        raise invalid(param, "a data URL must be data:<media type>;base64,<data>")
    return media_type, data


def content_parts(
    content: list[Any], where: str, kinds: tuple[str, ...], api: str
) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """A message's content parts, each (position, its path, its type, the part), refusing a
    type ``api`` takes nowhere in ``kinds``."""
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise unsupported(f"{at}.type", api, f"it takes no {kind!r} part here")
        assert isinstance(part, dict) and isinstance(kind, str)
        yield j, at, kind, part


def part_text(part: Mapping[str, Any], kind: str, at: str) -> str:
    """A text or refusal part's text."""
    text = part.get(kind)
    if not isinstance(text, str):
        raise wrong_type(f"{at}.{kind}", "a string")
    return text
