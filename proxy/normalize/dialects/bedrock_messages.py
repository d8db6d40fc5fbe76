"""The Converse request's ``system`` and ``messages`` for an OpenAI chat request's messages
(sans-IO): text, image and document blocks, tool calls and results, cache points.

Shapes from the Bedrock Runtime API reference (Message, ContentBlock, ImageBlock,
DocumentBlock, ToolUseBlock, ToolResultBlock, SystemContentBlock, CachePointBlock). Blobs
(an image's or a document's bytes) go base64 in the JSON body, as AWS's REST-JSON protocol
carries them.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from proxy.normalize.dialects.native_messages import (
    assistant_content,
    called_function,
    content_parts,
    data_url,
    part_text,
    role_error,
    tool_call_id,
    tool_calls,
)
from proxy.normalize.dialects.native_request import invalid, unsupported, wrong_type

API: Final = "Bedrock's Converse API"
Block = dict[str, Any]
# A cache breakpoint: Converse caches the prefix up to it (OpenAI-style cache_control marks).
CACHE_POINT: Final = {"cachePoint": {"type": "default"}}
_IMAGE_FORMATS: Final = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_DOCUMENT_FORMATS: Final = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
}
_EXTENSIONS: Final = frozenset(_DOCUMENT_FORMATS.values())
# A document's name may hold letters, digits, single spaces, hyphens, parentheses and brackets.
_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9\-()\[\] ]+| {2,}")


def translate_messages(messages: list[dict[str, Any]]) -> tuple[list[Block], list[dict[str, Any]]]:
    """(system blocks, messages). System and developer messages join ``system`` in order;
    consecutive messages of one role merge, as Converse wants roles to alternate (a tool's
    results are the user's turn)."""
    system: list[Block] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role")
        if role in ("system", "developer"):
            system += _marked(_parts(message.get("content"), where, ("text",)), message)
            continue
        if role == "user":
            side, blocks = (
                "user",
                _parts(message.get("content"), where, ("text", "image_url", "file")),
            )
        elif role == "assistant":
            side, blocks = "assistant", _assistant(message, where)
        elif role == "tool":
            side, blocks = "user", [_tool_result(message, where)]
        else:
            raise role_error(role, where, API)
        blocks = _marked(blocks, message)
        if not blocks:
            continue  # Converse refuses empty and blank content
        if turns and turns[-1]["role"] == side:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": side, "content": blocks})
    if not turns:
        raise invalid("messages", "Converse needs at least one user or assistant message")
    return system, turns


def has_tool_blocks(turns: list[dict[str, Any]]) -> bool:
    """Whether the conversation holds tool calls or results (Converse then wants the tools)."""
    return any("toolUse" in b or "toolResult" in b for turn in turns for b in turn["content"])


def _marked(blocks: list[Block], message: dict[str, Any]) -> list[Block]:
    """A message's own cache_control (one given as a string) marks the end of its blocks."""
    if "cache_control" in message and blocks and blocks[-1] != CACHE_POINT:
        blocks.append(dict(CACHE_POINT))
    return blocks


def _parts(content: object, where: str, kinds: tuple[str, ...]) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content.strip() else []
    if not isinstance(content, list):
        raise wrong_type(f"{where}.content", "a string or an array of content parts")
    blocks: list[Block] = []
    for j, at, kind, part in content_parts(content, where, kinds, API):
        if kind in ("text", "refusal"):
            text = part_text(part, kind, at)
            if text.strip():  # Converse refuses blank text
                blocks.append({"text": text})
        elif kind == "image_url":
            blocks.append(_image(part.get("image_url"), f"{at}.image_url"))
        else:
            blocks.append(_document(part.get("file"), f"{at}.file", j))
        if "cache_control" in part and blocks:
            blocks.append(dict(CACHE_POINT))
    return blocks


def _assistant(message: dict[str, Any], where: str) -> list[Block]:
    if message.get("function_call") is not None:
        raise unsupported(f"{where}.function_call", API, "use tool_calls instead")
    blocks = _parts(assistant_content(message), where, ("text", "refusal"))
    for given, at in tool_calls(message, where):
        call, function = called_function(given, at, API)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid(f"{at}.id", "a tool call needs its id")
        arguments = _arguments(function.get("arguments"), f"{at}.function.arguments")
        blocks.append(
            {"toolUse": {"toolUseId": call_id, "name": function["name"], "input": arguments}}
        )
    return blocks


def _arguments(value: object, param: str) -> dict[str, Any]:
    """toolUse.input is an object; OpenAI's arguments are its JSON text (empty: none)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if not isinstance(value, str):
        raise wrong_type(param, "a string of JSON")
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise invalid(param, "a tool call's arguments must be JSON") from None
    if not isinstance(parsed, dict):
        raise invalid(param, "a tool call's arguments must be a JSON object")
    return parsed


def _tool_result(message: dict[str, Any], where: str) -> Block:
    content = [
        block
        for block in _parts(message.get("content"), where, ("text", "image_url"))
        if block != CACHE_POINT  # a result's content takes no cache point; its message does
    ]
    # Converse requires a result's content; an empty result is an empty text.
    result = {"toolUseId": tool_call_id(message, where), "content": content or [{"text": ""}]}
    return {"toolResult": result}


# -- media ------------------------------------------------------------------------------------


def _normalized(found: tuple[str, str]) -> tuple[str, str]:
    # Converse names formats by a lower-case word, and refuses padding around the data.
    media_type, data = found
    return media_type.strip().lower(), data.strip()


def _image(image: object, param: str) -> Block:
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise wrong_type(f"{param}.url", "a string")
    if not url.startswith("data:"):
        # Converse takes an image's bytes (or an S3 location), and fetches no URL.
        raise unsupported(f"{param}.url", API, "it takes images as base64 data: URLs only")
    media_type, data = _normalized(data_url(url, f"{param}.url"))
    form = _IMAGE_FORMATS.get(media_type)
    if form is None:
        raise invalid(f"{param}.url", f"{media_type!r} is not an image type Converse takes")
    return {"image": {"format": form, "source": {"bytes": data}}}


def _document(file: object, param: str, position: int) -> Block:
    if not isinstance(file, dict):
        raise wrong_type(param, "an object")
    data = file.get("file_data")
    if not isinstance(data, str):
        if file.get("file_id") is not None:
            raise unsupported(f"{param}.file_id", API, "it cannot read OpenAI's uploaded files")
        raise wrong_type(f"{param}.file_data", "a string")
    filename = file.get("filename")
    stem, _, extension = filename.rpartition(".") if isinstance(filename, str) else ("", "", "")
    if data.startswith("data:"):
        media_type, data = _normalized(data_url(data, f"{param}.file_data"))
        form = _DOCUMENT_FORMATS.get(media_type)
    else:  # bare base64: its type is its name's
        form = extension.lower() if extension.lower() in _EXTENSIONS else None
    if form is None:
        raise invalid(
            f"{param}.file_data", "Converse takes pdf, csv, doc(x), xls(x), html, txt, md"
        )
    # Converse requires a name (which the model sees), of a few characters only.
    name = " ".join(_NAME_UNSAFE.sub(" ", stem or filename or "").split())
    return {
        "document": {
            "format": form,
            "name": name or f"document {position + 1}",
            "source": {"bytes": data},
        }
    }
