"""A reload and the response cache: its settings apply at once, its backend only with a restart,
which the reload says."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from proxy.core.config import load_config
from proxy.http.state import Runtime, State
from proxy.ops.server import reload_config

BASE = {
    "providers": {"p": {"base_url": "https://p.example/v1"}},
    "models": {"m": {"provider": "p", "model": "up"}},
    "teams": {"t": {"keys": ["tk-one-1"], "models": ["*"]}},
    "state": {"redis": "redis://127.0.0.1:1/0"},
}


def write(path: Path, **extra: object) -> Path:
    path.write_text(yaml.safe_dump({**BASE, **extra}))
    return path


@pytest.mark.parametrize(
    ("before", "after", "warned"),
    [
        ({"ttl_seconds": 60}, {"ttl_seconds": 120}, False),
        (None, {}, True),
        ({}, None, True),
        ({}, {"backend": "redis"}, True),
    ],
)
def test_a_backend_change_takes_a_restart(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    before: dict[str, object] | None,
    after: dict[str, object] | None,
    warned: bool,
) -> None:
    first = write(tmp_path / "a.yaml", **({} if before is None else {"cache": before}))
    state = State(Runtime.from_config(load_config(first)))
    second = write(tmp_path / "b.yaml", **({} if after is None else {"cache": after}))
    with caplog.at_level(logging.WARNING):
        assert reload_config(state, second)
    said = [r.getMessage() for r in caplog.records if "restart" in r.getMessage()]
    assert bool(said) is warned, said
    if warned:
        assert "cache.backend" in said[0]
    assert state.runtime.config.cache == load_config(second).cache
