"""The npm packages some tests run: Claude Code (``claude``) and Anthropic's TypeScript SDK.

``.ci/run`` installs them with npm under ``$NODE_TOOLS`` (default ``~/.cache/llm-proxy-node``),
outside the repository. Outside CI a missing one skips the test with a message; in CI it fails
it, so that a broken install step can never pass as a skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

INSTALL = 'npm install --prefix "${NODE_TOOLS:-$HOME/.cache/llm-proxy-node}" (see .ci/run)'


def node_tools() -> Path:
    """Where ``.ci/run`` installs the npm packages."""
    default = Path.home() / ".cache" / "llm-proxy-node"
    return Path(os.environ.get("NODE_TOOLS") or default)


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing in CI: .ci/run installs it")
    pytest.skip(f"{what} is not installed; install it with {INSTALL}")


def claude_binary() -> str:
    """Claude Code's ``claude``: ``$CLAUDE_BIN``, else the one ``.ci/run`` installs."""
    found = os.environ.get("CLAUDE_BIN") or str(node_tools() / "node_modules" / ".bin" / "claude")
    if not os.access(found, os.X_OK):
        _missing(f"Claude Code ({found})")
    return found


def node_with_package(package: str) -> tuple[str, Path]:
    """``node`` and the ``node_modules`` folder holding ``package`` (for ``NODE_PATH``)."""
    node = shutil.which("node")
    if node is None:
        _missing("node")
    modules = node_tools() / "node_modules"
    if not (modules / package / "package.json").exists():
        _missing(f"the npm package {package} ({modules})")
    return str(node), modules
