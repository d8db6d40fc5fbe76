"""The package uses only what its dependencies promise (issue 36): no attribute or module of a
dependency whose name starts with ``_``, no internal module of aiohttp, and no subclass of a
dependency's class that reads or sets that class's private state.

An AST scan of ``proxy/``. It knows which names are the package's own: a ``x._name`` is ours
when the package defines ``_name`` somewhere (a function, a class, an attribute it sets, a slot,
a field), and a dependency's otherwise. A subclass of a dependency's class may not touch a
``self._name`` that the base class (or one of its bases) uses itself.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "proxy"

# aiohttp's documented modules (its reference pages); every other submodule is internal.
AIOHTTP_PUBLIC = frozenset(
    {
        "aiohttp",
        "aiohttp.web",
        "aiohttp.abc",
        "aiohttp.hdrs",
        "aiohttp.typedefs",
        "aiohttp.resolver",
        "aiohttp.tracing",
        "aiohttp.client_exceptions",
        "aiohttp.web_exceptions",
    }
)


def _own_names(trees: list[ast.Module]) -> set[str]:
    own: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"_[a-z]\w*", node.value)
            ):
                own.add(node.value)  # a __slots__ entry, or a name given to getattr
    return own


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name → the dotted name it was imported as."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.partition(".")[0]] = (
                    alias.name if alias.asname else alias.name.partition(".")[0]
                )
    return imported


def _private_of(base: object) -> set[str]:
    """The ``self._name``s a dependency's class and its bases use (or declare, if compiled)."""
    names: set[str] = set()
    if not isinstance(base, type):
        return names
    for klass in inspect.getmro(base):
        if klass is object:
            continue
        try:
            names |= set(re.findall(r"self\.(_[a-z]\w*)", inspect.getsource(klass)))
        except (OSError, TypeError):
            names |= {name for name in vars(klass) if re.fullmatch(r"_[a-z]\w*", name)}
            names |= {n for n in getattr(klass, "__slots__", ()) if n.startswith("_")}
    return names


def _resolve(dotted: str) -> object | None:
    """What ``dotted`` names; None for an optional extra's that is not installed here (the
    run with every extra checks it)."""
    module, _, attribute = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError):
        pass
    try:
        return importlib.import_module(dotted)
    except ImportError:
        return None


def private_uses(sources: dict[str, str], package: str = "proxy") -> list[str]:
    """Every private use of a dependency in ``sources`` (path → Python source)."""
    trees = {path: ast.parse(source, path) for path, source in sources.items()}
    own = _own_names(list(trees.values()))
    found: list[str] = []
    for path, tree in trees.items():
        imported = _imports(tree)
        for node in ast.walk(tree):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
                modules += [
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and alias.name not in own
                ]
            for module in modules:
                if module.partition(".")[0] == package:
                    continue
                internal = any(re.fullmatch(r"_[a-z]\w*", part) for part in module.split(".")) or (
                    module.startswith("aiohttp.") and module not in AIOHTTP_PUBLIC
                )
                if internal:
                    found.append(f"{path}:{node.lineno}: import {module}")
            if (
                isinstance(node, ast.Attribute)
                and re.fullmatch(r"_[a-z]\w*", node.attr)
                and node.attr not in own
            ):
                found.append(f"{path}:{node.lineno}: .{node.attr}")
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            private: set[str] = set()
            for base in cls.bases:
                head, _, rest = ast.unparse(base).partition(".")
                origin = imported.get(head)
                if origin is None or origin.partition(".")[0] == package:
                    continue
                resolved = _resolve(f"{origin}.{rest}" if rest else origin)
                if resolved is not None:
                    private |= _private_of(resolved)
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr in private
                ):
                    found.append(f"{path}:{node.lineno}: self.{node.attr} (its base class's)")
    return sorted(set(found))


def test_the_package_uses_only_public_apis_of_its_dependencies() -> None:
    sources = {
        str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert len(sources) > 30
    assert private_uses(sources) == []


@pytest.mark.parametrize(
    ("source", "finding"),
    [
        ("import aiohttp.client_proto\n", "import aiohttp.client_proto"),
        ("from aiohttp.connector import Connection\n", "import aiohttp.connector"),
        ("from multidict._multidict import CIMultiDict\n", "import multidict._multidict"),
        ("def f(reader):\n    return reader._buffer\n", "._buffer"),
        (
            "from aiohttp import web\n"
            "class Reply(web.StreamResponse):\n"
            "    def f(self):\n"
            "        return self._headers\n",
            "self._headers (its base class's)",
        ),
    ],
)
def test_the_scan_finds_each_kind_of_private_use(source: str, finding: str) -> None:
    found = private_uses({"proxy/example.py": source})
    assert any(use.endswith(finding) for use in found), found


@pytest.mark.parametrize(
    "source",
    [
        # Our own private names, on our own objects.
        "class A:\n    __slots__ = ('_n',)\n    def f(self, other):\n        return other._n\n",
        "from aiohttp import web\nfrom aiohttp.abc import AbstractResolver\n",
        "import asyncio\nclass P(asyncio.Protocol):\n    def f(self):\n        self._mine = 1\n",
    ],
)
def test_the_scan_lets_public_and_own_names_be(source: str) -> None:
    assert private_uses({"proxy/example.py": source}) == []
