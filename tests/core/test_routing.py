from __future__ import annotations

import pytest
import yaml

from proxy.core.config import Config, Team, parse_config
from proxy.core.errors import ModelNotFound
from proxy.core.routing import ModelTable, allowed_models, describe_routes, may_use

CONFIG_YAML = """
providers:
  friendli: {base_url: "https://api.friendli.ai/serverless/v1/", api_key: secret-token}
  maritaca: {base_url: "https://chat.maritaca.ai/api", headers: {Authorization: Key other-secret}}
  deepseek: {base_url: "https://api.deepseek.com"}
models:
  llama-3.1-8b: {provider: friendli, model: meta-llama-3.1-8b-instruct}
  llama-3.1-70b: {provider: friendli, model: meta-llama-3.1-70b-instruct}
  Llama-Guard: {provider: friendli, model: llama-guard}
  sabia-4: [{provider: maritaca, model: sabia-4}]
  r1:
    deployments:
      - {provider: deepseek, model: deepseek-reasoner, weight: 2}
      - {provider: friendli, model: deepseek-r1, weight: 0.5, priority: 1}
    reasoning: false
  gpt-4o: {provider: friendli, model: gpt-4o}
teams:
  research: {keys: [research-key-1, research-key-2], models: ["*"]}
  support: {keys: [support-key], models: ["llama-*"]}
  mixed: {keys: [mixed-key], models: ["sabia-?", "r[0-9]", "gpt-4o"]}
  nobody: {keys: [nobody-key], models: ["claude-*"]}
"""


@pytest.fixture(scope="module")
def config() -> Config:
    return parse_config(yaml.safe_load(CONFIG_YAML), {})


@pytest.mark.parametrize(
    ("patterns", "model", "allowed"),
    [
        (("*",), "anything", True),
        (("llama-*",), "llama-3.1-8b", True),
        (("llama-*",), "Llama-Guard", False),  # case-sensitive, whatever the OS
        (("llama-*",), "llama", False),
        (("sabia-?",), "sabia-4", True),
        (("sabia-?",), "sabia-40", False),
        (("r[0-9]",), "r1", True),
        (("r[!0-9]",), "r1", False),
        (("gpt-4o",), "gpt-4o", True),
        (("gpt-4o",), "gpt-4o-mini", False),
        (("a", "b*"), "bee", True),
    ],
)
def test_may_use(patterns: tuple[str, ...], model: str, allowed: bool) -> None:
    assert may_use(Team("t", (), patterns), model) is allowed


@pytest.mark.parametrize(
    ("team", "model"),
    [
        ("research", "gpt-4o"),
        ("research", "r1"),
        ("support", "llama-3.1-8b"),
        ("support", "llama-3.1-70b"),
        ("mixed", "sabia-4"),
        ("mixed", "r1"),
    ],
)
def test_resolve_model_permitted(config: Config, team: str, model: str) -> None:
    assert ModelTable(config).resolve(config.teams[team], model) is config.models[model]


@pytest.mark.parametrize(
    ("team", "model"),
    [
        ("support", "gpt-4o"),
        ("support", "Llama-Guard"),
        ("mixed", "llama-3.1-8b"),
        ("nobody", "r1"),
    ],
)
def test_resolve_model_not_permitted(config: Config, team: str, model: str) -> None:
    # The same answer as for a model nobody configured: a team cannot learn which names exist.
    with pytest.raises(ModelNotFound) as info:
        ModelTable(config).resolve(config.teams[team], model)
    assert info.value.message == (
        f"The model '{model}' does not exist or you do not have access to it"
    )
    assert (info.value.param, info.value.code, info.value.http_status) == (
        "model",
        "model_not_found",
        404,
    )


@pytest.mark.parametrize(
    ("team", "model"),
    [("research", "gpt-5"), ("support", "llama-4"), ("research", ""), ("research", "LLAMA-3.1-8B")],
)
def test_resolve_model_unknown(config: Config, team: str, model: str) -> None:
    # Unknown beats forbidden: a glob that would match the name does not make the model exist.
    with pytest.raises(ModelNotFound) as info:
        ModelTable(config).resolve(config.teams[team], model)
    assert info.value.message == (
        f"The model '{model}' does not exist or you do not have access to it"
    )
    assert (info.value.code, info.value.http_status) == ("model_not_found", 404)


@pytest.mark.parametrize(
    ("team", "models"),
    [
        ("research", ["Llama-Guard", "gpt-4o", "llama-3.1-70b", "llama-3.1-8b", "r1", "sabia-4"]),
        ("support", ["llama-3.1-70b", "llama-3.1-8b"]),
        ("mixed", ["gpt-4o", "r1", "sabia-4"]),
        ("nobody", []),
    ],
)
def test_allowed_models(config: Config, team: str, models: list[str]) -> None:
    assert allowed_models(config, config.teams[team]) == models
    assert ModelTable(config).allowed(config.teams[team]) == models


def test_describe_routes(config: Config) -> None:
    assert describe_routes(config) == [
        "llama-3.1-8b -> friendli (meta-llama-3.1-8b-instruct)"
        " https://api.friendli.ai/serverless/v1  weight=1 priority=0",
        "llama-3.1-70b -> friendli (meta-llama-3.1-70b-instruct)"
        " https://api.friendli.ai/serverless/v1  weight=1 priority=0",
        "Llama-Guard -> friendli (llama-guard) https://api.friendli.ai/serverless/v1"
        "  weight=1 priority=0",
        "sabia-4 -> maritaca (sabia-4) https://chat.maritaca.ai/api  weight=1 priority=0",
        "r1 -> deepseek (deepseek-reasoner) https://api.deepseek.com  weight=2 priority=0"
        " reasoning=off",
        "r1 -> friendli (deepseek-r1) https://api.friendli.ai/serverless/v1  weight=0.5 priority=1"
        " reasoning=off",
        "gpt-4o -> friendli (gpt-4o) https://api.friendli.ai/serverless/v1  weight=1 priority=0",
        "team research (2 keys, models *) -> Llama-Guard, gpt-4o, llama-3.1-70b, llama-3.1-8b,"
        " r1, sabia-4",
        "team support (1 key, models llama-*) -> llama-3.1-70b, llama-3.1-8b",
        "team mixed (1 key, models sabia-?, r[0-9], gpt-4o) -> gpt-4o, r1, sabia-4",
        "team nobody (1 key, models claude-*) -> (none)",
    ]


def test_describe_routes_never_prints_secrets(config: Config) -> None:
    text = "\n".join(describe_routes(config))
    for secret in ["secret-token", "other-secret", "research-key", "support-key", "sha256"]:
        assert secret not in text
