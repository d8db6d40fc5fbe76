"""deploy/compose.yaml: valid against the Compose Specification's schema (tests/spec, see
deploy-schemas.md there), and wired the way the files it mounts expect: ports, paths, keys,
service names and grace periods agree across the proxy, Prometheus and Grafana."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from proxy.core.config import Config, key_digest, load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
SCHEMA = ROOT / "tests" / "spec" / "compose-spec.json"


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def service(name: str) -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"][name]
    return found


def binds(name: str) -> dict[str, Path]:
    """A service's bind mounts: path in the container -> path on the host."""
    mounts = {}
    for volume in service(name).get("volumes", []):
        source, target, *_ = volume.split(":")
        assert source.startswith("."), f"{name}: {volume} is not a bind mount of the repository"
        mounts[target] = (COMPOSE.parent / source).resolve()
    return mounts


def host_path(name: str, container_path: str) -> Path:
    """Where ``container_path`` of service ``name`` comes from on the host."""
    for target, source in sorted(binds(name).items(), key=lambda item: -len(item[0])):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return source / Path(container_path).relative_to(target)
    raise AssertionError(f"{name} mounts nothing at {container_path}")


def proxy_config() -> Config:
    args = service("proxy")["command"]
    assert args[0] == "--config"
    return load_config(host_path("proxy", args[1]), service("proxy")["environment"])


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|s|m|h)", duration))


def test_compose_file_validates_against_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []


def test_the_schema_rejects_a_misspelt_key() -> None:
    # The schema is strict enough to be worth checking against.
    schema = json.loads(SCHEMA.read_text())
    broken = compose()
    broken["services"]["proxy"]["stop_grace_periode"] = "15s"
    assert not jsonschema.validators.validator_for(schema)(schema).is_valid(broken)


def test_every_mounted_file_exists() -> None:
    for name in compose()["services"]:
        for source in binds(name).values():
            assert source.exists(), source
    build = service("proxy")["build"]
    dockerfile = COMPOSE.parent / build["context"] / build["dockerfile"]
    assert dockerfile.resolve() == ROOT / "Dockerfile"


def test_the_proxy_runs_as_in_kubernetes() -> None:
    proxy = service("proxy")
    config = proxy_config()
    assert config.server.workers == int(proxy["environment"]["LLM_PROXY_WORKERS"]) > 1
    # read-only root, and the workers' metrics files in a tmpfs
    assert proxy["read_only"] is True
    assert "/tmp" in proxy["tmpfs"]
    assert proxy["cap_drop"] == ["ALL"]
    assert seconds(proxy["stop_grace_period"]) > config.server.drain_seconds
    assert f"{config.server.port}:{config.server.port}" in proxy["ports"]
    # the image's own healthcheck (/healthz on 8080) applies: the port is the image's
    assert "healthcheck" not in proxy
    assert config.server.port == 8080


def test_the_proxy_reaches_the_emulator() -> None:
    config = proxy_config()
    emulator = service("emulator")
    port = emulator["command"][emulator["command"].index("--port") + 1]
    for provider in config.providers.values():
        url = urlsplit(provider.base_url)
        assert (url.hostname, str(url.port)) == ("emulator", port), provider.name
    assert service("proxy")["depends_on"]["emulator"]["condition"] == "service_healthy"


def test_prometheus_scrapes_the_proxy_metrics_port() -> None:
    prometheus = service("prometheus")
    flags = dict(flag.removeprefix("--").split("=", 1) for flag in prometheus["command"])
    config_file = host_path("prometheus", flags["config.file"])
    scrape = yaml.safe_load(config_file.read_text())
    (job,) = scrape["scrape_configs"]
    (static,) = job["static_configs"]
    assert static["targets"] == [f"proxy:{proxy_config().metrics.port}"]
    # rule_files are relative to the config file, which sits beside rules/ in the mount
    for pattern in scrape["rule_files"]:
        assert list(config_file.parent.glob(pattern)), pattern


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    grafana = service("grafana")
    provisioning = host_path("grafana", "/etc/grafana/provisioning")
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert "9090:9090" in service("prometheus")["ports"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "llm-proxy.yml").read_text())[
        "providers"
    ]
    dashboards = host_path("grafana", provider["options"]["path"])
    assert (dashboards / "llm-proxy.json").is_file()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path("grafana", home) == dashboards / "llm-proxy.json"


def test_the_traffic_generator_uses_team_keys() -> None:
    traffic = service("traffic")
    script = traffic["entrypoint"][-1]
    assert host_path("traffic", script) == DEPLOY / "compose" / "traffic.py"
    teams = proxy_config().teams
    keys = traffic["environment"]["TRAFFIC_KEYS"].split(",")
    assert len(keys) == len(teams) > 1
    for key in keys:
        assert any(key_digest(key) in team.key_digests for team in teams.values()), key
    url = traffic["command"][traffic["command"].index("--url") + 1]
    assert url == f"http://proxy:{proxy_config().server.port}"


@pytest.mark.parametrize("name", ["prometheus", "grafana"])
def test_third_party_images_are_pinned(name: str) -> None:
    image = service(name)["image"]
    assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image), image
