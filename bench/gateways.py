"""What bench/run.py measures: the canned upstream called directly, our proxy, the framework's
floor (bench/floor.py: aiohttp with nothing of ours) and the peers.

Each gateway is started by a function that returns a ``Gateway``: where to send each kind of
request (``plain``, ``stream``, ``slow``: see bench/canned.py), with which model and key, and
which processes are its own (for their memory). Every gateway points at the same nginx.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from procs import Service, cmdline, descendants, free_port, wait_http

KEY = "sk-bench"
# The bench team's limits where a benchmark turns them on (bench/limits.py, bench/ab.py): every
# one, far too high to refuse anything.
TEAM_LIMITS = (
    "{requests_per_minute: 1000000000, tokens_per_minute: 1000000000000, concurrency: 100000,"
    " budget: {tokens: 1000000000000000, period: month}}"
)
# An upstream that refuses every request (bench/canned.py): what failed requests cost.
ERROR = "error"
KINDS = ("plain", "stream", "slow", ERROR)
BENCH = Path(__file__).resolve().parent


@dataclass
class Gateway:
    name: str
    service: Service | None
    urls: dict[str, str]
    models: dict[str, str]
    key: str
    root_pid: int
    note: str = ""

    def processes(self) -> list[int]:
        return descendants(self.root_pid)

    def workers(self) -> list[int]:
        """The processes that serve requests (not a supervisor or a resource tracker)."""
        tree = self.processes()
        if len(tree) == 1:
            return tree
        return [pid for pid in tree[1:] if "resource_tracker" not in cmdline(pid)]

    def body(self, kind: str) -> str:
        return request_body(self.models[kind], stream=kind in ("stream", "slow"))

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()


def request_body(model: str, *, stream: bool) -> str:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": "Invent a holiday and describe its traditions."}],
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return json.dumps(body)


def upstream_base(nginx_port: int, kind: str) -> str:
    return f"http://127.0.0.1:{nginx_port}/{kind}/v1"


def direct(nginx: Service, nginx_port: int) -> Gateway:
    urls = {k: upstream_base(nginx_port, k) + "/chat/completions" for k in KINDS}
    return Gateway(
        "direct",
        None,
        urls,
        dict.fromkeys(KINDS, "bench"),
        "",
        nginx.pid,
        "nginx, 1 worker",
    )


def start_ours(
    nginx_port: int,
    workers: int,
    out: Path,
    source: Path | None = None,
    name: str = "ours",
    limits: str = "",
    state: str = "",
    prefix: Sequence[str] = (),
    start_seconds: float = 90.0,
    cache: str = "",
    extra: Sequence[str] = (),
) -> Gateway:
    """``llm-proxy serve`` in front of nginx; ``source``: a checkout whose ``proxy`` package
    to run instead of the installed one (bench/ab.py compares two); ``limits``, ``state``: the
    bench team's limits and the state store, as YAML flow mappings (bench/limits.py);
    ``prefix``: what runs the server (valgrind, for bench/instructions.py); ``cache``: the
    ``cache`` section, a YAML flow mapping (bench/cache.py); ``extra``: lines of
    configuration to add (``telemetry:``, bench/limits.py --telemetry)."""
    port = free_port()
    config = out / f"{name}.yaml"
    team_limits = f", limits: {limits}" if limits else ""
    lines = [
        f"server: {{host: 127.0.0.1, port: {port}, workers: {workers}, drain_seconds: 5}}",
        "metrics: {enabled: true}",
        "access_log: true",
        "providers:",
        *(
            f"  {k}: {{base_url: '{upstream_base(nginx_port, k)}', api_key: sk-upstream-bench}}"
            for k in KINDS
        ),
        "models:",
        *(f"  bench-{k}: {{provider: {k}, model: bench}}" for k in KINDS),
        f"teams: {{bench: {{keys: [{KEY}], models: ['*']{team_limits}}}}}",
        *([f"state: {state}"] if state else []),
        *([f"cache: {cache}"] if cache else []),
        *extra,
    ]
    config.write_text("\n".join(lines) + "\n")
    # The access log (stderr) goes to a file: run.py reads every status in it afterwards.
    service = Service(
        name,
        [*prefix, sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        out / f"{name}.log",
        env={"PYTHONPATH": str(source)} if source is not None else None,
        # Run from the checkout: ``python -m`` puts its working directory first on sys.path,
        # ahead of PYTHONPATH, so started from the repository's root both sides of bench/ab.py
        # would run the working tree's package.
        cwd=source,
    )
    wait_http(f"http://127.0.0.1:{port}/readyz", service, start_seconds)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    return Gateway(
        name,
        service,
        dict.fromkeys(KINDS, url),
        {k: f"bench-{k}" for k in KINDS},
        KEY,
        service.pid,
        f"llm-proxy, {workers} workers, metrics and access log on",
    )


def start_redis(tmp: Path) -> tuple[Service, int]:
    """A redis-server (Debian's package) on loopback, without persistence, and its port."""
    program = shutil.which("redis-server")
    if program is None:
        raise SystemExit("redis-server is not installed (Debian package redis-server)")
    port = free_port()
    argv = [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp)]
    service = Service("redis", argv, tmp / "redis.log")
    for _ in range(100):
        if "Ready to accept connections" in service.log.read_text(errors="replace"):
            return service, port
        time.sleep(0.05)
    raise SystemExit(f"redis-server did not start: {service.log.read_text(errors='replace')}")


def start_floor(nginx_port: int, workers: int, out: Path, *, lean: bool = False) -> Gateway:
    """bench/floor.py: aiohttp server and client on uvloop passing requests through, nothing
    else; what our proxy would cost if it did nothing. ``lean``: aiohttp used as the proxy uses
    it (the low-level server, no ClientSession) instead of the usual way."""
    port = free_port()
    service = Service(
        "floor",
        [
            sys.executable,
            str(BENCH / "floor.py"),
            "--upstream",
            f"http://127.0.0.1:{nginx_port}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            *(["--lean"] if lean else []),
        ],
        out / "floor.log",
    )
    wait_http(f"http://127.0.0.1:{port}/healthz", service)
    versions = ", ".join(f"{name} {_version(name)}" for name in ("aiohttp", "uvloop"))
    how = (
        "low-level server + connector without ClientSession (--lean)"
        if lean
        else "aiohttp server + aiohttp client"
    )
    return Gateway(
        "floor",
        service,
        {k: f"http://127.0.0.1:{port}/{k}/v1/chat/completions" for k in KINDS},
        dict.fromkeys(KINDS, "bench"),
        "",
        service.pid,
        f"bench/floor.py: {how} on uvloop ({versions}), {workers} workers, no logic: the"
        " framework's floor",
    )


def start_litellm(nginx_port: int, workers: int, out: Path, venv: Path) -> Gateway:
    port = free_port()
    config = out / "litellm.yaml"
    models = "\n".join(
        f"  - model_name: bench-{k}\n"
        f"    litellm_params: {{model: openai/bench, api_base: '{upstream_base(nginx_port, k)}',"
        " api_key: sk-upstream-bench}"
        for k in KINDS
    )
    config.write_text(f"model_list:\n{models}\ngeneral_settings:\n  master_key: {KEY}\n")
    service = Service(
        "litellm",
        [
            str(venv / "bin" / "litellm"),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            str(workers),
        ],
        out / "litellm.log",
        # The cost map ships in the wheel; without this it is fetched from the network.
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", service, seconds=180)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    return Gateway(
        "litellm",
        service,
        dict.fromkeys(KINDS, url),
        {k: f"bench-{k}" for k in KINDS},
        KEY,
        service.pid,
        f"litellm[proxy] {package_version(venv, 'litellm')}, {workers} workers, no database",
    )


def start_tensorzero(nginx_port: int, out: Path, venv: Path) -> Gateway:
    config = out / "tensorzero.toml"
    sections = ["[gateway]\nobservability.enabled = false\n"]
    for k in KINDS:
        sections.append(
            f'[models.bench-{k}]\nrouting = ["nginx"]\n\n'
            f"[models.bench-{k}.providers.nginx]\n"
            f'type = "openai"\napi_base = "{upstream_base(nginx_port, k)}/"\n'
            f'model_name = "bench"\napi_key_location = "none"\n'
        )
    config.write_text("\n".join(sections))
    log = out / "tensorzero.log"
    service = Service(
        "tensorzero",
        [str(venv / "bin" / "python"), str(BENCH / "tensorzero_gateway.py"), str(config)],
        log,
        env={"RUST_LOG": "warn"},
    )
    base = _wait_for_line(service, "base_url ", 120)
    url = base + "/chat/completions"
    return Gateway(
        "tensorzero",
        service,
        dict.fromkeys(KINDS, url),
        {k: f"tensorzero::model_name::bench-{k}" for k in KINDS},
        "",
        service.pid,
        f"tensorzero {package_version(venv, 'tensorzero')} (wheel's embedded gateway over HTTP,"
        " observability off: no ClickHouse)",
    )


def _wait_for_line(service: Service, prefix: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not service.alive():
            raise RuntimeError(f"{service.name} exited while starting:\n{service.tail()}")
        for line in service.log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        time.sleep(0.2)
    raise RuntimeError(f"{service.name} printed no '{prefix}' within {seconds:g} s")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def package_version(venv: Path, name: str) -> str:
    for meta in (venv / "lib").glob(f"python*/site-packages/{name}-*.dist-info"):
        return meta.name[len(name) + 1 : -len(".dist-info")]
    return "?"
