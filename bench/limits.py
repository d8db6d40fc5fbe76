"""What team limits (or OpenTelemetry traces) cost on the hot path (not a test).

    python bench/limits.py [--rounds 5] [--seconds 5] [--workers 1] [--telemetry]

One nginx upstream (bench/canned.py) and three ``llm-proxy serve`` of the working tree in front
of it, with the same configuration but for the bench team's limits:

    off     no limits (the baseline; the usage ledger is still kept, in the process)
    memory  every limit on (requests and tokens per minute, concurrency, a token budget), far
            too high to refuse anything, counted in the server: in the worker with one worker,
            in the supervisor's store with several (``--workers 2``)
    redis   the same limits in a real redis-server (Debian's package) on loopback

Each round starts the three afresh, then runs plain-1 (p50 latency, one connection) and
plain-64 (64 connections) on each, in an order that turns every round. Fresh processes, as
pyperf spawns them: two processes of one configuration differ by up to 7 % of CPU per request
for as long as they live (memory layout, hash seeds), a bias that kept processes would carry
into every round's ratio. Prints, per profile, each one's median figure and its CPU per request
(the proxy's processes, from /proc), and the median over rounds of its ratio to off's in the
same round: latency added at plain-1 (ms), CPU per request at plain-64 (x), with the
quartiles of the rounds' CPU ratios in brackets.

``--telemetry`` compares traces instead (docs/telemetry.md), against a local OTLP/HTTP receiver
that accepts and discards (bench/otlp_sink.py, a process of its own):

    off     no telemetry
    otel-1  ``telemetry.otlp`` with ``sample_ratio: 1.0``: every request traced and exported
    otel-01 ``sample_ratio: 0.01``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import canned
import gateways
import load
from ab import measure
from gateways import Gateway
from procs import Service, free_port, wait_http

PROFILES = ("plain-1", "plain-64")
WARM_UP_SECONDS = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--telemetry", action="store_true", help="traces, not limits")
    args = parser.parse_args()
    profiles = [load.PROFILES[name] for name in PROFILES]
    with tempfile.TemporaryDirectory(prefix="limits-") as tmp_name:
        tmp = Path(tmp_name)
        nginx, nginx_port = canned.start_upstream(tmp)
        services = ExitStack()
        sides: Sequence[Side]
        if args.telemetry:
            sink = services.enter_context(_sink(tmp))
            sides = (("off", "", ""), ("otel-1", "", _otlp(sink, 1.0)),
                     ("otel-01", "", _otlp(sink, 0.01)))  # fmt: skip
        else:
            redis, redis_port = gateways.start_redis(tmp)
            services.callback(redis.stop)
            state = f"state: {{redis: 'redis://127.0.0.1:{redis_port}/0'}}"
            sides = (("off", "", ""), ("memory", gateways.TEAM_LIMITS, ""),
                     ("redis", gateways.TEAM_LIMITS, state))  # fmt: skip
        results: dict[str, dict[str, list[tuple[float, float] | None]]] = {
            name: {p.name: [] for p in profiles} for name, _, _ in sides
        }
        try:
            for number in range(args.rounds):
                turn = number % len(sides)
                order = sides[turn:] + sides[:turn]
                started = start_all(nginx_port, args.workers, tmp, order, profiles)
                try:
                    for profile in profiles:
                        for gateway in started:
                            results[gateway.name][profile.name].append(
                                measure(gateway, profile, args.seconds)
                            )
                finally:
                    for gateway in started:
                        gateway.stop()
                print(f"round {number + 1}/{args.rounds} done", flush=True)
        finally:
            services.close()
            nginx.stop()
    report(args, results)
    return 0


# (name, the bench team's limits, a line of configuration to add)
Side = tuple[str, str, str]


class _Sink:
    def __init__(self, service: Service, port: int) -> None:
        self.service = service
        self.port = port

    def __enter__(self) -> int:
        return self.port

    def __exit__(self, *_: object) -> None:
        self.service.stop()


def _sink(tmp: Path) -> _Sink:
    port = free_port()
    here = Path(__file__).resolve().parent
    service = Service(
        "otlp-sink", [sys.executable, str(here / "otlp_sink.py"), str(port)], tmp / "sink.log"
    )
    wait_http(f"http://127.0.0.1:{port}/", service, 30)
    return _Sink(service, port)


def _otlp(port: int, ratio: float) -> str:
    return f"telemetry: {{otlp: {{endpoint: 'http://127.0.0.1:{port}', sample_ratio: {ratio}}}}}"


def start_all(
    nginx_port: int,
    workers: int,
    tmp: Path,
    sides: Sequence[Side],
    profiles: list[load.Profile],
) -> list[Gateway]:
    """The sides' gateways, started, checked and warmed up (not counted)."""
    started: list[Gateway] = []
    try:
        for name, limits, extra in sides:
            gateway = gateways.start_ours(
                nginx_port, workers, tmp, None, name, limits, extra=[extra] if extra else []
            )
            started.append(gateway)
            problem = load.check_request(gateway, "plain")
            if problem is not None:
                raise SystemExit(f"{gateway.name} answers wrongly: {problem}")
            for profile in profiles:
                load.run_wrk(gateway, profile, WARM_UP_SECONDS)
    except BaseException:
        for gateway in started:
            gateway.stop()
        raise
    return started


def report(
    args: argparse.Namespace, results: dict[str, dict[str, list[tuple[float, float] | None]]]
) -> None:
    store = "the worker" if args.workers == 1 else "the supervisor's store"
    print(f"\n{args.rounds} rounds of {args.seconds} s, {args.workers} worker(s); memory = {store}")
    for profile in PROFILES:
        base = results["off"][profile]
        for name, by_profile in results.items():
            rounds = by_profile[profile]
            pairs = [(b, r) for b, r in zip(base, rounds, strict=True) if b and r]
            if not pairs:
                print(f"  {profile:9} {name:7} no figures")
                continue
            value = statistics.median(r[0] for _, r in pairs)
            cpu = statistics.median(r[1] for _, r in pairs)
            ratios = sorted(r[1] / b[1] for b, r in pairs)
            cpu_ratio = statistics.median(ratios)
            # The middle half of the rounds' ratios: how far one round's figure can be trusted.
            low, high = (ratios[0], ratios[-1]) if len(ratios) < 4 else quartiles(ratios)
            if profile == "plain-1":
                added = statistics.median(r[0] - b[0] for b, r in pairs)
                extra = f"added p50 {added:+.3f} ms"
                figure = f"p50 {value:7.3f} ms"
            else:
                extra = f"rate {statistics.median(r[0] / b[0] for b, r in pairs):5.3f}x"
                figure = f"{value:9.0f} /s"
            print(f"  {profile:9} {name:7} {figure}  CPU {cpu:6.1f} us  CPU {cpu_ratio:5.3f}x"
                  f" ({low:5.3f}-{high:5.3f})  {extra}")  # fmt: skip


def quartiles(values: list[float]) -> tuple[float, float]:
    first, _, third = statistics.quantiles(values, n=4)
    return first, third


if __name__ == "__main__":
    sys.exit(main())
