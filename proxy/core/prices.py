"""What tokens cost (sans-IO): the configuration's ``prices`` and ``prices_file``, and the cost
of a request's usage.

``prices`` are USD per million tokens by the model name clients use; ``prices_file`` is a file in
LiteLLM's ``model_prices_and_context_window.json`` format (USD per token, by provider model
name), for the models ``prices`` leaves out. A model with no price has no cost: it is counted as
unpriced, never as free (docs/cost.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from proxy.core.checker import Checker, Invalid
from proxy.core.usage import Usage

__all__ = ["PRICE_KEYS", "Price", "file_prices", "parse_prices", "price_for"]

PER_MILLION: Final = 1_000_000
PRICE_KEYS: Final = frozenset({"input", "cached_input", "output"})


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens: prompt tokens not read from a cache, cached ones, completion."""

    input: float
    cached_input: float
    output: float

    def cost(self, usage: Usage) -> float:
        """The USD a request's usage cost; reasoning tokens are completion tokens already."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        return (
            (usage.prompt_tokens - cached) * self.input
            + cached * self.cached_input
            + usage.completion_tokens * self.output
        ) / PER_MILLION


def _amount(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid("must be a number of USD per million tokens")
    if not math.isfinite(value) or value < 0:
        raise Invalid("must be a finite number, 0 or more")
    return float(value)


def parse_prices(ck: Checker, raw: object, path: str = "prices") -> dict[str, Price]:
    """The ``prices`` section: ``{model: {input, cached_input, output}}``; cached_input is
    the input price where it is not given (a provider that does not discount its cache)."""
    prices: dict[str, Price] = {}
    for name, value, item in ck.named(ck.mapping(raw, path) or {}, path):
        node = ck.mapping(value, item, PRICE_KEYS)
        if node is None:
            continue
        given = {key: ck.require(node, key, item, _amount, 0.0) for key in ("input", "output")}
        cached = ck.optional(node, "cached_input", item, _amount, given["input"])
        prices[name] = Price(given["input"], cached, given["output"])
    return prices


def file_prices(data: object) -> dict[str, Price] | str:
    """The prices of a LiteLLM prices file's models, or what is wrong with the file.

    Entries that are not a model with token prices (LiteLLM's ``sample_spec``, image and audio
    models priced otherwise) are left out: the file is a third party's, and those are not
    mistakes."""
    if not isinstance(data, dict):
        return "must hold a JSON object of models"
    prices: dict[str, Price] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            continue
        try:
            prompt = _amount(entry.get("input_cost_per_token"))
            output = _amount(entry.get("output_cost_per_token"))
            cached_value = entry.get("cache_read_input_token_cost")
            cached = prompt if cached_value is None else _amount(cached_value)
        except Invalid:
            continue
        prices[str(name)] = Price(prompt * PER_MILLION, cached * PER_MILLION, output * PER_MILLION)
    return prices


def price_for(
    explicit: Mapping[str, Price],
    from_file: Mapping[str, Price],
    model: str,
    upstream_model: str,
    api: str,
) -> Price | None:
    """A deployment's price: the client's model name in ``prices``, else in the file by that
    name, by the upstream model's, or by LiteLLM's ``<provider>/<model>`` spelling of it."""
    return (
        explicit.get(model)
        or from_file.get(model)
        or from_file.get(upstream_model)
        or from_file.get(f"{api}/{upstream_model}")
    )
