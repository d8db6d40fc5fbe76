"""The build's one switch: ``LLM_PROXY_COMPILE=1`` compiles the hot modules with mypyc.

Everything else about the package is in pyproject.toml, the list of modules to compile included
(``[tool.llm-proxy.compile]``). Without the switch the build is pure Python, as an editable
install must be (a compiled module next to its source shadows every later edit of it). With it,
mypyc type-checks what it compiles against the installed dependencies, so build without
isolation, in an environment that has them and mypy:

    pip install mypy types-PyYAML 'setuptools>=77' .
    LLM_PROXY_COMPILE=1 pip install --no-build-isolation --no-deps --force-reinstall .
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def compiled_modules() -> list[str]:
    """The source files mypyc compiles, as pyproject.toml lists them."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        listed: list[str] = tomllib.load(file)["tool"]["llm-proxy"]["compile"]["modules"]
    return listed


def extensions() -> list[Extension]:
    if os.environ.get("LLM_PROXY_COMPILE", "") in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        raise SystemExit(
            "LLM_PROXY_COMPILE=1 needs mypy (and mypyc with it) where the package is built: "
            "pip install mypy types-PyYAML 'setuptools>=77', then build with pip install"
            " --no-build-isolation"
        ) from exc
    return list(mypycify(compiled_modules(), opt_level="3"))


setup(ext_modules=extensions())
