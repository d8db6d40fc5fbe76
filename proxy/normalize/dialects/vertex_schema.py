"""JSON Schema made acceptable to Vertex's ``Schema`` (sans-IO).

Vertex takes JSON Schema as it is in ``parametersJsonSchema`` and ``responseJsonSchema``, which
the translation uses. Where a request carries Google's own ``Schema`` instead (a client's
``generationConfig.responseSchema``, a declaration's ``parameters``), Vertex's reference
(https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/Schema) takes
``anyOf`` and ``additionalProperties`` but rejects the JSON Schema keywords it has no field for:
``$schema`` is dropped, and every ``$ref`` is replaced by what it points to, so that ``$defs``
(``definitions`` in draft 7) can go. Nothing else is touched.

A schema that refers to itself has no finite inlined form: it is refused with a 400 naming
where it came from, as is one nested or grown past a bound (inlining copies a definition at
each use, so a few lines of ``$defs`` can stand for millions of nodes).
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.errors import InvalidRequest

MAX_DEPTH: Final = 64
MAX_NODES: Final = 10_000

_DROPPED: Final = frozenset({"$schema", "$defs", "definitions"})
# Keywords whose value is one schema, a name -> schema map, or a list of schemas; any other
# keyword's value (enum, default, example, required, ...) is data, copied as it is.
_ONE: Final = frozenset(
    {
        "items",
        "additionalProperties",
        "additionalItems",
        "not",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_MAP: Final = frozenset({"properties", "patternProperties", "dependentSchemas"})
_LIST: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems", "items"})


def _refused(where: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{where}': {why}", param=where, code="invalid_value")


class _Inliner:
    __slots__ = ("_expanding", "_nodes", "_root", "_where")

    def __init__(self, root: dict[str, Any], where: str) -> None:
        self._root = root
        self._where = where
        self._expanding: list[str] = []
        self._nodes = 0

    def schema(self, node: object, depth: int) -> object:
        if not isinstance(node, dict):
            return node  # a boolean schema, or something Vertex's own 400 will name
        if depth > MAX_DEPTH:
            raise _refused(self._where, f"the schema is nested deeper than {MAX_DEPTH} levels")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _refused(
                self._where, f"the schema, its $ref inlined, has over {MAX_NODES} subschemas"
            )
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._inline(ref, node, depth)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key in _MAP and isinstance(value, dict):
                out[key] = {name: self.schema(sub, depth + 1) for name, sub in value.items()}
            elif key in _LIST and isinstance(value, list):
                out[key] = [self.schema(sub, depth + 1) for sub in value]
            elif key in _ONE:
                out[key] = self.schema(value, depth + 1)
            else:
                out[key] = value
        return out

    def _inline(self, ref: str, node: dict[str, Any], depth: int) -> object:
        if ref in self._expanding:
            raise _refused(
                self._where,
                f"its $ref {ref!r} refers to itself, which Vertex's Schema cannot express; "
                "send the schema as JSON Schema (response_format, or the tool's parameters)",
            )
        target = self._resolve(ref)
        self._expanding.append(ref)
        inlined = self.schema(target, depth + 1)
        self._expanding.pop()
        # Keywords beside a $ref (a description, say) apply as well (JSON Schema 2020-12).
        siblings = self.schema({k: v for k, v in node.items() if k != "$ref"}, depth + 1)
        if isinstance(inlined, dict) and isinstance(siblings, dict):
            return {**inlined, **siblings}
        return inlined

    def _resolve(self, ref: str) -> object:
        """What a local JSON Pointer reference (RFC 6901, ``#/$defs/Name``) points to."""
        if not ref.startswith("#"):
            raise _refused(self._where, f"its $ref {ref!r} is not within the schema")
        node: object = self._root
        for token in ref[1:].split("/")[1:] if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise _refused(self._where, f"its $ref {ref!r} points to nothing")
        return node


def vertex_schema(schema: dict[str, Any], where: str) -> dict[str, Any]:
    """``schema`` for a field of Vertex's ``Schema`` type: ``$schema`` dropped, ``$ref``
    inlined, ``$defs``/``definitions`` gone. ``where`` names it in a refusal."""
    out = _Inliner(schema, where).schema(schema, 0)
    if not isinstance(out, dict):
        raise _refused(where, "its $ref points to no schema object")
    return out
