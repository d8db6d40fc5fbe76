"""deploy/grafana: the dashboard's structure, its template variables, and every PromQL query in it
parsed by promtool. (That each metric it names is one the proxy exports, with the labels it
filters on, is checked against a running proxy in test_deploy_runtime.py.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tools import promtool

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "llm-proxy.json"
VARIABLES = ("team", "model", "provider")
# What Grafana substitutes before the query reaches Prometheus.
MACROS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    '"$team"': '".*"',
    '"$model"': '".*"',
    '"$provider"': '".*"',
}


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def panels() -> list[dict[str, Any]]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def variables() -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard()["templating"]["list"]}


def queries() -> list[str]:
    """Every PromQL query of the dashboard: panel targets and variable queries."""
    found = [target["expr"] for panel in panels() for target in panel["targets"]]
    for name in VARIABLES:
        (selector,) = re.findall(r"label_values\((.+), \w+\)", variables()[name]["definition"])
        found.append(selector)
    return found


def substituted(query: str) -> str:
    for macro, value in MACROS.items():
        query = query.replace(macro, value)
    assert "$" not in query, query
    return query


def test_the_dashboard_is_provisioned_with_a_stable_uid() -> None:
    document = dashboard()
    assert document["uid"] == "llm-proxy"
    assert document["title"] == "LLM proxy"
    assert document["schemaVersion"] >= 39
    providers = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "llm-proxy.yml").read_text()
    )
    (provider,) = providers["providers"]
    assert provider["type"] == "file"


def test_template_variables_for_team_model_and_provider() -> None:
    found = variables()
    datasource = found["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for name in VARIABLES:
        variable = found[name]
        assert variable["type"] == "query"
        assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert variable["multi"] and variable["includeAll"]
        assert variable["allValue"] == ".*"
        assert variable["definition"] == variable["query"]["query"]
        assert re.fullmatch(rf"label_values\(.+, {name}\)", variable["definition"])


def test_every_panel_queries_the_chosen_datasource() -> None:
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"].strip()


def test_panels_tile_the_grid_without_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells


@pytest.mark.parametrize(
    "topic",
    [
        "Tokens/s by team",
        "Requests/s by team",
        "Request duration",
        "Time to first token",
        "Proxy overhead",
        "Upstream errors by provider and kind",
        "Normalization fixes",
        "In flight",
        "Circuit state",
        "Cycle collector pauses",
        "Budget left by team",
        "Allowance left by team and limit",
        "Requests refused by limits",
        "State store up",
        "State store errors",
    ],
)
def test_the_dashboard_shows(topic: str) -> None:
    assert any(panel["title"].startswith(topic) for panel in panels()), topic


def test_quantile_panels_show_p50_and_p99() -> None:
    for title in (
        "Request duration",
        "Time to first token by model",
        "Proxy overhead",
        "Cycle collector pauses",
    ):
        (panel,) = [p for p in panels() if p["title"] == title]
        quantiles = {
            q
            for target in panel["targets"]
            for q in re.findall(r"histogram_quantile\(([\d.]+)", target["expr"])
        }
        assert {"0.5", "0.99"} <= quantiles, title


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    # promtool parses PromQL only inside rules: each query becomes a recording rule.
    rules = [
        {"record": f"dashboard:query_{i}", "expr": substituted(query)}
        for i, query in enumerate(queries())
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
