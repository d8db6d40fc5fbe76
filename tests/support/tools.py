"""External programs some tests need (Debian's packages: prometheus and promtool from
prometheus, redis-server from redis-server).

Outside CI a missing program skips the test with a message; in CI (where .ci/run installs the
package) it fails it, so that a broken install step can never pass as a skip.
"""

from __future__ import annotations

import os
import shutil

import pytest


def required_program(name: str, package: str = "prometheus") -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing in CI (.ci/run installs Debian's {package})")
        pytest.skip(f"{name} is not installed (Debian package {package}); CI installs it")
    return found


def promtool() -> str:
    return required_program("promtool")
