"""Ours as the Docker image runs it: the package with its hot modules compiled by mypyc.

``setup.py`` compiles the modules ``pyproject.toml`` lists when the build has
``LLM_PROXY_COMPILE=1``. A benchmark builds a copy of a checkout's package that way, in place
(each compiled module beside its source, which it shadows), and runs ours from the copy: the
checkout itself, an editable install's, stays pure Python for whoever edits it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

# What a build copies: the package, and what setup.py reads.
_FILES = ("pyproject.toml", "setup.py", "README.md")


def missing() -> str | None:
    """What this interpreter lacks to compile ours, if anything: mypy, the stubs it checks the
    package's imports with (as the project's ``mypy`` does), and a setuptools that reads
    pyproject.toml's license (77 or later)."""
    try:
        importlib.metadata.version("types-PyYAML")
        setuptools = importlib.metadata.version("setuptools")
        ready = (
            int(setuptools.split(".")[0]) >= 77 and importlib.util.find_spec("mypyc") is not None
        )
    except (importlib.metadata.PackageNotFoundError, ValueError):
        ready = False
    if not ready:
        return (
            f"compiling ours needs mypy, types-PyYAML and setuptools>=77 in {sys.prefix}:"
            f" {sys.executable} -m pip install mypy types-PyYAML 'setuptools>=77' (bash"
            " bench/setup.sh --python installs them); --pure measures the interpreted package"
        )
    return None


def listed(source: Path) -> list[str]:
    """The modules ``source``'s pyproject.toml has compiled; [] for a revision before that."""
    with (source / "pyproject.toml").open("rb") as file:
        tool = tomllib.load(file).get("tool", {})
    modules: list[str] = tool.get("llm-proxy", {}).get("compile", {}).get("modules", [])
    return modules


def build(source: Path, into: Path) -> Path:
    """A copy of ``source``'s package in ``into``, compiled in place; ``into``, to run from."""
    modules = listed(source)
    if not modules or not (source / "setup.py").exists():
        raise SystemExit(f"{source} has no compiled build (setup.py): measure it with --pure")
    into.mkdir(parents=True)
    # The links of the package (demo.yaml) are followed: the copy stands alone.
    shutil.copytree(
        source / "proxy", into / "proxy", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    for name in _FILES:
        shutil.copy2(source / name, into / name)
    done = subprocess.run(
        [sys.executable, "setup.py", "--quiet", "build_ext", "--inplace"],
        cwd=into,
        env={**os.environ, "LLM_PROXY_COMPILE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    built = {str(path.relative_to(into)) for path in (into / "proxy").rglob("*.so")}
    absent = [m for m in modules if not any(b.startswith(m[: -len(".py")] + ".") for b in built)]
    if done.returncode != 0 or absent:
        output = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"compiling {source}'s package failed (absent: {absent}):\n{output}")
    return into
