"""deploy/kubernetes: valid manifests that agree with each other, with the image and with the
proxy's real configuration.

The manifests are checked against the Kubernetes JSON schemas that kubernetes-validate ships (no
cluster needed) and the Prometheus Operator resources against schemas of its CRDs copied into
tests/spec (deploy-schemas.md there says from where). The settings the pods depend on (ports,
probe paths, drain time, workers, variables) are read from the ConfigMap's proxy.yaml with
proxy.core.config, the way the proxy reads it. `python -m tests.deploy.test_deploy_kubernetes`
rewrites prometheusrule.yaml from deploy/prometheus/rules.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from proxy.core.config import Config, parse_config
from proxy.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
RULES = ROOT / "deploy" / "prometheus" / "rules"
SPEC = ROOT / "tests" / "spec"
# The oldest Kubernetes the manifests are meant for, and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.28", kubernetes_validate.utils.latest_version())
OPERATOR_KINDS = frozenset({"ServiceMonitor", "PrometheusRule"})
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-)?")  # ${VAR} or ${VAR:-default}


# --- reading the directory as kustomize does ---------------------------------------------------


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((KUBE / name).read_text())
    assert isinstance(document, dict), name
    return document


def kustomization() -> dict[str, Any]:
    return load("kustomization.yaml")


def generated_configmaps() -> list[dict[str, Any]]:
    """The ConfigMaps of configMapGenerator, as kustomize makes them (less the hash suffix)."""
    made = []
    for generator in kustomization().get("configMapGenerator", []):
        data = {}
        for entry in generator["files"]:
            key, _, path = entry.rpartition("=")
            data[key or Path(path).name] = (KUBE / path).read_text()
        labels = generator.get("options", {}).get("labels", {})
        metadata = {"name": generator["name"], **({"labels": labels} if labels else {})}
        made.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    return made


def resources() -> list[dict[str, Any]]:
    """Every object `kubectl apply -k deploy/kubernetes` creates."""
    documents = [
        document
        for name in kustomization()["resources"]
        for document in yaml.safe_load_all((KUBE / name).read_text())
        if document
    ]
    return documents + generated_configmaps()


def resource(kind: str) -> dict[str, Any]:
    (found,) = [document for document in resources() if document["kind"] == kind]
    return found


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = resource("Deployment")["spec"]["template"]["spec"]
    return spec


def proxy_container() -> dict[str, Any]:
    (container,) = pod_spec()["containers"]
    return container


def secret() -> dict[str, Any]:
    return load("secret.yaml")


def container_environment() -> dict[str, str]:
    """The environment the proxy starts with: the Deployment's env, and every key of the Secret
    (envFrom) with a dummy value."""
    container = proxy_container()
    (source,) = container["envFrom"]
    assert source["secretRef"]["name"] == secret()["metadata"]["name"]
    env = {key: f"dummy-{key.lower()}" for key in secret()["stringData"]}
    env.update({item["name"]: item["value"] for item in container.get("env", [])})
    return env


def mounted_config_text() -> str:
    """proxy.yaml as the container sees it: the ConfigMap mounted where --config points."""
    config_path = Path(config_argument(proxy_container()["args"]))
    mount = mount_at(str(config_path.parent))
    volume = volume_named(mount["name"])
    (configmap,) = [
        made
        for made in generated_configmaps()
        if made["metadata"]["name"] == volume["configMap"]["name"]
    ]
    text: str = configmap["data"][config_path.name]
    return text


def deployed_config() -> Config:
    return parse_config(yaml.safe_load(mounted_config_text()), container_environment())


def config_argument(args: list[str]) -> str:
    assert args[0] == "--config", args
    return args[1]


def mount_at(path: str) -> dict[str, Any]:
    (mount,) = [m for m in proxy_container()["volumeMounts"] if m["mountPath"] == path]
    return mount


def volume_named(name: str) -> dict[str, Any]:
    (volume,) = [v for v in pod_spec()["volumes"] if v["name"] == name]
    return volume


def container_port(name_or_number: str | int) -> int:
    if isinstance(name_or_number, int):
        return name_or_number
    (port,) = [p for p in proxy_container()["ports"] if p["name"] == name_or_number]
    number: int = port["containerPort"]
    return number


def dockerfile_instructions() -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile's runtime stage, continuations joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages = re.split(r"^FROM ", text, flags=re.MULTILINE)
    for line in stages[-1].splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arguments = line.partition(" ")
            yield instruction.upper(), arguments.strip()


def dockerfile(instruction: str) -> str:
    (arguments,) = [a for i, a in dockerfile_instructions() if i == instruction]
    return arguments


# --- the PrometheusRule: deploy/prometheus/rules for the Prometheus Operator --------------------

PROMETHEUS_RULE_HEADER = """\
# The rules of deploy/prometheus/rules (recording rules and alerts) for the Prometheus Operator.
# Generated: edit the rule files, then run `python -m tests.deploy.test_deploy_kubernetes`; the
# tests fail while the two differ. Your Prometheus selects PrometheusRules by label
# (kube-prometheus-stack: `release: <its Helm release name>`, see its ruleSelector).
"""


def rule_groups() -> list[dict[str, Any]]:
    return [
        group
        for path in sorted(RULES.glob("*.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
    ]


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, the way the rule files write them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def render_prometheus_rule() -> str:
    document = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "llm-proxy",
            "labels": {
                "app.kubernetes.io/name": "llm-proxy",
                "app.kubernetes.io/component": "gateway",
            },
        },
        "spec": {"groups": rule_groups()},
    }
    body = yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, width=100)
    return PROMETHEUS_RULE_HEADER + body


# --- schemas -----------------------------------------------------------------------------------


def test_kustomization_covers_the_directory() -> None:
    listed = set(kustomization()["resources"])
    generated = {
        entry.rpartition("=")[2]
        for generator in kustomization()["configMapGenerator"]
        for entry in generator["files"]
    }
    # secret.yaml holds placeholders: applying it with the rest would overwrite the real keys.
    on_purpose = {"kustomization.yaml", "secret.yaml"}
    present = {path.name for path in KUBE.iterdir()}
    assert present == listed | generated | on_purpose
    assert "secret.yaml" not in listed


def _core_documents() -> list[Any]:
    return [
        pytest.param(version, document, id=f"{document['kind']}-{version}")
        for document in [*resources(), secret()]
        if document["kind"] not in OPERATOR_KINDS
        for version in KUBERNETES_VERSIONS
    ]


@pytest.mark.parametrize(("version", "document"), _core_documents())
def test_manifest_validates_against_the_kubernetes_schema(
    version: str, document: dict[str, Any]
) -> None:
    # strict: an unknown or misspelt field is an error, as with kubectl --validate=strict.
    kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize("kind", sorted(OPERATOR_KINDS))
def test_operator_resource_validates_against_its_crd(kind: str) -> None:
    schema = json.loads((SPEC / f"{kind.lower()}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(resource(kind))


def test_secret_holds_placeholders_only() -> None:
    document = secret()
    assert document["type"] == "Opaque"
    assert "data" not in document
    assert set(document["stringData"].values()) == {"REPLACE_ME"}


# --- agreement with the proxy's configuration --------------------------------------------------


def variables(node: object) -> dict[str, bool]:
    """Every ${VAR} in the string values of ``node``: name -> whether it has a default."""
    found: dict[str, bool] = {}
    if isinstance(node, dict):
        for value in node.values():
            found.update(variables(value))
    elif isinstance(node, list):
        for value in node:
            found.update(variables(value))
    elif isinstance(node, str):
        for name, default in VARIABLE.findall(node.replace("$${", "")):
            found[name] = found.get(name, False) or bool(default)
    return found


def test_the_secret_provides_the_variables_the_config_reads() -> None:
    used = variables(yaml.safe_load(mounted_config_text()))
    keys = set(secret()["stringData"])
    required = {name for name, has_default in used.items() if not has_default}
    env = {item["name"] for item in proxy_container()["env"]}
    assert required <= keys, "the Secret misses variables the proxy cannot start without"
    assert keys <= set(used), "the Secret holds keys the configuration never reads"
    assert env <= set(used)
    # and with them (and the Deployment's env) the configuration is valid
    deployed_config()


def test_the_proxy_refuses_to_start_without_a_required_key() -> None:
    raw = yaml.safe_load(mounted_config_text())
    required = [name for name, has_default in variables(raw).items() if not has_default]
    assert required
    for name in required:
        env = {k: v for k, v in container_environment().items() if k != name}
        with pytest.raises(ConfigError) as failed:
            parse_config(raw, env)
        problems = failed.value.problems
        assert all(p.endswith(f"environment variable {name} is not set") for p in problems)


def test_ports_and_probes_agree_with_the_config() -> None:
    config = deployed_config()
    container = proxy_container()
    assert container_port("http") == config.server.port
    assert container_port("metrics") == config.metrics.port
    assert config.metrics.enabled
    assert config.server.host == "0.0.0.0"
    readiness = container["readinessProbe"]["httpGet"]
    liveness = container["livenessProbe"]["httpGet"]
    assert (readiness["path"], container_port(readiness["port"])) == ("/readyz", config.server.port)
    assert (liveness["path"], container_port(liveness["port"])) == ("/healthz", config.server.port)
    # A readiness failure takes a pod out of the Service sooner than liveness restarts it.
    probe = container["readinessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 10


def test_the_service_and_the_servicemonitor_reach_those_ports() -> None:
    config = deployed_config()
    service = resource("Service")
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert container_port(ports["http"]["targetPort"]) == config.server.port
    assert container_port(ports["metrics"]["targetPort"]) == config.metrics.port
    monitor = resource("ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert ports[endpoint["port"]]["targetPort"] == "metrics"
    assert endpoint["path"] == "/metrics"
    # The scrape presents the token that the proxy requires: the same Secret key.
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["name"] == secret()["metadata"]["name"]
    assert config.metrics.token == container_environment()[credentials["key"]]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )


def test_the_grace_period_covers_the_pause_and_the_drain() -> None:
    config = deployed_config()
    spec = pod_spec()
    command = proxy_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep", command
    pause = float(command[1])
    # Endpoints are removed while the pod pauses; then SIGTERM starts the drain.
    assert pause >= 5
    assert spec["terminationGracePeriodSeconds"] > pause + config.server.drain_seconds


def test_the_pod_runs_unprivileged_on_a_read_only_root() -> None:
    spec = pod_spec()
    pod = spec["securityContext"]
    container = proxy_container()["securityContext"]
    user, _, group = dockerfile("USER").partition(":")
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] == int(user) != 0
    assert pod["runAsGroup"] == int(group) != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["runAsNonRoot"] is True
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert spec["automountServiceAccountToken"] is False


def test_workers_get_a_writable_tmp() -> None:
    # With several workers the supervisor keeps the Prometheus multiprocess files in a
    # tempfile directory ($TMPDIR, else /tmp): on a read-only root that must be a volume.
    config = deployed_config()
    assert config.server.workers == int(container_environment()["LLM_PROXY_WORKERS"]) > 1
    assert "TMPDIR" not in container_environment()
    assert "emptyDir" in volume_named(mount_at("/tmp")["name"])


def test_the_config_is_mounted_where_the_image_reads_it() -> None:
    config_path = config_argument(proxy_container()["args"])
    assert json.loads(dockerfile("CMD")) == ["--config", config_path]
    assert mount_at(str(Path(config_path).parent))["readOnly"] is True
    # the image bakes the very same file, for `docker run` without a mount
    (copy,) = [a for i, a in dockerfile_instructions() if i == "COPY" and config_path in a]
    assert copy.split()[0] == "deploy/kubernetes/proxy.yaml"
    # no subPath: a mounted directory follows ConfigMap updates, a subPath mount never does
    assert "subPath" not in mount_at(str(Path(config_path).parent))


def test_labels_select_the_pods() -> None:
    deployment = resource("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        resource("Service")["spec"]["selector"],
        resource("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        *(c["labelSelector"]["matchLabels"] for c in pod_spec()["topologySpreadConstraints"]),
    ]
    for selector in selectors:
        assert selector and selector.items() <= pod_labels.items(), selector
    hpa = resource("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    # The autoscaler owns the replica count; a PodDisruptionBudget always leaves one serving.
    assert "replicas" not in deployment["spec"]
    assert hpa["spec"]["minReplicas"] >= 2
    assert resource("PodDisruptionBudget")["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_prometheus_rule_is_the_rule_files() -> None:
    shipped = load("prometheusrule.yaml")
    assert shipped == yaml.safe_load(render_prometheus_rule()), (
        "deploy/kubernetes/prometheusrule.yaml is stale:"
        " run python -m tests.deploy.test_deploy_kubernetes"
    )


def test_kustomize_builds_the_directory() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(KUBE)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    built = [document for document in yaml.safe_load_all(result.stdout) if document]
    kinds = sorted(document["kind"] for document in built)
    assert kinds == sorted(document["kind"] for document in resources())
    (configmap,) = [document for document in built if document["kind"] == "ConfigMap"]
    (deployment,) = [document for document in built if document["kind"] == "Deployment"]
    # The generated name carries a hash of proxy.yaml, and the Deployment mounts that name.
    assert re.fullmatch(r"llm-proxy-config-[a-z0-9]{10}", configmap["metadata"]["name"])
    assert configmap["data"] == generated_configmaps()[0]["data"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert configmap["metadata"]["name"] in [v.get("configMap", {}).get("name") for v in volumes]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (image,) = kustomization()["images"]
    assert container["image"] == f"{image['newName']}:{image['newTag']}"
    for document in built:
        if document["kind"] not in OPERATOR_KINDS:
            kubernetes_validate.validate(document, KUBERNETES_VERSIONS[-1], strict=True)


if __name__ == "__main__":
    (KUBE / "prometheusrule.yaml").write_text(render_prometheus_rule())
    sys.exit(0)
