"""A Messages request's system prompt and turns as canonical chat messages (sans-IO).

Anthropic combines consecutive turns of one role into one turn, and so does this: a run of user
(or assistant) messages is one chat message, its tool results the ``tool`` messages before it.
``role: "system"`` turns (Claude Code sends them) join the top-level system prompt in order, as
one system message first: chat templates of open models refuse a system message anywhere else.
Every refusal names the field of the client's request (``messages[2].content[0].source``).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.core.errors import InvalidRequest
from proxy.normalize.responses.params import invalid_value, missing, unsupported, wrong_type

Block = dict[str, Any]
Message = dict[str, Any]

# What the target model did not make, so cannot be shown its own: dropped (docs).
_DROPPED: Final = frozenset({"thinking", "redacted_thinking"})
# Block types of Anthropic's server tools (web search, code execution, MCP ...): they ran at
# Anthropic, and only an Anthropic model can be shown their calls and results.
_SERVER_BLOCKS: Final = ("server_tool_use", "mcp_tool_use", "mcp_tool_result", "container_upload")
# Text blocks (of system, or of a tool result) as one text: a paragraph between them.
_JOIN: Final = "\n\n"


def only_anthropic(param: str, what: str) -> InvalidRequest:
    """The refusal of what only an Anthropic model can take (it stays the request's own for an
    ``api: anthropic`` upstream)."""
    return unsupported(param, f"'{param}' ({what}) can only be sent to an Anthropic model")


def chat_messages(system: object, messages: list[dict[str, Any]]) -> list[Message]:
    """The chat messages of the request's ``system`` and ``messages``."""
    prompt = system_texts(system, "system")
    turns: list[tuple[str, list[tuple[str, Block]]]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role")
        if role == "system":
            prompt += system_texts(message.get("content"), f"{where}.content")
            continue
        if role not in ("user", "assistant"):
            raise invalid_value(f"{where}.role", "must be 'user' or 'assistant'")
        blocks = _blocks(message.get("content"), f"{where}.content")
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    out: list[Message] = []
    if prompt:
        out.append({"role": "system", "content": _JOIN.join(prompt)})
    calls: dict[str, str] = {}  # the ids of the last assistant turn's tool_use, unanswered
    for role, blocks in turns:
        if role == "assistant":
            _require_results(calls)
            answer, calls = _assistant(blocks)
            if answer is not None:
                out.append(answer)
        else:
            out += _user(blocks, calls)
            _require_results(calls)
    _require_results(calls)
    return out


def system_texts(value: object, param: str) -> list[str]:
    """The texts of a system prompt: a string, or text blocks (their cache_control dropped)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    texts = []
    for at, block in _blocks(value, param):
        if block.get("type") != "text":
            raise invalid_value(f"{at}.type", "a system prompt takes text blocks only")
        texts.append(_text(block, at))
    return [text for text in texts if text]


def _blocks(content: object, param: str) -> list[tuple[str, Block]]:
    """(the block's param, the block) for each block of a message's content."""
    if isinstance(content, str):
        return [(param, {"type": "text", "text": content})]
    if content is None:
        raise missing(param)
    if not isinstance(content, list):
        raise wrong_type(param, "a string or an array of content blocks")
    found = []
    for j, block in enumerate(content):
        at = f"{param}[{j}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise wrong_type(at, "a content block (an object with a type)")
        found.append((at, block))
    return found


def _text(block: Block, at: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise wrong_type(f"{at}.text", "a string")
    return text


def _refuse_block(block: Block, at: str, role: str) -> InvalidRequest:
    kind = block["type"]
    if kind in _SERVER_BLOCKS or kind.endswith("_tool_result"):
        return only_anthropic(f"{at}.type", f"a {kind} block of a tool Anthropic runs")
    return invalid_value(f"{at}.type", f"a {role} message takes no {kind!r} block")


def _assistant(blocks: list[tuple[str, Block]]) -> tuple[Message | None, dict[str, str]]:
    """The assistant message of a turn (None: nothing in it the target can be shown), and the
    ids of its tool calls with their params."""
    texts: list[str] = []
    tool_calls: list[Block] = []
    calls: dict[str, str] = {}
    for at, block in blocks:
        kind = block["type"]
        if kind == "text":
            texts.append(_text(block, at))  # citations of an earlier answer: its text stays
        elif kind == "tool_use":
            call_id, call = _tool_call(block, at)
            calls[call_id] = at
            tool_calls.append(call)
        elif kind not in _DROPPED:
            raise _refuse_block(block, at, "assistant")
    if not texts and not tool_calls:
        return None, calls
    message: Message = {"role": "assistant", "content": _content(texts)}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message, calls


def _content(texts: list[str]) -> str | list[Block] | None:
    if not texts:
        return None
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def _tool_call(block: Block, at: str) -> tuple[str, Block]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id:
        raise wrong_type(f"{at}.id", "a non-empty string")
    if not isinstance(name, str) or not name:
        raise wrong_type(f"{at}.name", "a non-empty string")
    if not isinstance(arguments, dict):
        raise wrong_type(f"{at}.input", "an object")
    encoded = orjson.dumps(arguments).decode()
    return call_id, {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": encoded},
    }


def _require_results(calls: dict[str, str]) -> None:
    """A tool_use must have its result in the user turn right after it (Anthropic's rule, and
    chat's: an assistant's tool_calls are followed by their tool messages)."""
    if calls:
        call_id, at = next(iter(calls.items()))
        raise invalid_value(
            at, f"tool_use {call_id!r} has no tool_result in the user message after it"
        )


def _user(blocks: list[tuple[str, Block]], calls: dict[str, str]) -> list[Message]:
    """A user turn's chat messages: a ``tool`` message per tool result, answering ``calls``
    (each answered one is taken out), then the user message of the rest. An image in a tool
    result (a screenshot, a file read) has no place in a tool message: it leads the user
    message after them."""
    tools: list[Message] = []
    parts: list[Block] = []
    carried: list[Block] = []
    for at, block in blocks:
        kind = block["type"]
        if kind == "tool_result":
            message, images = _tool_result(block, at, calls)
            tools.append(message)
            carried += images
        elif kind == "text":
            parts.append({"type": "text", "text": _text(block, at)})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "document":
            parts += _document(block, at)
        else:
            raise _refuse_block(block, at, "user")
    parts = carried + parts
    if not parts:
        return tools
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [*tools, {"role": "user", "content": parts[0]["text"]}]
    return [*tools, {"role": "user", "content": parts}]


def _tool_result(block: Block, at: str, calls: dict[str, str]) -> tuple[Message, list[Block]]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise wrong_type(f"{at}.tool_use_id", "a string")
    if calls.pop(call_id, None) is None:
        raise invalid_value(
            f"{at}.tool_use_id",
            f"{call_id!r} answers no tool_use of the assistant message before it (or answers "
            "one twice)",
        )
    content = block.get("content")
    texts: list[str] = []
    images: list[Block] = []
    if isinstance(content, str):
        texts.append(content)
    elif content is not None:
        for inner, part in _blocks(content, f"{at}.content"):
            if part["type"] == "text":
                texts.append(_text(part, inner))
            elif part["type"] == "image":
                images.append(_image(part, inner))
            else:
                raise invalid_value(f"{inner}.type", "a tool result takes text and images only")
    text = _JOIN.join(texts)
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise wrong_type(f"{at}.is_error", "a boolean")
    if is_error:
        # Chat's tool message has no error flag: the text says it.
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _source(block: Block, at: str) -> tuple[str, Block]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if not isinstance(source, dict) or not isinstance(kind, str):
        raise wrong_type(f"{at}.source", "an object with a type")
    return kind, source


def _string(source: Block, key: str, param: str) -> str:
    value = source.get(key)
    if not isinstance(value, str) or not value:
        raise wrong_type(f"{param}.{key}", "a non-empty string")
    return value


def _image(block: Block, at: str) -> Block:
    kind, source = _source(block, at)
    param = f"{at}.source"
    if kind == "base64":
        media_type = _string(source, "media_type", param)
        data = _string(source, "data", param)
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        url = _string(source, "url", param)
    elif kind == "file":
        raise only_anthropic(param, "an image uploaded to Anthropic's Files API")
    else:
        raise invalid_value(f"{param}.type", "must be 'base64', 'url' or 'file'")
    return {"type": "image_url", "image_url": {"url": url}}


def _document(block: Block, at: str) -> list[Block]:
    """A PDF as chat's file part; a plain-text document as its text, after its title and
    context when given (what the model is told of it)."""
    kind, source = _source(block, at)
    param = f"{at}.source"
    citations = block.get("citations")
    if isinstance(citations, dict) and citations.get("enabled"):
        raise only_anthropic(f"{at}.citations", "Anthropic's citations")
    title, context = block.get("title"), block.get("context")
    for key, value in (("title", title), ("context", context)):
        if value is not None and not isinstance(value, str):
            raise wrong_type(f"{at}.{key}", "a string")
    if kind == "base64":
        media_type = _string(source, "media_type", param)
        data = _string(source, "data", param)
        file = {"file_data": f"data:{media_type};base64,{data}", "filename": title or "document"}
        return [{"type": "file", "file": file}]
    if kind == "text":
        texts = [text for text in (title, context) if text]
        texts.append(_string(source, "data", param))
        return [{"type": "text", "text": text} for text in texts]
    if kind in ("url", "file", "content"):
        raise only_anthropic(param, f"a document of source type {kind!r}")
    raise invalid_value(f"{param}.type", "must be 'base64', 'text', 'url', 'content' or 'file'")
