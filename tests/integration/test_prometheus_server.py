"""A real Prometheus server scrapes ``llm-proxy serve --workers 2`` on loopback; a query through
its HTTP API returns the exact totals per team.

Needs Debian's ``prometheus`` package; outside CI the test is skipped without it, in CI
(``.ci/run`` installs it) it must run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import yaml

from tests.support.harness import free_port
from tests.support.metrics import (
    ALPHA_KEY,
    BETA_KEY,
    HELLO,
    golden_usage,
    serve,
    stage,
    wait_for,
    write_config,
)
from tests.support.tools import required_program

TOKEN = "prometheus-scrape-token"


@contextmanager
def prometheus(binary: str, target: str, workdir: Path) -> Iterator[str]:
    """Prometheus scraping ``target`` every second (with the metrics token); yields its URL."""
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "llm-proxy",
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "authorization": {"type": "Bearer", "credentials": TOKEN},
                        "static_configs": [{"targets": [target]}],
                    }
                ],
            }
        )
    )
    log = (workdir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def query(base: str, promql: str) -> dict[str, float] | None:
    """``promql``'s instant vector by team, or None while Prometheus cannot answer yet."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            answer: dict[str, Any] = json.load(response)
    except (urllib.error.URLError, ConnectionError):
        return None
    assert answer["status"] == "success", answer
    return {
        item["metric"].get("team", ""): float(item["value"][1]) for item in answer["data"]["result"]
    }


def test_prometheus_sums_tokens_by_team(tmp_path: Path) -> None:
    binary = required_program("prometheus")
    metrics_port = free_port()
    with stage() as emulator:
        config = write_config(
            tmp_path / "proxy.yaml",
            emulator.emulator_url,
            {
                "llama": {"provider": "emu", "model": "friendli"},
                "gpt": {"provider": "emu-b", "model": "openai"},
            },
            metrics={"host": "127.0.0.1", "port": metrics_port, "token": TOKEN},
        )
        with serve(config, 2, tmp_path / "tmp") as served:
            # New connections (no keep-alive), so that both workers serve.
            close = {"Connection": "close"}
            alpha = openai.OpenAI(
                base_url=served.url, api_key=ALPHA_KEY, max_retries=0, default_headers=close
            )
            beta = openai.OpenAI(
                base_url=served.url, api_key=BETA_KEY, max_retries=0, default_headers=close
            )
            with alpha, beta:
                for _ in range(7):
                    for _ in alpha.chat.completions.create(
                        model="llama", messages=HELLO, stream=True
                    ):
                        pass
                for _ in range(5):
                    beta.chat.completions.create(model="gpt", messages=HELLO)
                for _ in range(3):
                    for _ in beta.chat.completions.create(model="gpt", messages=HELLO, stream=True):
                        pass
            expected_completion = {
                "alpha": 7 * golden_usage("friendli.chat.stream.sse")["completion"],
                "beta": 5 * golden_usage("openai.chat.json")["completion"]
                + 3 * golden_usage("openai.chat.stream.sse")["completion"],
            }
            expected_requests = {"alpha": 7.0, "beta": 8.0}
            workdir = tmp_path / "prometheus"
            workdir.mkdir()
            with prometheus(binary, f"127.0.0.1:{metrics_port}", workdir) as base:
                tokens = 'sum by (team) (llm_proxy_tokens_total{type="completion"})'
                requests = "sum by (team) (llm_proxy_requests_total)"
                try:
                    wait_for(
                        lambda: (
                            query(base, tokens) == expected_completion
                            and query(base, requests) == expected_requests
                        ),
                        f"Prometheus to report {expected_completion} and {expected_requests}",
                        seconds=30,
                    )
                except AssertionError as exc:
                    log = (workdir / "prometheus.log").read_text()[-3000:]
                    raise AssertionError(f"{exc}; last: {query(base, tokens)}\n{log}") from None
                assert query(base, 'up{job="llm-proxy"}') == {"": 1.0}
