"""Models that each play one recording, and the golden each is held to: the tables of the
tests that drive client libraries against the proxy (test_native_sdk, test_responses_proxy,
test_client_libraries)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel

from tests.support.replay import GOLDEN

# model name -> (provider, the upstream model the emulator finds its recording by, the golden:
# a path under tests/golden without its .json)
Table = Mapping[str, tuple[str, str, str]]


class City(BaseModel):
    """The structured answer the contract fixtures for response_format hold."""

    city: str
    population: int


def models_config(table: Table) -> dict[str, Any]:
    return {name: {"provider": p, "model": m} for name, (p, m, _) in table.items()}


def golden_of(table: Table, model: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((GOLDEN / f"{table[model][2]}.json").read_bytes())
    return data
