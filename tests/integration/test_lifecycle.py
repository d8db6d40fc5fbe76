"""Shutdown and reload of the real ``llm-proxy serve`` process, with streams in flight.

The emulator paces its events (``chunk_delay``), so a stream is still running when the signal
arrives.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.support.harness import TEAM_KEY, Servers, free_port, running_servers
from tests.support.replay import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
DELAY = 0.2  # seconds between the emulator's events
SLOW = "mistral.chat.stream.sse"  # 9 events: about 2 s at DELAY


@pytest.fixture(scope="module")
def paced() -> Iterator[Servers]:
    with running_servers(FIXTURES, chunk_delay=DELAY) as servers:
        yield servers


def write_config(path: Path, emulator_url: str, models: dict[str, Any], **server: Any) -> None:
    raw = {
        "server": {"host": "127.0.0.1", **server},
        "providers": {"emu": {"base_url": f"{emulator_url}/v1"}},
        "models": {
            name: {"provider": "emu", "model": upstream} for name, upstream in models.items()
        },
        "teams": {"t": {"keys": [TEAM_KEY], "models": ["*"]}},
        "access_log": True,
    }
    path.write_text(yaml.safe_dump(raw))


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def access_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                lines.append(orjson.loads(line))
        return lines


def get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {TEAM_KEY}"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_for(predicate: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def serve(config: Path, tmp_path: Path, *args: str) -> Iterator[Served]:
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
                *args,
            ],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    served = Served(process, port, log)
    workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200, "the proxy to be ready")
        # Every worker, not only the one that answered: each logs when it listens.
        wait_for(lambda: served.log_text().count(" listening on ") >= workers, "every worker")
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Stream:
    """A streamed chat request read event by event over a plain HTTP connection."""

    def __init__(self, port: int, model: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = orjson.dumps(
            {"model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
        )
        headers = {"Authorization": f"Bearer {TEAM_KEY}", "Content-Type": "application/json"}
        self.connection.request("POST", "/v1/chat/completions", body=body, headers=headers)
        self.response = self.connection.getresponse()
        assert self.response.status == 200

    def first_event(self) -> bytes:
        return self.response.readline()

    def rest(self) -> bytes:
        try:
            return self.response.read()
        except http.client.IncompleteRead as cut:
            return bytes(cut.partial)
        finally:
            self.connection.close()


def refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_drains_streams_in_flight_and_exits_0(
    paced: Servers, tmp_path: Path, workers: str
) -> None:
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"slow": SLOW})
    with serve(config, tmp_path, "--workers", workers) as served:
        stream = Stream(served.port, "slow")
        assert stream.first_event().startswith(b"data: ")
        served.process.send_signal(signal.SIGTERM)
        wait_for(lambda: refuses_connections(served.port), "the listener to close", 5)
        rest = stream.rest()
        assert rest.endswith(b"data: [DONE]\n\n"), rest[-200:]
        assert served.process.wait(15) == 0
        # The drained request was metered: its access log line has the upstream's counts.
        (line,) = [entry for entry in served.access_lines() if entry.get("model") == "slow"]
        assert line["status"] == 200 and line["usage_source"] == "upstream"
        assert line["completion_tokens"] == 8 and line["prompt_tokens"] == 13


def test_a_stream_longer_than_the_drain_time_is_cut_and_still_metered(
    paced: Servers, tmp_path: Path
) -> None:
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"slow": SLOW}, drain_seconds=0.5)
    with serve(config, tmp_path) as served:
        stream = Stream(served.port, "slow")
        assert stream.first_event().startswith(b"data: ")
        started = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        rest = stream.rest()
        assert b"[DONE]" not in rest
        assert served.process.wait(15) == 0
        assert time.monotonic() - started < 5
        (line,) = [entry for entry in served.access_lines() if entry.get("model") == "slow"]
        assert line["usage_source"] == "estimated" and line["completion_tokens"] > 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_drain_cuts_streams_at_drain_seconds_not_twice_that(
    paced: Servers, tmp_path: Path, workers: str
) -> None:
    """A Kubernetes grace period is computed from drain_seconds: streams still going then are
    cut then (aiohttp alone waited its shutdown timeout twice), and metered."""
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"slow": SLOW}, drain_seconds=0.6)
    with serve(config, tmp_path, "--workers", workers) as served:
        stream = Stream(served.port, "slow")  # about 1.8 s of events: longer than twice 0.6
        assert stream.first_event().startswith(b"data: ")
        started = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        rest = stream.rest()
        cut_after = time.monotonic() - started
        assert b"[DONE]" not in rest
        assert 0.5 <= cut_after < 1.1, cut_after
        assert served.process.wait(15) == 0
        (line,) = [entry for entry in served.access_lines() if entry.get("model") == "slow"]
        assert line["usage_source"] == "estimated" and line["completion_tokens"] > 0


def models_of(port: int) -> set[str]:
    status, body = get(port, "/v1/models")
    assert status == 200
    return {model["id"] for model in orjson.loads(body)["data"]}


def metric(port: int, name: str, **labels: str) -> float:
    status, body = get(port, "/metrics")
    assert status == 200
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_sighup_reloads_without_dropping_a_request(paced: Servers, tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"slow": SLOW})
    with serve(config, tmp_path, "--workers", "2") as served:
        stream = Stream(served.port, "slow")
        assert stream.first_event().startswith(b"data: ")
        write_config(config, paced.emulator_url, {"fresh": "friendli"})
        served.process.send_signal(signal.SIGHUP)
        # Both workers reload (a connection may land on either): fresh everywhere, slow gone.
        wait_for(lambda: all(models_of(served.port) == {"fresh"} for _ in range(6)), "the reload")
        assert stream.rest().endswith(b"data: [DONE]\n\n")  # the stream in flight finished
        assert get(served.port, "/v1/models")[0] == 200

        config.write_text("providers: {}\nmodels: nope\n")
        served.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: metric(served.port, "llm_proxy_config_reloads_total", result="failure") == 2,
            "refusals",
        )
        assert "refused, the configuration in force stays" in served.log_text()
        assert "providers: must be a non-empty mapping" in served.log_text()
        assert all(models_of(served.port) == {"fresh"} for _ in range(6))
        assert metric(served.port, "llm_proxy_config_reloads_total", result="success") == 2
        assert served.process.poll() is None


def test_watch_reloads_when_the_file_changes(paced: Servers, tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"first": "friendli"})
    with serve(config, tmp_path, "--watch", "0.1") as served:
        assert models_of(served.port) == {"first"}
        time.sleep(0.05)  # a different mtime even on coarse clocks
        write_config(config, paced.emulator_url, {"first": "friendli", "second": "openai"})
        wait_for(lambda: models_of(served.port) == {"first", "second"}, "the watched reload", 10)


def test_shutdown_delay_keeps_serving_not_ready_before_the_listener_closes(
    paced: Servers, tmp_path: Path
) -> None:
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"first": "friendli"}, shutdown_delay=1.5)
    with serve(config, tmp_path) as served:
        served.process.send_signal(signal.SIGTERM)
        wait_for(lambda: get(served.port, "/readyz")[0] == 503, "/readyz to turn 503", 5)
        assert get(served.port, "/healthz")[0] == 200  # alive, and still answering
        assert models_of(served.port) == {"first"}
        wait_for(lambda: refuses_connections(served.port), "the listener to close", 5)
        assert served.process.wait(15) == 0


def _worker_pids(served: Served) -> list[int]:
    return [int(pid) for pid in re.findall(r"worker (\d+) listening on ", served.log_text())]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_workers_stop_when_their_supervisor_is_killed(paced: Servers, tmp_path: Path) -> None:
    """kill -9 of the supervisor: its workers drain and exit rather than serve on, beside a
    new server, with the configuration they had."""
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"slow": SLOW}, drain_seconds=0.5)
    with serve(config, tmp_path, "--workers", "2") as served:
        workers = _worker_pids(served)
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        served.process.kill()
        served.process.wait(5)
        wait_for(lambda: not any(_alive(pid) for pid in workers), "the workers to exit", 10)
        assert refuses_connections(served.port)


def _catches_sighup(pid: int) -> bool:
    """Whether the process has a handler of its own for SIGHUP (Linux: /proc's SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("SigCgt:", "SigIgn:")) and int(line.split()[1], 16) & 1:
            return True
    return False


def test_sighup_while_workers_start_kills_none(paced: Servers, tmp_path: Path) -> None:
    """A reload signal sent as often as a deploy script might, from the moment the server is
    started: every worker comes up and stays up (SIGHUP's default action ends a process)."""
    config = tmp_path / "proxy.yaml"
    write_config(config, paced.emulator_url, {"slow": SLOW})
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--config", str(config), "--port",
             str(port), "--workers", "2"],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        # From the moment the supervisor catches SIGHUP itself (before, it is no worker's
        # matter): its workers are starting then.
        wait_for(lambda: _catches_sighup(process.pid), "the supervisor's handler", 10)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            process.send_signal(signal.SIGHUP)
            time.sleep(0.05)
        wait_for(lambda: log.read_text().count(" listening on ") >= 2, "both workers", 10)
        text = log.read_text()
        assert "exited" not in text and "died" not in text, text[-2000:]
        assert get(port, "/readyz")[0] == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)
