"""Strict validation of the proxy's output against OpenAI's published schemas.

``tests/spec/openai-schemas.json`` holds OpenAI's chat, completions, models and error
schemas as JSON Schema 2020-12 under ``$defs``. Two checks run on every object:

1. ordinary JSON Schema validation (Draft 2020-12; ``#/$defs/...`` references are resolved
   through a ``referencing`` registry), and
2. STRICT KEYS (docs/canonical-output.md section 1): at every depth an object may carry only the
   properties that the (sub)schemas applying to it define. ``$ref`` and ``allOf`` are
   followed; of ``anyOf``/``oneOf`` only the branches that the value validates against
   count, and the union of their properties is allowed. A schema with
   ``additionalProperties`` (other than ``false``) allows any key, checked against it.
   The one extension is a ``reasoning_content`` string on a chat ``delta``
   (``ChatCompletionStreamResponseDelta``) and ``message`` (``ChatCompletionResponseMessage``).

Both raise ``AssertionError`` whose message starts with the JSON path of the offence
(``$.choices[0].delta.reasoning: ...``), so they read well in pytest output.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

__all__ = [
    "COMPLETION_CHUNK",
    "EXTENSION_KEY",
    "SPEC_PATH",
    "validate",
    "validate_completion_chunk",
]

SPEC_PATH = Path(__file__).resolve().parents[1] / "spec" / "openai-schemas.json"

# The URI under which the schema document is registered; its internal "#/$defs/..." refs
# resolve against it.
_BASE_URI = "https://llm-proxy.invalid/openai-schemas.json"

# A locally derived definition (not OpenAI's): CreateCompletionResponse whose
# choices[].finish_reason may also be null, for streamed /v1/completions chunks.
COMPLETION_CHUNK = "CreateCompletionResponse.streamChunk"

EXTENSION_KEY = "reasoning_content"
_EXTENSION_HOSTS = frozenset(
    {"/$defs/ChatCompletionStreamResponseDelta", "/$defs/ChatCompletionResponseMessage"}
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --------------------------------------------------------------------------- loading


@functools.cache
def _document() -> dict[str, Any]:
    """The schema document, plus the derived completion-chunk definition."""
    doc: dict[str, Any] = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    chunk = copy.deepcopy(doc["$defs"]["CreateCompletionResponse"])
    finish = chunk["properties"]["choices"]["items"]["properties"]["finish_reason"]
    finish["type"] = ["string", "null"]
    finish["enum"] = [*finish["enum"], None]
    chunk["description"] = (
        "Derived locally (docs/canonical-output.md section 1): a streamed /v1/completions chunk, "
        "i.e. CreateCompletionResponse except that finish_reason is null until a choice's last "
        "chunk."
    )
    doc["$defs"][COMPLETION_CHUNK] = chunk
    return doc


@functools.cache
def _registry() -> Registry[Any]:
    resource: Resource[Any] = Resource.from_contents(_document(), default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource(_BASE_URI, resource)
    return registry


@functools.cache
def _validator(pointer: str) -> Draft202012Validator:
    """A validator for the subschema at ``pointer`` (a JSON pointer into the document)."""
    ref = f"{_BASE_URI}#{quote(pointer, safe='/~$')}"
    return Draft202012Validator({"$ref": ref}, registry=_registry())


def _def_pointer(name: str) -> str:
    if name not in _document()["$defs"]:
        raise KeyError(f"no $defs/{name} in {SPEC_PATH.name}")
    return f"/$defs/{_escape(name)}"


# --------------------------------------------------------------------------- pointers


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _node(pointer: str) -> Any:
    node: Any = _document()
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def _ref_pointer(ref: str) -> str:
    if not ref.startswith("#"):
        raise ValueError(f"only local $refs are supported, got {ref!r}")
    return ref[1:]


def _applicable(pointer: str, instance: Any) -> Iterator[str]:
    """Pointers of every subschema that applies to ``instance`` at ``pointer``.

    Follows ``$ref`` and ``allOf``; of ``anyOf``/``oneOf`` only the branches the instance
    is valid against.
    """
    node = _node(pointer)
    yield pointer
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        yield from _applicable(_ref_pointer(node["$ref"]), instance)
    for i, _ in enumerate(node.get("allOf", ())):
        yield from _applicable(f"{pointer}/allOf/{i}", instance)
    for keyword in ("anyOf", "oneOf"):
        for i, _ in enumerate(node.get(keyword, ())):
            branch = f"{pointer}/{keyword}/{i}"
            if _validator(branch).is_valid(instance):
                yield from _applicable(branch, instance)


# --------------------------------------------------------------------------- strict keys


def _child_path(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def _check_keys(value: Any, pointers: list[str], path: str) -> None:
    if isinstance(value, dict):
        _check_object(value, pointers, path)
    elif isinstance(value, list):
        items: list[str] = []
        for pointer in pointers:
            for applied in _applicable(pointer, value):
                node = _node(applied)
                if isinstance(node, dict) and isinstance(node.get("items"), dict):
                    items.append(f"{applied}/items")
        if items:
            for i, item in enumerate(value):
                _check_keys(item, items, f"{path}[{i}]")


def _check_object(value: dict[str, Any], pointers: list[str], path: str) -> None:
    properties: dict[str, list[str]] = {}
    additional: list[str] = []
    closed = False
    extension_host = False
    for pointer in pointers:
        for applied in _applicable(pointer, value):
            node = _node(applied)
            if node is True:
                return  # the `true` schema: anything goes
            if not isinstance(node, dict):
                continue
            extension_host = extension_host or applied in _EXTENSION_HOSTS
            types = node.get("type")
            if (
                "properties" in node
                or types == "object"
                or (isinstance(types, list) and "object" in types)
            ):
                closed = True
            for key in node.get("properties", {}):
                properties.setdefault(key, []).append(f"{applied}/properties/{_escape(key)}")
            extra = node.get("additionalProperties")
            if extra is True:
                return
            if isinstance(extra, dict):
                additional.append(f"{applied}/additionalProperties")
    if not closed and not additional:
        return  # no applicable schema describes an object (e.g. `{}`): unconstrained
    for key, child in value.items():
        child_path = _child_path(path, key)
        if key in properties:
            _check_keys(child, properties[key], child_path)
        elif additional:
            _check_keys(child, additional, child_path)
        elif key == EXTENSION_KEY and extension_host:
            if not isinstance(child, str):
                raise AssertionError(
                    f"{child_path}: the {EXTENSION_KEY!r} extension must be a string, got {child!r}"
                )
        else:
            raise AssertionError(
                f"{child_path}: unexpected key {key!r} (not a property of the schema at {path})"
            )


# --------------------------------------------------------------------------- API


def _validate_pointer(obj: object, pointer: str, name: str) -> None:
    error = best_match(_validator(pointer).iter_errors(obj))
    if error is not None:
        raise AssertionError(f"{error.json_path}: {error.message} (validating as {name})")
    _check_keys(obj, [pointer], "$")


def validate(obj: object, name: str) -> None:
    """Validate ``obj`` against ``$defs/<name>`` with strict keys; raise AssertionError.

    ``name`` is an OpenAI schema name such as ``CreateChatCompletionStreamResponse``,
    ``CreateChatCompletionResponse``, ``CreateCompletionResponse``, ``ErrorResponse`` or
    ``ListModelsResponse``.
    """
    _validate_pointer(obj, _def_pointer(name), name)


def validate_completion_chunk(obj: object) -> None:
    """Validate one streamed /v1/completions chunk (docs/canonical-output.md section 1).

    That is ``CreateCompletionResponse`` with strict keys, except that
    ``choices[].finish_reason`` may be null.
    """
    _validate_pointer(obj, _def_pointer(COMPLETION_CHUNK), COMPLETION_CHUNK)
