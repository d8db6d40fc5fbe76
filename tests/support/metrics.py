"""What the metrics tests share: the emulator in a thread, the proxy in process or as
``llm-proxy serve --workers N``, scraping and reading an exposition, and expected usage.

Subprocesses are always stopped (``finally``), every wait is bounded, every port is free.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from proxy.core.config import Config, parse_config
from proxy.emulator import build_emulator_app
from proxy.http.app import Gateway
from proxy.ops.metrics import Exposition, metrics_routes
from proxy.ops.outlet import Outlet
from proxy.ops.server import make_observers
from tests.support.harness import LoopThread, free_port, start_site
from tests.support.replay import FIXTURES, GOLDEN

ROOT = Path(__file__).resolve().parents[2]
CLI = (sys.executable, "-m", "proxy")
ALPHA_KEY = "sk-metrics-alpha"
BETA_KEY = "sk-metrics-beta"
TEAMS = {
    "alpha": {"keys": [ALPHA_KEY], "models": ["*"]},
    "beta": {"keys": [BETA_KEY], "models": ["*"]},
}
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello"}]

Series = tuple[str, frozenset[tuple[str, str]]]


# --- expected usage --------------------------------------------------------------------------


def golden_usage(fixture: str) -> dict[str, int]:
    """The usage a client must get for ``fixture`` (tests/golden), as metered token counts."""
    usage = orjson.loads((GOLDEN / f"{fixture}.json").read_bytes())["usage"]
    return {
        "prompt": usage["prompt_tokens"],
        "completion": usage["completion_tokens"],
        "cached": usage["cached_tokens"] or 0,
        "reasoning": usage["reasoning_tokens"] or 0,
    }


def complete_events(fixture: str, size: int) -> list[dict[str, Any]]:
    """The JSON events of ``fixture`` that end within its first ``size`` bytes: what an upstream
    that stops after ``size`` bytes has said."""
    head = (FIXTURES / fixture).read_bytes()[:size].replace(b"\r\n", b"\n")
    events = []
    for block in head.split(b"\n\n")[:-1]:  # the last piece has no end of event yet
        data = b"".join(
            line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
        )
        if data and data != b"[DONE]":
            events.append(orjson.loads(data))
    return events


# --- the proxy in this process ---------------------------------------------------------------


def config_for(emulator_url: str, models: Mapping[str, Any], **extra: Any) -> Config:
    raw: dict[str, Any] = {
        "providers": {
            "emu": {"base_url": f"{emulator_url}/v1"},
            "emu-b": {"base_url": f"{emulator_url}/v1"},
            "emu-fast": {
                "base_url": f"{emulator_url}/v1",
                "timeouts": {"connect": 2, "first_byte": 1, "idle": 1, "total": 3},
            },
            "down": {"base_url": f"http://127.0.0.1:{free_port()}/v1", "timeouts": {"connect": 2}},
        },
        "models": dict(models),
        "teams": TEAMS,
        "access_log": False,
        # One attempt per request: these tests count requests and their failures one by one.
        "routing": {"attempts": 1},
    }
    raw.update(extra)
    return parse_config(yaml.safe_load(yaml.safe_dump(raw)), {})


@dataclass
class Metered:
    """A proxy with its metrics, in front of the emulator, on the test's loop thread."""

    url: str  # the base URL, …/v1
    root: str  # http://127.0.0.1:<port>
    registry: CollectorRegistry
    config: Config

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name`` over the series that have ``labels`` (0 if there is none)."""
        return total(read_samples(Exposition(self.registry).render().decode()), name, **labels)


@dataclass
class Stage:
    """The emulator (serving tests/fixtures/providers) and any number of metered proxies."""

    loop: LoopThread
    emulator_url: str
    runners: list[web.BaseRunner] = field(default_factory=list)
    # The proxies' access logs' outlets, closed with the stage: each holds a descriptor of its
    # own (the reopened ``access_log_fd``).
    outlets: list[Outlet] = field(default_factory=list)

    def proxy(self, models: Mapping[str, Any], *, access_log_fd: int = 2, **extra: Any) -> Metered:
        config = config_for(self.emulator_url, models, **extra)
        registry = CollectorRegistry()
        routes = metrics_routes(Exposition(registry), config.metrics.token)
        outlet = None
        if config.access_log:
            outlet = Outlet(access_log_fd)
            self.outlets.append(outlet)
        observers = make_observers(config, registry, outlet)
        gateway = Gateway(config, observers=observers, extra_routes=routes)
        port = free_port()
        self.runners.append(self.loop.call(lambda: start_site(gateway, port)))
        root = f"http://127.0.0.1:{port}"
        return Metered(root + "/v1", root, registry, config)


@contextmanager
def stage(recordings: Path = FIXTURES) -> Iterator[Stage]:
    loop = LoopThread()
    port = free_port()
    built = Stage(loop, f"http://127.0.0.1:{port}")
    try:
        emulator = build_emulator_app(recordings)
        built.runners.append(loop.call(lambda: start_site(emulator, port)))
        yield built
    finally:
        # Proxies first, the emulator (the first runner) last. The access logs' outlets once
        # the loop that writes to them has stopped, so that no other thread touches them
        # meanwhile. (Lines an access log still held, within its batch, are not handed over:
        # the tests read their lines while the proxy runs.)
        for runner in reversed(built.runners):
            loop.call(runner.cleanup)
        loop.stop()
        for outlet in built.outlets:
            outlet.close()


# --- the proxy as `llm-proxy serve` ----------------------------------------------------------


def write_config(path: Path, emulator_url: str, models: Mapping[str, Any], **extra: Any) -> Path:
    raw: dict[str, Any] = {
        "providers": {
            "emu": {"base_url": f"{emulator_url}/v1"},
            "emu-b": {"base_url": f"{emulator_url}/v1"},
        },
        "models": dict(models),
        "teams": TEAMS,
        "access_log": False,
        # One attempt per request: these tests count requests and their failures one by one.
        "routing": {"attempts": 1},
    }
    raw.update(extra)
    path.write_text(yaml.safe_dump(raw))
    return path


@dataclass
class Served:
    process: subprocess.Popen[str]
    port: int
    tmpdir: Path  # TMPDIR of the run: its multiprocess directory is made in here
    lines: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics_dirs(self) -> list[Path]:
        return sorted(self.tmpdir.glob("llm-proxy-metrics-*"))


def _drain(stream: Any, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


def wait_for(
    predicate: Callable[[], bool],
    what: str,
    seconds: float = 20.0,
    said: Callable[[], str] | None = None,
) -> None:
    """Poll ``predicate``; on timeout, fail with ``said()`` (what the process wrote) if given."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            told = f":\n{said()}" if said is not None else ""
            raise AssertionError(f"timed out after {seconds:g} s waiting for {what}{told}")
        time.sleep(0.05)


@contextmanager
def serve(config: Path, workers: int, tmpdir: Path) -> Iterator[Served]:
    """``llm-proxy serve --workers N``, until every worker listens; SIGTERM (then SIGKILL) after."""
    port = free_port()
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [*CLI, "serve", "--config", str(config), "--port", str(port), "--workers", str(workers)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=_drain, args=(process.stderr, lines), daemon=True)
    reader.start()
    served = Served(process, port, tmpdir, lines)
    try:
        wait_for(
            lambda: (
                process.poll() is not None
                or sum(" listening on " in line for line in lines) >= workers
            ),
            "the workers to listen",
            # Spawned interpreters importing the package: seconds when four test processes
            # share two cores, and a failure must show what the workers said meanwhile.
            seconds=60.0,
            said=lambda: "".join(lines),
        )
        assert process.poll() is None, "".join(lines)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        reader.join(10)
        if process.stderr is not None:
            process.stderr.close()


def worker_pids(served: Served) -> list[int]:
    """The pids of the supervisor's live worker processes (Linux /proc)."""
    pid = served.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children if _is_worker(int(child))]


def _is_worker(pid: int) -> bool:
    # multiprocessing's spawn also starts a resource tracker; a worker runs spawn_main.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return b"spawn_main" in cmdline and b"resource_tracker" not in cmdline


# --- scraping and reading an exposition ------------------------------------------------------


def scrape(url: str, token: str | None = None) -> str:
    """GET ``url`` on a new connection (so that with workers, any of them may answer)."""
    request = urllib.request.Request(url, headers={"Connection": "close"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        body: bytes = response.read()
        return body.decode()


def read_samples(text: str) -> dict[Series, float]:
    """Every sample of an exposition, by (sample name, labels)."""
    out: dict[Series, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def total(samples: Mapping[Series, float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def http_status(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


# --- The metrics reference (docs/metrics.md) -------------------------------------------------

METRICS_DOC = ROOT / "docs" / "metrics.md"


def readme_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """The metrics table of docs/metrics.md: name -> (type, label names)."""
    text = METRICS_DOC.read_text(encoding="utf-8")
    section = text.split("<!-- metrics:start -->", 1)[1].split("<!-- metrics:end -->", 1)[0]
    table: dict[str, tuple[str, frozenset[str]]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`llm_proxy_"):
            continue
        labels = frozenset(label.strip(" `") for label in cells[2].split(",") if label.strip())
        table[cells[0].strip("`")] = (cells[1], labels)
    return table


def exposed_metrics(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """An exposition's metrics as docs/metrics.md names them: name -> (type, label names)."""
    families = list(text_string_to_metric_families(text))
    typed = {family.name: family.type for family in families}
    exposed: dict[str, tuple[str, frozenset[str]]] = {}
    for family in families:
        base = family.name.removesuffix("_created")
        if base != family.name and typed.get(base) in ("counter", "histogram"):
            continue  # the _created series of a counter or histogram (one process only)
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = frozenset(key for sample in family.samples for key in sample.labels) - {"le"}
        exposed[name] = (family.type, labels)
    return exposed
