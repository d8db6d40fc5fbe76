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

from proxy.core.usage import Usage
from proxy.core.yaml_readers import Checker, Invalid

__all__ = ["PRICE_KEYS", "Price", "file_prices", "parse_prices", "price_for"]

PER_MILLION: Final = 1_000_000
# The dearest models cost a few hundred USD per million tokens; a price past this bound is a
# typo (or a hostile file), and its costs would overflow to inf and NaN in the metrics.
MAX_PRICE: Final = 10_000.0
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


class TooDear(Invalid):
    """A price past ``MAX_PRICE``."""


def _amount(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid("must be a number of USD per million tokens")
    if not math.isfinite(value) or value < 0:
        raise Invalid("must be a finite number, 0 or more")
    if value > MAX_PRICE:
        raise TooDear(f"must be at most {MAX_PRICE:g} USD per million tokens")
    return float(value)


def _per_token(value: object) -> float:
    """A prices file's USD per token, as USD per million tokens."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid("must be a number of USD per token")
    if value > MAX_PRICE / PER_MILLION:  # before scaling: 1e303 per token would be inf
        raise TooDear(f"must be at most {MAX_PRICE:g} USD per million tokens")
    return _amount(value * PER_MILLION)


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
        costs = [entry.get(key) for key in _FILE_KEYS]
        if costs[2] is None:
            costs[2] = costs[0]  # no cache discount given
        try:
            prompt, output, cached = (_per_token(cost) for cost in costs)
        except TooDear as exc:
            # A price, and absurd: a mistake in the file, not an entry priced otherwise.
            return f"model {name!r}: a token price {exc}"
        except Invalid:
            continue
        prices[str(name)] = Price(prompt, cached, output)
    return prices


_FILE_KEYS: Final = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost")


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
