"""Prices and cost (proxy.core.prices), and the configuration's prices and prices_file."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from proxy.core.config import parse_config
from proxy.core.errors import ConfigError
from proxy.core.prices import Price, file_prices, price_for
from proxy.core.usage import Usage

BASE = """
providers:
  openai: {base_url: 'https://api.openai.com/v1'}
  claude: {base_url: 'https://api.anthropic.com', api: anthropic}
models:
  gpt-4o-mini: {provider: openai, model: gpt-4o-mini-2024-07-18}
  sonnet: {provider: claude, model: claude-sonnet-4-20250514}
  local: {provider: openai, model: llama-local}
teams:
  t: {keys: [tk-one-1], models: ['*']}
"""


def parse(extra: str = "", files: dict[str, bytes] | None = None) -> Any:
    raw = yaml.safe_load(BASE + extra)
    if files is None:
        return parse_config(raw, {})

    def read(name: str) -> bytes:
        if name not in files:
            raise FileNotFoundError(2, "No such file or directory", name)
        return files[name]

    return parse_config(raw, {}, read_file=read)


def problems(extra: str, files: dict[str, bytes] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(extra, files)
    return info.value.problems


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        # 1M uncached prompt tokens at 0.15, none cached, 1M completion at 0.60.
        (Usage(1_000_000, 1_000_000, 2_000_000), 0.75),
        # Cached prompt tokens at their own price, the rest at the input price.
        (Usage(1_000_000, 0, 1_000_000, cached_tokens=400_000), 0.6 * 0.15 + 0.4 * 0.075),
        # Reasoning tokens are completion tokens already: not priced twice.
        (Usage(0, 1_000_000, 1_000_000, reasoning_tokens=900_000), 0.60),
        (Usage(0, 0, 0), 0.0),
        # A cache count over the prompt (an upstream's mistake) prices no negative tokens.
        (Usage(10, 0, 10, cached_tokens=50), 10 * 0.075 / 1e6),
    ],
)
def test_cost(usage: Usage, expected: float) -> None:
    assert Price(0.15, 0.075, 0.60).cost(usage) == pytest.approx(expected)


def test_prices_by_client_model_name_per_deployment() -> None:
    config = parse("prices: {gpt-4o-mini: {input: 0.15, cached_input: 0.075, output: 0.6}}\n")
    assert config.prices == {
        ("gpt-4o-mini", "openai", "gpt-4o-mini-2024-07-18"): Price(0.15, 0.075, 0.6)
    }


def test_cached_input_defaults_to_the_input_price() -> None:
    config = parse("prices: {sonnet: {input: 3, output: 15}}\n")
    assert config.prices[("sonnet", "claude", "claude-sonnet-4-20250514")] == Price(3, 3, 15)


LITELLM: dict[str, Any] = {
    "sample_spec": {"input_cost_per_token": "0.0", "mode": "chat"},  # LiteLLM's own template
    "gpt-4o-mini-2024-07-18": {
        "input_cost_per_token": 1.5e-07,
        "output_cost_per_token": 6e-07,
        "cache_read_input_token_cost": 7.5e-08,
    },
    "anthropic/claude-sonnet-4-20250514": {
        "input_cost_per_token": 3e-06,
        "output_cost_per_token": 1.5e-05,
    },
    "dall-e-3": {"output_cost_per_image": 0.04},  # priced otherwise: left out
    "broken": "not an entry",
}


def test_a_litellm_prices_file_prices_the_models_prices_leaves_out() -> None:
    files = {"prices.json": orjson.dumps(LITELLM)}
    config = parse("prices: {sonnet: {input: 2, output: 10}}\nprices_file: prices.json\n", files)
    assert config.prices[("gpt-4o-mini", "openai", "gpt-4o-mini-2024-07-18")] == Price(
        pytest.approx(0.15), pytest.approx(0.075), pytest.approx(0.6)
    )
    # prices wins over the file; a model in neither has no price (unknown, not free).
    assert config.prices[("sonnet", "claude", "claude-sonnet-4-20250514")] == Price(2, 2, 10)
    assert ("local", "openai", "llama-local") not in config.prices


def test_the_file_is_found_by_litellm_s_provider_prefix() -> None:
    files = {"p.json": orjson.dumps(LITELLM)}
    price = parse("prices_file: p.json\n", files).prices[
        ("sonnet", "claude", "claude-sonnet-4-20250514")
    ]
    assert (price.input, price.output) == (pytest.approx(3.0), pytest.approx(15.0))


def test_price_lookup_order() -> None:
    explicit = {"m": Price(1, 1, 1)}
    from_file = {"m": Price(2, 2, 2), "up": Price(3, 3, 3), "gemini/up2": Price(4, 4, 4)}
    assert price_for(explicit, from_file, "m", "up", "openai") == Price(1, 1, 1)
    assert price_for({}, from_file, "m", "up", "openai") == Price(2, 2, 2)
    assert price_for({}, from_file, "x", "up", "openai") == Price(3, 3, 3)
    assert price_for({}, from_file, "x", "up2", "gemini") == Price(4, 4, 4)
    assert price_for({}, from_file, "x", "nope", "gemini") is None


def test_file_prices_takes_only_models_with_token_prices() -> None:
    found = file_prices(LITELLM)
    assert isinstance(found, dict)
    assert set(found) == {"gpt-4o-mini-2024-07-18", "anthropic/claude-sonnet-4-20250514"}
    assert file_prices([1, 2]) == "must hold a JSON object of models"


@pytest.mark.parametrize(
    ("extra", "files", "expected"),
    [
        (
            "prices: {sonnet: {input: -1, output: x, extra: 1}}\n",
            None,
            [
                "prices.sonnet.extra: unknown key",
                "prices.sonnet.input: must be a finite number, 0 or more",
                "prices.sonnet.output: must be a number of USD per million tokens",
            ],
        ),
        (
            "prices: {sonnet: {output: 1}}\n",
            None,
            ["prices.sonnet: required key 'input' is missing"],
        ),
        ("prices: [1]\n", None, ["prices: must be a mapping"]),
        # Finite, yet every cost of the model would overflow to inf or NaN (issue: prices).
        (
            "prices: {sonnet: {input: 1.7e+308, output: 1, cached_input: 10001}}\n",
            None,
            [
                "prices.sonnet.input: must be at most 10000 USD per million tokens",
                "prices.sonnet.cached_input: must be at most 10000 USD per million tokens",
            ],
        ),
        (
            "prices_file: p.json\n",
            {"p.json": b'{"m": {"input_cost_per_token": 1e303, "output_cost_per_token": 0}}'},
            ["prices_file: model 'm': a token price must be at most 10000 USD per million tokens"],
        ),
        ("prices_file: p.json\n", {}, ["prices_file: cannot be read: No such file or directory"]),
        (
            "prices_file: p.json\n",
            None,
            ["prices_file: cannot be read here (a configuration parsed without its files)"],
        ),
        ("prices_file: p.json\n", {"p.json": b"{not json"}, ["prices_file: is not JSON"]),
        (
            "prices_file: p.json\n",
            {"p.json": b"[1]"},
            ["prices_file: must hold a JSON object of models"],
        ),
    ],
)
def test_bad_prices_are_config_errors_with_their_paths(
    extra: str, files: dict[str, bytes] | None, expected: list[str]
) -> None:
    assert problems(extra, files) == expected
