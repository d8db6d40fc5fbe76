from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import Servers, running_servers
from tests.support.replay import goldens, recordings

DIALECT_PROVIDER = {
    "openai": "emu",
    "friendli-2024": "emu-friendli-2024",
    "maritaca-inference": "emu-maritaca",
    "anthropic": "emu-anthropic",
    "gemini": "emu-gemini",
    "cohere": "emu-cohere",
    "ollama": "emu-ollama",
    "tgi": "emu-tgi",
    "bedrock": "emu-bedrock",
    # Until the emulator serves Vertex's paths with its token check, Vertex's fixtures go
    # through the providers whose events they are (the same adapters, vertex.py).
    "vertex_google": "emu-gemini",
    "vertex_anthropic": "emu-anthropic",
}


def golden_models() -> dict[str, Any]:
    """One model per golden fixture, named after it; the emulator serves the file by name."""
    return {
        golden.name: {
            "provider": DIALECT_PROVIDER[golden.data["dialect"]],
            "model": golden.data["fixture"],
        }
        for golden in goldens()
        # The TCP-splits fixture is a list of socket reads: the normalizer tests replay it.
        if golden.name != "sse-quirks.tcp-splits.json"
    }


SCENARIO_MODELS: dict[str, Any] = {
    "gpt-4o": {"provider": "emu", "model": "openai"},
    "llama-3.1-8b": {"provider": "emu", "model": "friendli"},
    "sabia-4": {"provider": "emu", "model": "maritaca"},
    "azure-gpt": {"provider": "emu-azure", "model": "azure.chat.stream.model-router.sse"},
    "down-model": {"provider": "down", "model": "anything"},
    "hang-model": {"provider": "emu-fast", "model": "openai@hang"},
    "stall-model": {"provider": "emu-fast", "model": "openai@stall-after=600"},
    "status-500": {"provider": "emu", "model": "openai@status=500"},
    "status-429": {"provider": "emu", "model": "openai@status=429"},
    "upstream-400": {"provider": "emu", "model": "openai.error.json"},
    "html-502": {"provider": "emu", "model": "openai@html=502"},
    "reset-model": {"provider": "emu", "model": "openai@reset-after=600"},
    "garbage-model": {"provider": "emu", "model": "openai@garbage"},
    "not-object": {"provider": "emu", "model": "openai@not-object"},
    "wrong-type": {"provider": "emu", "model": "openai@wrong-type"},
}


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every fixture, shared and our own, in one folder the emulator serves."""
    return recordings(tmp_path_factory.mktemp("recordings"))


@pytest.fixture(scope="session")
def servers(fixture_dir: Path) -> Iterator[Servers]:
    with running_servers(fixture_dir) as running:
        yield running


@pytest.fixture(scope="session")
def proxy_url(servers: Servers) -> str:
    """The base URL (…/v1) of a proxy serving every golden fixture and the scenario models."""
    url, _ = servers.start_proxy({**golden_models(), **SCENARIO_MODELS})
    return url
