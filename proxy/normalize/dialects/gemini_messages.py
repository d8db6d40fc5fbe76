"""The Gemini request's ``systemInstruction`` and ``contents`` for an OpenAI chat request's
messages (sans-IO): roles, content parts and media, tool calls and their responses.

Shapes from Google's reference (https://ai.google.dev/api/generate-content).
"""

from __future__ import annotations

import base64
import urllib.parse
from typing import Any, Final

import orjson

from proxy.normalize.dialects.gemini_config import API
from proxy.normalize.dialects.native_messages import role_error, text_of, tool_call_id
from proxy.normalize.dialects.native_request import invalid, unsupported, wrong_type

# Gemini 3 answers 400 when the first functionCall of a step in the current turn comes back
# without its thoughtSignature, which an OpenAI client never has; Google documents this value
# for history the model did not produce (https://ai.google.dev/gemini-api/docs/thought-signatures).
SKIP_SIGNATURE: Final = "skip_thought_signature_validator"
_AUDIO_TYPES: Final = {"wav": "audio/wav", "mp3": "audio/mp3"}
# Gemini fetches an http(s) URL itself; its fileData.mimeType is optional, given when known.
_FILE_TYPES: Final = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "heic": "image/heic",
    "heif": "image/heif",
    "pdf": "application/pdf",
}


def translate_messages(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(systemInstruction parts, contents). Consecutive turns of one role share a content:
    Gemini wants the responses to one step's parallel calls together."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool_call_id -> function name, from the calls seen so far
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role")
        if role in ("system", "developer"):
            system += _text_parts(message.get("content"), where)
            continue
        if role == "user":
            native, parts = "user", _user_parts(message.get("content"), where)
        elif role == "assistant":
            native, parts = "model", _model_parts(message, where, names)
        elif role == "tool":
            native, parts = "user", [_function_response(message, where, names)]
        else:
            raise role_error(role, where, API)
        if not parts:
            continue
        if contents and contents[-1]["role"] == native:
            contents[-1]["parts"] += parts
        else:
            contents.append({"role": native, "parts": parts})
    if not contents:
        raise invalid("messages", "Gemini needs at least one user or assistant message")
    for content in contents:
        calls = [part for part in content["parts"] if "functionCall" in part]
        if calls and "thoughtSignature" not in calls[0]:
            calls[0]["thoughtSignature"] = SKIP_SIGNATURE
    return system, contents


def _text_parts(content: object, where: str) -> list[dict[str, Any]]:
    text = text_of(content, f"{where}.content", API)
    return [{"text": text}] if text else []


def _user_parts(content: object, where: str) -> list[dict[str, Any]]:
    # Empty text is left out: Gemini refuses an empty text part.
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if not isinstance(content, list):
        raise wrong_type(f"{where}.content", "a string or an array of content parts")
    parts = []
    for j, part in enumerate(content):
        param = f"{where}.content[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(param, "an object")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise wrong_type(f"{param}.text", "a string")
            if text:
                parts.append({"text": text})
        elif kind == "image_url":
            parts.append(_image(part.get("image_url"), f"{param}.image_url"))
        elif kind == "input_audio":
            parts.append(_audio(part.get("input_audio"), f"{param}.input_audio"))
        elif kind == "file":
            parts.append(_file(part.get("file"), f"{param}.file"))
        else:
            raise unsupported(f"{param}.type", API, f"it takes no {kind!r} part here")
    return parts


def _model_parts(message: dict[str, Any], where: str, names: dict[str, str]) -> list[Any]:
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            # An assistant's parts are text or refusal; a refusal is what the model said.
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "refusal"):
                raise unsupported(f"{where}.content[{j}].type", API, f"it takes no {kind!r} part")
            text = part.get(kind)
            if not isinstance(text, str):
                raise wrong_type(f"{where}.content[{j}].{kind}", "a string")
            if text:
                parts.append({"text": text})
    elif isinstance(content, str):
        if content:
            parts.append({"text": content})
    elif content is not None:
        raise wrong_type(f"{where}.content", "a string or an array of text parts")
    if message.get("audio") is not None:
        raise unsupported(f"{where}.audio", API, "it cannot be given OpenAI's stored audio")
    calls = message.get("tool_calls")
    if calls is None:
        return parts
    if not isinstance(calls, list):
        raise wrong_type(f"{where}.tool_calls", "an array")
    for j, call in enumerate(calls):
        param = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise wrong_type(param, "an object")
        if call.get("type", "function") != "function":
            raise unsupported(f"{param}.type", API, "it calls functions only")
        function = call.get("function")
        if not isinstance(function, dict):
            raise wrong_type(f"{param}.function", "an object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise wrong_type(f"{param}.function.name", "a non-empty string")
        call_part: dict[str, Any] = {
            "functionCall": {
                "name": name,
                "args": _arguments(function.get("arguments"), f"{param}.function.arguments"),
            }
        }
        signature = _signature(call)
        if signature is not None:
            call_part["thoughtSignature"] = signature
        call_id = call.get("id")
        if isinstance(call_id, str) and call_id:
            names[call_id] = name
        parts.append(call_part)
    return parts


def _signature(call: dict[str, Any]) -> str | None:
    """The signature a client kept where Google's own OpenAI layer puts it
    (``extra_content.google.thought_signature``), if it did."""
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) and signature else None


def _arguments(value: object, param: str) -> dict[str, Any]:
    """functionCall.args is an object; OpenAI's arguments are its JSON text."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise wrong_type(param, "a string of JSON")
    if not value.strip():
        return {}
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise invalid(param, "is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise invalid(param, "must be a JSON object")
    return parsed


def _function_response(
    message: dict[str, Any], where: str, names: dict[str, str]
) -> dict[str, Any]:
    call_id = tool_call_id(message, where)
    name = names.get(call_id)
    if name is None:
        # Gemini matches a response to its call by the function's name.
        raise invalid(f"{where}.tool_call_id", f"no earlier assistant tool call has id {call_id!r}")
    text = text_of(message.get("content"), f"{where}.content", API)
    # response must be an object; Google reads its "output" key as the function's output.
    return {"functionResponse": {"name": name, "response": {"output": text}}}


# -- media ------------------------------------------------------------------------------------


def _image(image: object, param: str) -> dict[str, Any]:
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise wrong_type(f"{param}.url", "a string")
    if url[:5].lower() == "data:":
        return {"inlineData": _data_url(url, f"{param}.url")}
    split = urllib.parse.urlsplit(url)
    if split.scheme.lower() not in ("http", "https") or not split.netloc:
        raise invalid(f"{param}.url", "must be an http(s) URL or a data: URL")
    # Since January 2026 the Gemini API fetches public and signed URLs itself.
    file: dict[str, Any] = {"fileUri": url}
    mime = _FILE_TYPES.get(split.path.rpartition(".")[2].lower())
    if mime is not None:
        file["mimeType"] = mime
    return {"fileData": file}


def _data_url(url: str, param: str) -> dict[str, Any]:
    """inlineData from an RFC 2397 ``data:`` URL (base64 or percent-encoded)."""
    header, comma, data = url[5:].partition(",")
    if not comma:
        raise invalid(param, "is not a valid data: URL")
    fields = header.split(";")
    mime = fields[0].strip() or "text/plain"
    if any(field.strip().lower() == "base64" for field in fields[1:]):
        return {"mimeType": mime, "data": data.strip()}
    raw = urllib.parse.unquote_to_bytes(data)
    return {"mimeType": mime, "data": base64.b64encode(raw).decode("ascii")}


def _audio(audio: object, param: str) -> dict[str, Any]:
    if not isinstance(audio, dict):
        raise wrong_type(param, "an object")
    data = audio.get("data")
    if not isinstance(data, str):
        raise wrong_type(f"{param}.data", "a base64 string")
    mime = _AUDIO_TYPES.get(str(audio.get("format")))
    if mime is None:
        raise invalid(f"{param}.format", "must be wav or mp3")
    return {"inlineData": {"mimeType": mime, "data": data}}


def _file(file: object, param: str) -> dict[str, Any]:
    if not isinstance(file, dict):
        raise wrong_type(param, "an object")
    data = file.get("file_data")
    if data is None:
        if file.get("file_id") is not None:
            raise unsupported(f"{param}.file_id", API, "it cannot read OpenAI's uploaded files")
        raise wrong_type(f"{param}.file_data", "a string")
    if not isinstance(data, str):
        raise wrong_type(f"{param}.file_data", "a string")
    if data[:5].lower() == "data:":
        return {"inlineData": _data_url(data, f"{param}.file_data")}
    # Bare base64: its type is the file name's.
    filename = file.get("filename")
    extension = filename.rpartition(".")[2].lower() if isinstance(filename, str) else ""
    mime = _FILE_TYPES.get(extension)
    if mime is None:
        raise invalid(f"{param}.file_data", "give a data: URL, or a filename that tells its type")
    return {"inlineData": {"mimeType": mime, "data": data}}
