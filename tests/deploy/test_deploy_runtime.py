"""The deployment files against the real proxy: `llm-proxy serve` and `llm-proxy emulate` as
processes on loopback, started with the configurations that Kubernetes and compose use.

- the Kubernetes ConfigMap's proxy.yaml, with the Deployment's environment and dummy keys,
  answers the probes and serves /metrics behind the Secret's token, and drains on SIGTERM;
- compose's proxy.yaml in front of the emulator, driven by compose's own traffic generator: every
  metric that the alert and recording rules and the dashboard name is in its real /metrics, the
  dashboard filters each by the template variables its labels allow, and shows every metric the
  proxy exports;
- SIGTERM lets a stream in flight finish before the process exits 0.

Only the ports differ from the shipped files: each run takes free ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_deploy_grafana import panels as dashboard_panels
from tests.deploy.test_deploy_grafana import queries as dashboard_queries
from tests.deploy.test_deploy_kubernetes import container_environment, mounted_config_text
from tests.deploy.test_deploy_prometheus import rules
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
COMPOSE_CONFIG = ROOT / "deploy" / "compose" / "proxy.yaml"
TRAFFIC = ROOT / "deploy" / "compose" / "traffic.py"
TRAFFIC_BOUNDS = ("--requests", "60", "--rate", "100", "--concurrency", "6", "--seed", "1")
METRIC = re.compile(r"(?<![\w:])llm_proxy_\w+(?![\w:])")
SELECTOR = re.compile(r"(?<![\w:])(llm_proxy_\w+)(?:\{([^}]*)\})?")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
ALWAYS_THERE = frozenset({"le", "job", "instance"})  # set by histograms and by the scrape


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def http_get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Connection": "close"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def wait_until_answers(running: Running, url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert running.process.poll() is None, running.output()
        try:
            if http_get(url)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer 200 within {seconds:g} s\n{running.output()}")


@contextmanager
def run(args: list[str], log: Path, env: dict[str, str], ready_url: str) -> Iterator[Running]:
    """``python -m proxy ARGS`` until ``ready_url`` answers 200; SIGTERM (then SIGKILL) after."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # A group of its own: whatever a dead supervisor leaves behind can be found and ended.
            start_new_session=True,
        )
    running = Running(process, log)
    try:
        wait_until_answers(running, ready_url)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def process_env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1", **extra}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def with_free_ports(text: str, destination: Path) -> tuple[Path, int, int]:
    """The configuration ``text`` with free ports for the server and metrics listeners."""
    raw = yaml.safe_load(text)
    port, metrics_port = free_port(), free_port()
    raw["server"]["port"] = port
    raw["metrics"]["port"] = metrics_port
    destination.write_text(yaml.safe_dump(raw))
    return destination, port, metrics_port


@dataclass
class Stack:
    proxy: Running
    port: int
    metrics_port: int
    emulator_url: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scrape(self) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        assert status == 200, body
        return body.decode()


def compose_emulator_options() -> list[str]:
    """The options of compose's emulator service other than where it listens."""
    compose = yaml.safe_load(COMPOSE.read_text())["services"]["emulator"]
    assert compose["entrypoint"] == ["llm-proxy", "emulate"]
    options: list[str] = []
    args = iter(compose["command"])
    for option in args:
        value = next(args)
        if option not in ("--host", "--port"):
            options += [option, value]
    return options


@contextmanager
def compose_stack(tmp_path: Path) -> Iterator[Stack]:
    """compose's emulator and proxy (two workers, as compose runs it), on free ports."""
    emulator_port = free_port()
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    env = process_env(tmp_path, {"EMULATOR_URL": emulator_url, "LLM_PROXY_WORKERS": "2"})
    config, port, metrics_port = with_free_ports(
        COMPOSE_CONFIG.read_text(), tmp_path / "proxy.yaml"
    )
    # compose's emulator command (its delay between stream events keeps streams in flight), on
    # loopback
    emulate = ["emulate", *compose_emulator_options(), "--host", "127.0.0.1"]
    emulate += ["--port", str(emulator_port)]
    with (
        run(emulate, tmp_path / "emulator.log", env, f"{emulator_url}/v1/models"),
        run(
            ["serve", "--config", str(config)],
            tmp_path / "proxy.log",
            env,
            f"http://127.0.0.1:{port}/readyz",
        ) as proxy,
    ):
        yield Stack(proxy, port, metrics_port, emulator_url)


def chat(stack: Stack, key: str, model: str, *, stream: bool, abandon: bool = False) -> str:
    """One chat request; the response body (the first line only, when ``abandon``)."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Hi"}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(
        f"{stack.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return (response.readline() if abandon else response.read()).decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.read().decode()


# --- metric names in the rules and the dashboard -----------------------------------------------


def monitoring_queries() -> list[str]:
    return [rule["expr"] for rule in rules()] + dashboard_queries()


def family_name(sample_name: str) -> str:
    for suffix in SUFFIXES:
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def exported_labels(exposition: str) -> dict[str, set[str]]:
    """Each sample name of the exposition -> the label names its samples carry."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


# --- tests -------------------------------------------------------------------------------------


def test_the_kubernetes_config_answers_the_probes_and_drains(tmp_path: Path) -> None:
    env = container_environment()
    config, port, metrics_port = with_free_ports(mounted_config_text(), tmp_path / "proxy.yaml")
    base = f"http://127.0.0.1:{port}"
    with run(
        ["serve", "--config", str(config)],
        tmp_path / "proxy.log",
        process_env(tmp_path, env),
        f"{base}/readyz",
    ) as proxy:
        assert http_get(f"{base}/healthz")[0] == 200
        assert http_get(f"{base}/readyz")[0] == 200
        # /metrics is on its own port (the ServiceMonitor's), behind the Secret's token
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        assert http_get(metrics)[0] == 401
        status, body = http_get(metrics, token=env["METRICS_TOKEN"])
        assert status == 200 and b"llm_proxy_" in body
        assert http_get(f"{base}/metrics", token=env["METRICS_TOKEN"])[0] == 404
        # the Deployment's LLM_PROXY_WORKERS workers are running
        workers = int(env["LLM_PROXY_WORKERS"])
        deadline = time.monotonic() + 20
        while proxy.output().count(" listening on ") < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proxy.output().count(" listening on ") == workers, proxy.output()
        # what the kubelet does after the preStop pause
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.process.wait(30) == 0, proxy.output()


def test_rules_and_dashboard_name_only_metrics_the_proxy_exports(tmp_path: Path) -> None:
    with compose_stack(tmp_path) as stack:
        # compose's traffic generator, bounded ...
        traffic = subprocess.run(
            [sys.executable, TRAFFIC, "--url", stack.url, *TRAFFIC_BOUNDS],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert traffic.returncode == 0, traffic.stdout + traffic.stderr
        # ... and one of each event the metrics count, for certain
        assert "[DONE]" in chat(stack, "sk-research", "slow-llama", stream=True)
        chat(stack, "sk-research", "gpt-4o-mini", stream=True, abandon=True)
        chat(stack, "sk-marketing", "broken-mistral", stream=False)
        for _ in range(5):  # past routing.circuit.failures: retries, then an open circuit
            chat(stack, "sk-support", "flaky-gpt", stream=False)
        chat(stack, "sk-wrong", "gpt-4o-mini", stream=False)
        time.sleep(0.5)  # the abandoned stream is counted when its handler ends
        exported = exported_labels(stack.scrape())
        # A reload of the unchanged configuration (SIGHUP: `kill -HUP`, a config reloader).
        stack.proxy.process.send_signal(signal.SIGHUP)
        time.sleep(2)
        reloaded = stack.proxy.process.poll() is None
        if reloaded:
            for name, labels in exported_labels(stack.scrape()).items():
                exported.setdefault(name, set()).update(labels)

    used = {name for query in monitoring_queries() for name in METRIC.findall(query)}
    missing = sorted(used - set(exported))
    # and the dashboard shows every metric the proxy exports
    shown = {family_name(name) for query in dashboard_queries() for name in METRIC.findall(query)}
    families = {family_name(name) for name in exported if name.startswith("llm_proxy_")}
    unshown = sorted(families - shown)
    # Label names: each grouping names labels that the metrics of its query carry, and each
    # panel's selector filters on the template variables its metric has labels for.
    bad_labels = []
    for query in monitoring_queries():
        names = METRIC.findall(query)
        if any(name not in exported for name in names):
            continue  # its labels are unknown until it is exported; reported as missing
        carried = set(ALWAYS_THERE).union(*(exported[name] for name in names))
        recorded = re.findall(r"(?<![\w:])[a-zA-Z_]\w*:[\w:]+", query)
        for grouping in GROUPING.findall(query):
            for label in filter(None, (part.strip() for part in grouping.split(","))):
                if not recorded and label not in carried:
                    bad_labels.append(f"{label} in {query}")
    panel_queries = [target["expr"] for panel in dashboard_panels() for target in panel["targets"]]
    for query in panel_queries:
        for name, matchers in SELECTOR.findall(query):
            for variable in ("team", "model", "provider"):
                wanted = f'{variable}=~"${variable}"'
                if variable in exported.get(name, set()) and wanted not in matchers:
                    bad_labels.append(f"{name} not filtered by ${variable} in {query}")
    assert (missing, unshown, bad_labels) == ([], [], []), (
        f"named in deploy/ but not exported by the proxy: {missing}; "
        f"exported but on no dashboard panel: {unshown}; label problems: {bad_labels}"
        + ("" if reloaded else "; SIGHUP ended the proxy instead of reloading its configuration")
    )


def test_sigterm_lets_a_stream_in_flight_finish(tmp_path: Path) -> None:
    with compose_stack(tmp_path) as stack:
        answers: list[str] = []
        # slow-llama's upstream waits 2 s before its first byte: SIGTERM arrives meanwhile.
        client = threading.Thread(
            target=lambda: answers.append(chat(stack, "sk-research", "slow-llama", stream=True))
        )
        started = time.monotonic()
        client.start()
        time.sleep(0.5)
        stack.proxy.process.send_signal(signal.SIGTERM)
        client.join(30)
        assert answers and answers[0].rstrip().endswith("data: [DONE]"), answers
        assert time.monotonic() - started >= 2
        assert stack.proxy.process.wait(30) == 0, stack.proxy.output()


def test_the_traffic_generator_waits_for_the_proxy_and_fails_without_it() -> None:
    # It must not report success against a proxy that is not there (the test above relies on
    # its exit status); with nowhere to connect it keeps waiting until stopped.
    nowhere = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [sys.executable, TRAFFIC, "--url", nowhere, "--requests", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 1
    assert "waiting for the proxy" in stderr
