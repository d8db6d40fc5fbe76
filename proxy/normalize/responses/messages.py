"""A Responses request's ``instructions`` and ``input`` items made chat messages (sans-IO).

- ``instructions`` comes first, as a system message; ``developer`` messages are system messages
  too (every chat provider knows that role, not all know ``developer``).
- A user or system message keeps its content: a string stays one, and so does a list of one
  ``input_text`` part; any other list becomes chat parts (``text``, ``image_url``, ``file``).
- An assistant ``message`` item becomes an assistant message whose content is its text parts
  joined (they are parts of one answer) and whose ``refusal`` is its refusal parts'.
- ``function_call`` items become ``tool_calls`` of the assistant message before them (a message
  or other calls), as chat puts an answer's text and calls in one message;
  ``function_call_output`` items become ``tool`` messages.
- A ``reasoning`` item's text (its ``content``, else its ``summary``) becomes the
  ``reasoning_content`` of the assistant message that follows it; one followed by anything else
  is dropped, and ``encrypted_content`` is never usable away from OpenAI.
- Whatever needs a stored object (``item_reference``, a ``file_id``) or a tool the proxy cannot
  run (built-in tools' calls) is refused, naming the item.
"""

from __future__ import annotations

from typing import Any

from proxy.normalize.responses import params
from proxy.normalize.responses.params import unsupported, wrong_type

Message = dict[str, Any]

_ROLES = ("user", "assistant", "system", "developer")
_IMAGE_DETAILS = frozenset({"auto", "low", "high"})  # chat's; "original" is the Responses API's


def chat_messages(instructions: str | None, items: object) -> list[Message]:
    """The chat ``messages`` for a Responses request's ``instructions`` and ``input``."""
    messages: list[Message] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if items is None:
        return messages
    if not isinstance(items, list):
        raise wrong_type("input", "a string or an array of input items")
    reasoning: list[str] = []  # reasoning waiting for the assistant message it precedes
    # Each assistant message's reasoning, joined once at the end: joined per item, alternating
    # reasoning and function_call items would copy the growing text again for every pair.
    thoughts: dict[int, tuple[Message, list[str]]] = {}
    answer: Message | None = None  # the assistant message later function calls belong to
    for position, item in enumerate(items):
        where = f"input[{position}]"
        if not isinstance(item, dict):
            raise wrong_type(where, "an object")
        kind = item.get("type") or "message"
        if kind == "message":
            message = _message(item, where)
            if message["role"] == "assistant":
                answer = message
                _think(message, reasoning, thoughts)
            else:
                answer = None
                reasoning.clear()
            messages.append(message)
        elif kind == "function_call":
            if answer is None:
                answer = {"role": "assistant", "content": None}
                messages.append(answer)
            _think(answer, reasoning, thoughts)
            answer.setdefault("tool_calls", []).append(_call(item, where))
        elif kind == "function_call_output":
            answer = None
            reasoning.clear()
            messages.append(_call_output(item, where))
        elif kind == "reasoning":
            reasoning += _reasoning(item, where)
        elif kind == "item_reference":
            raise unsupported(
                where,
                f"{where} is an item_reference, which points at a stored item: the proxy keeps "
                "none (it is stateless). Send the item itself.",
            )
        else:
            raise unsupported(
                f"{where}.type",
                f"{where} is a {kind!r} item, which cannot be sent to a chat completions model: "
                "input items may be messages, function_call, function_call_output and "
                "reasoning items",
            )
    for message, texts in thoughts.values():
        message["reasoning_content"] = "\n\n".join(texts)
    return messages


def _think(
    message: Message, reasoning: list[str], thoughts: dict[int, tuple[Message, list[str]]]
) -> None:
    if not reasoning:
        return
    entry = thoughts.get(id(message))
    if entry is None:
        message["reasoning_content"] = ""  # its place among the keys; joined at the end
        entry = thoughts[id(message)] = (message, [])
    entry[1].extend(reasoning)
    reasoning.clear()


def _message(item: dict[str, Any], where: str) -> Message:
    role = params.choice(item.get("role"), f"{where}.role", _ROLES)
    if role is None:
        raise params.missing(f"{where}.role")
    content = item.get("content")
    if role == "assistant":
        return _answer(content, f"{where}.content")
    chat_role = "user" if role == "user" else "system"
    if isinstance(content, str):
        return {"role": chat_role, "content": content}
    if not isinstance(content, list):
        raise wrong_type(f"{where}.content", "a string or an array of content parts")
    parts = [_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": chat_role, "content": parts[0]["text"]}
    return {"role": chat_role, "content": parts}


def _answer(content: object, where: str) -> Message:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise wrong_type(where, "a string or an array of content parts")
    texts: list[str] = []
    refusals: list[str] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if not isinstance(part, dict):
            raise wrong_type(at, "an object")
        kind = part.get("type")
        if kind in ("output_text", "input_text"):
            texts.append(params.text(part.get("text"), f"{at}.text", required=True) or "")
        elif kind == "refusal":
            refusals.append(params.text(part.get("refusal"), f"{at}.refusal", required=True) or "")
        else:
            raise params.invalid_value(f"{at}.type", "an assistant message has text and refusals")
    message: Message = {"role": "assistant", "content": "".join(texts) if texts else None}
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


def _part(part: object, where: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise wrong_type(where, "an object")
    kind = part.get("type")
    if kind == "input_text":
        return {
            "type": "text",
            "text": params.text(part.get("text"), f"{where}.text", required=True),
        }
    if kind == "input_image":
        if part.get("file_id") is not None:
            raise unsupported(
                f"{where}.file_id",
                f"{where}.file_id names an uploaded file: the proxy has no Files API. "
                "Send the image as image_url (a URL or a data: URL).",
            )
        url = params.text(part.get("image_url"), f"{where}.image_url", required=True)
        image: dict[str, Any] = {"url": url}
        detail = params.text(part.get("detail"), f"{where}.detail")
        if detail in _IMAGE_DETAILS:
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        for field in ("file_id", "file_url"):
            if part.get(field) is not None:
                raise unsupported(
                    f"{where}.{field}",
                    f"{where}.{field} cannot be sent to a chat completions model "
                    "(the proxy has no Files API): send the file's content as file_data.",
                )
        data = params.text(part.get("file_data"), f"{where}.file_data", required=True)
        file: dict[str, Any] = {"file_data": data}
        filename = params.text(part.get("filename"), f"{where}.filename")
        if filename is not None:
            file["filename"] = filename
        return {"type": "file", "file": file}
    raise params.invalid_value(
        f"{where}.type", "must be 'input_text', 'input_image' or 'input_file'"
    )


def _call(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = params.text(item.get("call_id"), f"{where}.call_id", required=True)
    name = params.text(item.get("name"), f"{where}.name", required=True)
    arguments = params.text(item.get("arguments"), f"{where}.arguments", required=True)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _call_output(item: dict[str, Any], where: str) -> Message:
    call_id = params.text(item.get("call_id"), f"{where}.call_id", required=True)
    output = item.get("output")
    if isinstance(output, list):
        texts = []
        for i, part in enumerate(output):
            translated = _part(part, f"{where}.output[{i}]")
            if translated["type"] != "text":
                raise unsupported(
                    f"{where}.output[{i}]",
                    f"{where}.output[{i}]: a chat tool message holds text only, not images "
                    "or files",
                )
            texts.append(translated["text"])
        output = "".join(texts)
    elif not isinstance(output, str):
        raise wrong_type(f"{where}.output", "a string or an array of content parts")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _reasoning(item: dict[str, Any], where: str) -> list[str]:
    texts: list[str] = []
    for key, part_type in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = params.array(item.get(key), f"{where}.{key}") or []
        for i, part in enumerate(parts):
            if not isinstance(part, dict) or part.get("type") != part_type:
                raise wrong_type(f"{where}.{key}[{i}]", f"a {part_type} part")
            text = params.text(part.get("text"), f"{where}.{key}[{i}].text", required=True)
            if text:
                texts.append(text)
        if texts:
            return texts  # the reasoning itself when there is any, else its summary
    return texts
