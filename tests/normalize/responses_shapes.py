"""Writes proxy/normalize/responses/shapes.py: the keys every Responses API object may carry.

The proxy reads no schema at run time, so the passthrough's strict-keys walker works from a
table in code; this derives it from tests/spec/openai-schemas.json, and
tests/normalize/test_responses_passthrough.py fails when the two differ. After the spec
changes: ``.venv/bin/python -m tests.normalize.responses_shapes`` (then ``ruff format``).

The reduction follows tests/support/schema.py's strict-keys rule: ``$ref`` and ``allOf`` merge their
properties; the branches of ``anyOf``/``oneOf`` are told apart by their ``type`` property's
values, and branches that share a value (or have no ``type``) have their keys merged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.schema import SPEC_PATH

TARGET = Path(__file__).resolve().parents[2] / "proxy" / "normalize" / "responses" / "shapes.py"
ROOTS = ("Response", "ResponseStreamEvent")
FREE = "*"  # a value whose keys nothing constrains
NO_TYPE = "-"  # a union member's key for an object without "type"


@dataclass(frozen=True)
class Spec:
    """What a value may be: an object of shape ``obj`` (None: none; FREE), or an array whose
    items are ``item``."""

    obj: str | None = None
    item: Spec | None = None


@dataclass
class Obj:
    props: dict[str, Spec] = field(default_factory=dict)
    extra: Spec | None = None  # additionalProperties' schema; Spec(FREE) for true
    types: frozenset[str] | None = None  # the "type" property's values, None: no such property
    typed: bool = False  # "type" is required


@dataclass
class Union:
    members: dict[str, str] = field(default_factory=dict)  # type value -> object shape


class Reducer:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = json.loads(SPEC_PATH.read_text())["$defs"]
        self.shapes: dict[str, Obj | Union] = {}
        self.specs: dict[str, Spec] = {}

    # -- schema nodes -> specs ---------------------------------------------------------

    def of_def(self, name: str) -> Spec:
        if name in self.specs:
            return self.specs[name]
        self.specs[name] = Spec(name)  # a cycle comes back through the name
        self.shapes[name] = Obj()
        spec = self.of_node(self.defs[name], name)
        self.specs[name] = spec
        if spec.obj == name:
            return spec
        # Not an object of its own (an array, a scalar, a union of other shapes): the def
        # stands for what it reduces to.
        if spec.obj in (None, FREE):
            del self.shapes[name]
        elif spec.obj in self.defs:
            del self.shapes[name]  # another def's name says it
        else:
            # A union made here, or a merge: the def's own name is the shorter one.
            self.shapes[name] = self.shapes[spec.obj]
            spec = self.specs[name] = Spec(name, spec.item)
        return spec

    def of_node(self, node: Any, name: str) -> Spec:
        if node is True or node == {}:
            return Spec(FREE, Spec(FREE))
        if not isinstance(node, dict):
            return Spec()
        parts: list[Spec] = []
        if "$ref" in node:
            parts.append(self.of_def(node["$ref"].rsplit("/", 1)[-1]))
        for i, branch in enumerate(node.get("allOf", ())):
            parts.append(self.of_node(branch, f"{name}.{i}"))
        alternatives = [
            self.of_node(branch, f"{name}.{i}")
            for keyword in ("anyOf", "oneOf")
            for i, branch in enumerate(node.get(keyword, ()))
        ]
        if alternatives:
            parts.append(self.either(alternatives, f"{name}.or"))
        own = self.own(node, f"{name}.own" if parts else name, bare=not parts)
        if own is not None:
            parts.append(own)
        if not parts:
            return Spec()
        if len(parts) == 1:
            return parts[0]
        return self.every(parts, name)

    def every(self, specs: list[Spec], name: str) -> Spec:
        """allOf (or a $ref beside properties): every part's keys apply, in one shape."""
        objs = [s.obj for s in specs if s.obj is not None]
        items = [s.item for s in specs if s.item is not None]
        item = items[0] if items else None
        if FREE in objs:
            return Spec(FREE, item)
        if len(objs) <= 1:
            return Spec(objs[0] if objs else None, item)
        assert all(isinstance(self.shapes[o], Obj) for o in objs), (name, objs)
        self.shapes.setdefault(name, Obj())
        self.merge_into(name, objs)
        return Spec(name, item)

    def own(self, node: dict[str, Any], name: str, *, bare: bool) -> Spec | None:
        """The node's own object or array schema, if it has one."""
        types = node.get("type")
        types = types if isinstance(types, list) else [types]
        item = None
        if "array" in types or "items" in node:
            item = self.of_node(node.get("items", True), f"{name}.item")
        has_object = "properties" in node or "additionalProperties" in node
        if not has_object and "object" in types:
            # A bare {"type": "object"} beside a $ref or a oneOf adds nothing; alone, it
            # allows no key at all (tests/support/schema.py), like an object without properties.
            has_object = bare
        if not has_object:
            return None if item is None else Spec(None, item)
        shape = self.shapes.setdefault(name, Obj())
        assert isinstance(shape, Obj)
        for key, child in node.get("properties", {}).items():
            shape.props[key] = self.of_node(child, f"{name}.{key}")
        extra = node.get("additionalProperties")
        if extra is True or extra == {}:
            shape.extra = Spec(FREE, Spec(FREE))
        elif isinstance(extra, dict):
            shape.extra = self.of_node(extra, f"{name}.*")
        kind = node.get("properties", {}).get("type", {})
        values = kind.get("enum") or ([kind["const"]] if "const" in kind else None)
        if values is None and "anyOf" in kind:
            values = [v for b in kind["anyOf"] for v in b.get("enum", ())]
        if "type" in node.get("properties", {}):
            shape.types = frozenset(v for v in values or () if isinstance(v, str))
            shape.typed = "type" in node.get("required", ())
        return Spec(name, item)

    def properties(self, name: str) -> list[tuple[str, Any]]:
        """A def's properties with their schemas, through $ref and allOf."""
        node = self.defs[name]
        found: list[tuple[str, Any]] = []
        stack = [node]
        while stack:
            current = _resolve(self, stack.pop())
            found += list(current.get("properties", {}).items())
            stack += current.get("allOf", [])
        return found

    def nullable(self, node: Any) -> bool:
        node = _resolve(self, node)
        if not isinstance(node, dict) or node == {}:
            return True
        types = node.get("type")
        if types == "null" or (isinstance(types, list) and "null" in types):
            return True
        branches = [*node.get("anyOf", ()), *node.get("oneOf", ())]
        return any(self.nullable(branch) for branch in branches)

    # -- merging ------------------------------------------------------------------------

    def either(self, specs: list[Spec], name: str) -> Spec:
        objs = [s.obj for s in specs if s.obj is not None]
        items = [s.item for s in specs if s.item is not None]
        obj: str | None = None
        if FREE in objs:
            obj = FREE
        elif objs:
            obj = self.union(sorted(set(objs), key=objs.index), name)
        item: Spec | None = None
        if items:
            item = items[0] if len(set(items)) == 1 else self.either(items, f"{name}.item")
        return Spec(obj, item)

    def members(self, shape: str) -> dict[str, list[str]] | None:
        """Type value -> object shapes; None when an object has no "type" to tell it by."""
        found = self.shapes[shape]
        if isinstance(found, Union):
            return {value: [member] for value, member in found.members.items()}
        if found.types is None or not found.types:
            return None
        out = {value: [shape] for value in found.types}
        if not found.typed:
            out[NO_TYPE] = [shape]
        return out

    def union(self, names: list[str], name: str) -> str:
        if len(names) == 1:
            return names[0]
        tables = [self.members(n) for n in names]
        if any(t is None for t in tables):
            return self.merged(self.flatten(names))
        joined: dict[str, list[str]] = {}
        for table in tables:
            assert table is not None
            for value, members in table.items():
                for member in members:
                    joined.setdefault(value, [])
                    if member not in joined[value]:
                        joined[value].append(member)
        key = "|".join(names)
        if key not in self.shapes:
            self.shapes[key] = Union({v: self.merged(m) for v, m in sorted(joined.items())})
        return key

    def flatten(self, names: list[str]) -> list[str]:
        out: list[str] = []
        for n in names:
            found = self.shapes[n]
            parts = list(found.members.values()) if isinstance(found, Union) else [n]
            out += [p for p in parts if p not in out]
        return out

    def merged(self, names: list[str]) -> str:
        if len(names) == 1:
            return names[0]
        key = "+".join(names)
        if key not in self.shapes:
            self.shapes[key] = Obj()
            self.merge_into(key, names)
        return key

    def merge_into(self, key: str, names: list[str]) -> None:
        shape = self.shapes[key]
        assert isinstance(shape, Obj)
        for n in names:
            part = self.shapes[n]
            assert isinstance(part, Obj), (key, n)
            for prop, spec in part.props.items():
                previous = shape.props.get(prop)
                shape.props[prop] = spec if previous is None else self.either([previous, spec], key)
            if part.extra is not None:
                extra = shape.extra
                shape.extra = part.extra if extra is None else self.either([extra, part.extra], key)
            if part.types is not None:
                shape.types = part.types if shape.types is None else shape.types | part.types
                shape.typed = shape.typed or part.typed


def _resolve(reducer: Reducer, node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = reducer.defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def derive() -> tuple[str, frozenset[str]]:
    """``TABLE``'s text and ``NOT_NULL``, from the schema."""
    reducer = Reducer()
    shapes = reducer.shapes

    def encode(spec: Spec | None) -> str:
        if spec is None:
            return ""
        obj = "" if spec.obj in (None, FREE) else spec.obj
        shape = shapes.get(obj)
        free = isinstance(shape, Obj) and not shape.props and shape.extra is not None
        if free and isinstance(shape, Obj) and not encode(shape.extra):
            obj = ""  # any key, and nothing below to check: no shape to look up
        item = "" if spec.item is None else encode(spec.item)
        return obj + ("[" + item if item else "")

    reachable: list[str] = []

    def visit(text: str) -> None:
        for name in text.split("["):
            if name and name not in reachable:
                reachable.append(name)
                shape = shapes[name]
                if isinstance(shape, Union):
                    for member in shape.members.values():
                        visit(member)
                else:
                    for spec in [*shape.props.values(), shape.extra]:
                        visit(encode(spec))

    for root in ROOTS:
        visit(encode(reducer.of_def(root)))
    lines = []
    for name in sorted(reachable):
        shape = shapes[name]
        if isinstance(shape, Union):
            words = [f"{value}={member}" for value, member in shape.members.items()]
            lines.append(f"{name} | " + " ".join(words))
        else:
            words = [k + (f"={encode(s)}" if encode(s) else "") for k, s in shape.props.items()]
            if shape.extra is not None:
                words.append("*" + (f"={encode(shape.extra)}" if encode(shape.extra) else ""))
            lines.append(" ".join([f"{name}:", *words]))
    table = "\n" + "\n".join(wrap(line) for line in lines) + "\n"
    properties = reducer.properties("Response")
    return table, frozenset(key for key, node in properties if not reducer.nullable(node))


def render() -> str:
    table, not_null = derive()
    return TEMPLATE.format(
        not_null=", ".join(f'"{key}"' for key in sorted(not_null)), table=table.strip("\n")
    )


def wrap(line: str, width: int = 96) -> str:
    words = line.split(" ")
    out, current = [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            out.append(current)
            current = "    " + word
        else:
            current = f"{current} {word}" if current else word
    out.append(current)
    return "\n".join(out)


TEMPLATE = '''"""The keys each Responses API object may carry, from OpenAI's schema (generated).

Written by tests/normalize/responses_shapes.py from tests/spec/openai-schemas.json; edit that,
not this. Each line of ``TABLE`` is a shape: ``Name: key key=Spec ...`` for an object (``*`` for
the keys its additionalProperties allows), ``Name | value=Shape ...`` for a union told apart by
its ``type`` (``-`` for a member without one). A ``Spec`` names the shape of an object value
and, after ``[``, that of an array's items; a key without one is not checked further.
"""

from __future__ import annotations

from typing import Final

# The Response's properties that may not be null (OpenAI sends ``usage: null`` and
# ``user: null`` in Responses still in progress): a null one is left out.
NOT_NULL: Final = frozenset({{{not_null}}})

TABLE: Final = """
{table}
"""
'''


if __name__ == "__main__":
    TARGET.write_text(render())
