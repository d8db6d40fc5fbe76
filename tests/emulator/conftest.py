"""The emulator tests' fixtures: a client session, a served emulator, a folder of small
recordings, and the check that the emulator logs no errors."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import build_emulator_app
from tests.emulator.exchange import CRLF_STREAM


@pytest.fixture(autouse=True)
def _no_logged_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    # A fault must look broken to the client only: the emulator itself logs no tracebacks.
    yield
    # Servers are closed in teardown, before this fixture's own teardown.
    records = [r for when in ("setup", "call", "teardown") for r in caplog.get_records(when)]
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
async def emulator(aiohttp_server: AiohttpServer) -> TestServer:
    return await aiohttp_server(build_emulator_app())


@pytest.fixture
def recordings(tmp_path: Path) -> Path:
    (tmp_path / "crlf.chat.stream.sse").write_bytes(CRLF_STREAM)
    (tmp_path / "lines.chat.stream.ndjson").write_bytes(b'{"a":1}\n{"b":2}\r\n{"c":3}')
    (tmp_path / "three.chat.stream.sse").write_bytes(b"data: 1\n\ndata: 2\n\ndata: 3\n\n")
    (tmp_path / "m.chat.json").write_bytes(b'{"exact":true}')
    (tmp_path / "m.chat.json.completions.json").write_bytes(b'{"exact":false}')
    (tmp_path / "README.md").write_bytes(b"# not a recording\n")
    return tmp_path
