"""The package's folders are its layers, and imports point down only (issue 36):

    ops        the server and supervisor, the CLI, metrics exposition, the access log
    http       the upstream client, the relay, the handlers, the app
    normalize  the normalizers and the upstream dialects (pure)
    core       configuration, errors, auth, routing, usage, metering, the request model (pure)

Team limits live in a folder of their own in each layer they touch (``core/limits/``,
``http/limits/``, ``ops/limits/``), and nowhere else.

A module may import its own layer and those below it; the pure layers import neither aiohttp
nor asyncio (nor any other I/O library). The emulator is a tool of its own beside them: it
imports nothing of theirs but the wire codecs it must write as the providers do (AWS's event
stream frames, issue 59), and only the CLI (ops) starts it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from proxy.core.config import DIALECTS as CONFIGURED
from proxy.normalize.dialects import DIALECTS

PACKAGE = Path(__file__).resolve().parent.parent / "proxy"
LAYERS = ("core", "normalize", "http", "ops")
PURE = frozenset({"core", "normalize"})
# Pure encoders of a provider's wire format, shared by the proxy and the emulator.
EMULATOR_MAY_IMPORT = frozenset({"proxy.core.eventstream"})
IO = frozenset({"aiohttp", "asyncio", "uvloop", "httptools", "socket", "ssl", "selectors"})


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "proxy" else None


def layer_violations(root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) == 1:
            continue  # proxy/__init__.py and __main__.py, above every layer
        own = relative.parts[0]
        for line, module in _imports(path):
            where = f"{relative}:{line}: {module}"
            target = _layer(module)
            if own == "emulator":
                if target not in (None, "emulator") and module not in EMULATOR_MAY_IMPORT:
                    found.append(f"{where} (the emulator imports no layer)")
                continue
            if own not in LAYERS:
                found.append(f"{relative}: in no layer")
                break
            if target == "emulator":
                if own != "ops":  # the CLI runs it (``llm-proxy emulator``, ``demo``)
                    found.append(f"{where} (a layer imports the emulator)")
            elif target is not None and target in LAYERS:
                if LAYERS.index(target) > LAYERS.index(own):
                    found.append(f"{where} (up from {own})")
            elif target is not None:
                found.append(f"{where} (a module outside the layers)")
            if own in PURE and module.partition(".")[0] in IO:
                found.append(f"{where} (I/O in the pure {own})")
    return found


def test_imports_point_down_only() -> None:
    assert layer_violations(PACKAGE) == []


@pytest.mark.parametrize(
    ("path", "source", "finding"),
    [
        ("ops/metrics.py", "from proxy.http.app import Gateway\n", None),
        ("http/relay.py", "from proxy.ops.metrics import ProxyMetrics\n", "up from http"),
        ("core/metering.py", "from proxy.normalize.tables import FIXES\n", "up from core"),
        ("core/config.py", "import asyncio\n", "I/O in the pure core"),
        ("normalize/stream.py", "from aiohttp import web\n", "I/O in the pure normalize"),
        ("emulator/server.py", "from proxy.core.sse import Event\n", "the emulator imports"),
        ("http/app.py", "from proxy.emulator import server\n", "a layer imports the emulator"),
        ("ops/cli.py", "from proxy.emulator import server\n", None),
    ],
)
def test_the_check_finds_each_kind_of_violation(
    tmp_path: Path, path: str, source: str, finding: str | None
) -> None:
    module = tmp_path / path
    module.parent.mkdir(parents=True)
    module.write_text(source)
    found = layer_violations(tmp_path)
    if finding is None:
        assert found == []
    else:
        assert len(found) == 1 and finding in found[0], found


def test_every_configured_dialect_has_its_module_and_no_other() -> None:
    assert set(DIALECTS) == CONFIGURED
    assert all(name == dialect.name for name, dialect in DIALECTS.items())


def test_provider_knowledge_lives_in_the_dialects_alone() -> None:
    """A dialect's name (or its paths) written anywhere but its own module and the configuration's
    vocabulary would be a provider's particulars outside ``proxy/normalize/dialects``."""
    marks = {
        "friendli-2024",
        "maritaca-inference",
        "/chat/inference",
        "/v1/messages",
        "GenerateContent",
        "/v2/chat",
        "/api/chat",
        "/generate_stream",
        "x-goog-api-key",
    }
    allowed = {PACKAGE / "core" / "config.py"}
    # Anthropic's Messages API is also a face of the proxy's own (docs/anthropic-face.md): its
    # path is the client's there, in the face, its HTTP handlers and the demo's text.
    face = {PACKAGE / "http" / "faces.py", PACKAGE / "http" / "messages.py"}
    face.add(PACKAGE / "ops" / "cli.py")
    found = [
        f"{path.relative_to(PACKAGE)}: {mark}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in allowed and "dialects" not in path.parts and "emulator" not in path.parts
        for mark in marks
        if mark in path.read_text(encoding="utf-8")
        and not (mark == "/v1/messages" and (path in face or "faces" in path.parts))
    ]
    assert found == []


# Words that, in a module's name, say it is about team limits (and so belongs in limits/).
LIMITS_WORDS = ("limit", "ledger", "tally", "prefetch", "redis", "resp", "store", "lua")


def test_limits_live_in_a_folder_of_their_own_in_each_layer() -> None:
    for layer in ("core", "http", "ops"):
        assert (PACKAGE / layer / "limits" / "__init__.py").is_file(), layer
    stray = [
        str(path.relative_to(PACKAGE))
        for layer in LAYERS
        for path in sorted((PACKAGE / layer).glob("*.py"))
        if any(word in path.stem for word in LIMITS_WORDS)
    ]
    assert stray == []


def test_http_holds_the_client_the_relay_and_the_handlers() -> None:
    modules = {path.stem for path in (PACKAGE / "http").glob("*.py")} - {"__init__"}
    client = {"connection", "pool", "upstream", "deadline"}
    relay = {"relay", "pipe", "reply", "batch"}
    handlers = {"app", "completion", "admin", "state", "faces", "messages"}
    assert modules <= client | relay | handlers, modules - (client | relay | handlers)
