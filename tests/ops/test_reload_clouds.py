"""A reload and the clouds' identities: one that is unchanged is kept (its credentials stay
cached), and one the reload adds is read at once, in a thread, as a worker's start reads them,
rather than at its first request (where parsing a key would stall the loop)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from proxy.core.config import load_config
from proxy.http.state import Runtime, State
from proxy.ops.server import reload_config

pytest.importorskip("google.auth")  # the gcp extra's (pyproject.toml)


def write(path: Path, providers: dict[str, object]) -> Path:
    models = {f"m-{name}": {"provider": name, "model": "gemini"} for name in providers}
    raw = {"providers": providers, "models": models,
           "teams": {"t": {"keys": ["tk-one-1"], "models": ["*"]}}}  # fmt: skip
    path.write_text(yaml.safe_dump(raw))
    return path


def vertex(credentials: Path) -> dict[str, object]:
    return {"api": "vertex", "project": "my-project", "region": "us-east5",
            "credentials": str(credentials)}  # fmt: skip


async def test_a_reload_reads_the_identities_it_adds_and_keeps_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = write(tmp_path / "a.yaml", {"v1": vertex(tmp_path / "one.json")})
    state = State(Runtime.from_config(load_config(first)))
    kept = state.runtime.targets["v1"].signer
    second = write(
        tmp_path / "b.yaml",
        {"v1": vertex(tmp_path / "one.json"), "v2": vertex(tmp_path / "missing.json")},
    )
    with caplog.at_level(logging.WARNING, logger="proxy.cloud"):
        assert reload_config(state, second)
        assert state.warming is not None
        await state.warming
    assert state.runtime.targets["v1"].signer is kept
    said = [r.getMessage() for r in caplog.records]
    assert any(
        "Google credentials of provider 'v2' could not be read: FileNotFoundError" in m
        for m in said
    ), said
    assert not any("provider 'v1'" in m for m in said)
