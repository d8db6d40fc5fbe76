"""The Messages API's ``system`` and ``messages`` for an OpenAI chat request's messages
(docs/providers/anthropic.md): roles, content parts, tool calls and results, cache_control.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.normalize.dialects.native_messages import (
    content_parts,
    data_url,
    part_text,
    role_error,
)
from proxy.normalize.dialects.native_request import invalid, unsupported, wrong_type

API: Final = "Anthropic's Messages API"
Block = dict[str, Any]


def translate_messages(messages: list[dict[str, Any]]) -> tuple[list[Block], list[dict[str, Any]]]:
    """(system blocks, turns). System and developer messages, wherever they stand, join the
    system prompt in order; consecutive messages of one role merge into one turn, so that tool
    results all sit in the user turn right after their calls."""
    system: list[Block] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role")
        if role in ("system", "developer"):
            system += _marked(_parts(message.get("content"), where, ("text",)), message)
            continue
        if role == "user":
            kinds: tuple[str, ...] = ("text", "image_url", "file")
            blocks = _parts(message.get("content"), where, kinds)
            side = "user"
        elif role == "assistant":
            if message.get("function_call") is not None:
                raise unsupported(f"{where}.function_call", API, "use tool_calls instead")
            blocks = _parts(message.get("content"), where, ("text", "refusal"))
            calls = message.get("tool_calls")
            if calls is None:
                calls = []
            if not isinstance(calls, list):
                raise wrong_type(f"{where}.tool_calls", "an array")
            blocks += [_tool_use(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(calls)]
            side = "assistant"
        elif role == "tool":
            blocks, side = [_tool_result(message, where)], "user"
        else:
            raise role_error(role, where, API)
        blocks = _marked(blocks, message)
        if not blocks:
            continue  # Anthropic refuses empty turns; an empty message says nothing
        if turns and turns[-1]["role"] == side:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": side, "content": blocks})
    return system, turns


def _marked(blocks: list[Block], message: dict[str, Any]) -> list[Block]:
    """The blocks, the last one carrying the message's own cache_control (prompt caching of a
    message given as a string): Anthropic caches the prefix up to a marked block."""
    if "cache_control" in message and blocks and "cache_control" not in blocks[-1]:
        blocks[-1] = {**blocks[-1], "cache_control": message["cache_control"]}
    return blocks


def _parts(content: object, where: str, kinds: tuple[str, ...]) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise wrong_type(f"{where}.content", "a string or an array of content parts")
    blocks: list[Block] = []
    for _, at, kind, part in content_parts(content, where, kinds, API):
        if kind in ("text", "refusal"):
            text = part_text(part, kind, at)
            if not text:
                continue  # Anthropic refuses empty text blocks
            block: Block = {"type": "text", "text": text}
        elif kind == "image_url":
            block = _image(part.get("image_url"), at)
        else:
            block = _document(part.get("file"), at)
        if "cache_control" in part:
            block["cache_control"] = part["cache_control"]  # as it came: prompt caching
        blocks.append(block)
    return blocks


def _image(image: object, at: str) -> Block:
    url = image.get("url") if isinstance(image, dict) else image
    param = f"{at}.image_url.url"
    if not isinstance(url, str):
        raise wrong_type(param, "a string")
    if url.startswith("data:"):
        media_type, data = data_url(url, param)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise invalid(param, "an image URL must be http(s) or a base64 data URL")


def _document(file: object, at: str) -> Block:
    given = file.get("file_data") if isinstance(file, dict) else None
    param = f"{at}.file.file_data"
    if not isinstance(given, str) or not given.startswith("data:"):
        raise unsupported(param, API, "it takes a file's own data (a base64 data URL) only")
    media_type, data = data_url(given, param)
    if media_type != "application/pdf":
        raise invalid(param, "Anthropic takes PDF files only")
    return {
        "type": "document",
        "source": {"type": "base64", "media_type": media_type, "data": data},
    }


def _tool_use(call: object, where: str) -> Block:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        raise wrong_type(f"{where}.function", "an object")
    call_id, name = call.get("id"), function.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.id", "a tool call needs its id")
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.function.name", "a tool call needs its function's name")
    arguments = function.get("arguments")
    param = f"{where}.function.arguments"
    try:
        # Anthropic takes the arguments as an object; an empty string is a call without any.
        value = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except orjson.JSONDecodeError:
        raise invalid(param, "a tool call's arguments must be JSON") from None
    if not isinstance(value, dict) or not isinstance(arguments, str | None):
        raise invalid(param, "a tool call's arguments must be a JSON object")
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}


def _tool_result(message: dict[str, Any], where: str) -> Block:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.tool_call_id", "a tool message needs the id of the call it answers")
    block: Block = {"type": "tool_result", "tool_use_id": call_id}
    content = _parts(message.get("content"), where, ("text", "image_url"))
    if content:
        block["content"] = content
    return block
