"""(team, model name) -> configured model, and the routing table as text.

Choosing among a model's deployments, and falling back between them, is ``proxy.core.balancer``'s.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from proxy.core.config import Config, Deployment, Model, Team
from proxy.core.errors import ModelNotFound


def may_use(team: Team, model: str) -> bool:
    """Whether any of the team's globs matches the model name (case-sensitively)."""
    return any(fnmatchcase(model, pattern) for pattern in team.models)


def allowed_models(config: Config, team: Team) -> list[str]:
    """The configured model names the team may use, sorted."""
    return sorted(name for name in config.models if may_use(team, name))


class ModelTable:
    """(team, model name) -> configured model, every team's globs matched against every model
    once per configuration, not once per request."""

    __slots__ = ("_models", "_permitted")

    def __init__(self, config: Config) -> None:
        self._models = config.models
        self._permitted = {
            name: frozenset(allowed_models(config, team)) for name, team in config.teams.items()
        }

    def allowed(self, team: Team) -> list[str]:
        """The configured model names the team may use, sorted (GET /v1/models)."""
        return sorted(self._permitted.get(team.name, ()))

    def resolve(self, team: Team, model: str) -> Model:
        """The configured model a request names, if the team may use it."""
        found = self._models.get(model)
        # Another team's model is as unknown as one nobody configured, with the same answer
        # (docs/canonical-output.md section 4): a team cannot learn which names exist.
        if found is None or model not in self._permitted.get(team.name, ()):
            raise ModelNotFound(model)
        return found


def describe_routes(config: Config) -> list[str]:
    """One line per deployment, then one per team, for ``llm-proxy check-config``; no keys."""
    lines = [
        _describe_deployment(config, model, deployment)
        for model in config.models.values()
        for deployment in model.deployments
    ]
    lines.extend(_describe_team(config, team) for team in config.teams.values())
    return lines


def _describe_deployment(config: Config, model: Model, deployment: Deployment) -> str:
    # base_url is safe to print: config refuses credentials and query strings in it.
    base_url = config.providers[deployment.provider].base_url
    line = (
        f"{model.name} -> {deployment.provider} ({deployment.model}) {base_url}"
        f"  weight={deployment.weight:g} priority={deployment.priority}"
    )
    return line if model.reasoning else f"{line} reasoning=off"


def _describe_team(config: Config, team: Team) -> str:
    keys = len(team.key_digests)
    allowed = ", ".join(allowed_models(config, team)) or "(none)"
    patterns = ", ".join(team.models)
    return f"team {team.name} ({keys} key{'s' * (keys != 1)}, models {patterns}) -> {allowed}"
