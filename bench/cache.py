"""What the response cache adds to a hit's latency and to a miss's CPU (not a test).

    python bench/cache.py [--rounds 5] [--seconds 3] [--workers 1]

One nginx upstream (bench/canned.py) and two ``llm-proxy serve`` of the working tree in front
of it, with the same configuration but for a ``cache`` section:

    off     no cache (the baseline)
    cache   ``cache: {backend: memory}``: each worker's LRU of 10,000 entries

Each round starts both afresh (as bench/limits.py does, for the same reason), warms them up,
then runs each load on each side in an order that turns every round:

    hit-1    plain-1: the same request again and again over one connection, on direct (nginx
             itself), off and cache (where every request after the first is a hit)
    hit-64   the same request over 64 connections, on off and cache
    miss-64  64 connections, each request with a ``seed`` of its own, so a key of its own: on
             cache every one is a miss, looked up, relayed and stored (past 10,000 entries, the
             oldest evicted); off gets the same bodies

Prints, per load and side, the median figure (p50 for hit-1, requests/s otherwise) and CPU per
request (the proxy's processes, from /proc), and the median over rounds of each round's own
comparison: hit-1's p50 added to direct's and to off's (ms; the target: a hit adds at most
0.3 ms to direct), hit-64's and miss-64's CPU per request over off's (x; the target: a miss
costs at most 1.05x), with the quartiles of the rounds' ratios in brackets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import canned
import gateways
import load
from gateways import Gateway
from procs import cpu_seconds
from report import figure

CACHE = "{backend: memory}"
WARM_UP_SECONDS = 2
# post.lua, but each request with a seed of its own: the body's first key, before the others.
VARIED = """
local seed = {first}
function request()
  seed = seed + 1
  return wrk.format(nil, nil, nil, '{{"seed":' .. seed .. ',' .. string.sub(wrk.body, 2))
end
"""
# Seeds a run of wrk takes at most: each run starts past the last one's, on a server that lives
# for the round.
SEEDS_PER_RUN = 10**8


@dataclass(frozen=True)
class Load:
    name: str
    profile: load.Profile
    varied: bool  # every request a key of its own
    direct: bool  # measured on nginx itself too


LOADS = (
    Load("hit-1", load.PROFILES["plain-1"], varied=False, direct=True),
    Load("hit-64", load.PROFILES["plain-64"], varied=False, direct=False),
    Load("miss-64", load.PROFILES["plain-64"], varied=True, direct=False),
)
# By load, by side: each round's (figure, CPU µs per request), None where the run failed.
Results = dict[str, dict[str, list[tuple[float, float] | None]]]


class Scripts:
    """The wrk scripts of the runs: post.lua itself, or a copy whose seeds no earlier run of
    this benchmark sent."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runs = 0

    def for_load(self, varied: bool) -> Path:
        if not varied:
            return load.WRK_SCRIPT
        self.runs += 1
        script = self.tmp / f"varied-{self.runs}.lua"
        first = self.runs * SEEDS_PER_RUN
        script.write_text(load.WRK_SCRIPT.read_text() + VARIED.format(first=first))
        return script


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    results: Results = {
        item.name: {side: [] for side in ("direct", "off", "cache")} for item in LOADS
    }
    with tempfile.TemporaryDirectory(prefix="cache-") as tmp_name:
        tmp = Path(tmp_name)
        scripts = Scripts(tmp)
        nginx, nginx_port = canned.start_upstream(tmp)
        direct = gateways.direct(nginx, nginx_port)
        sides = (("off", ""), ("cache", CACHE))
        try:
            for number in range(args.rounds):
                turn = number % len(sides)
                order = sides[turn:] + sides[:turn]
                started = start_all(nginx_port, args.workers, tmp, order, scripts)
                try:
                    for item in LOADS:
                        measured = list(started)
                        if item.direct:  # first, then last: as the sides, turned
                            measured.insert(len(measured) if number % 2 else 0, direct)
                        for gateway in measured:
                            script = scripts.for_load(item.varied)
                            results[item.name][gateway.name].append(
                                measure(gateway, item.profile, args.seconds, script)
                            )
                finally:
                    for gateway in started:
                        gateway.stop()
                print(f"round {number + 1}/{args.rounds} done", flush=True)
        finally:
            nginx.stop()
    report(args, results)
    return 0


def start_all(
    nginx_port: int, workers: int, tmp: Path, sides: Sequence[tuple[str, str]], scripts: Scripts
) -> list[Gateway]:
    """The sides' gateways, started, checked and warmed up (not counted)."""
    started: list[Gateway] = []
    try:
        for name, cache in sides:
            gateway = gateways.start_ours(nginx_port, workers, tmp, name=name, cache=cache)
            started.append(gateway)
            problem = load.check_request(gateway, "plain") or check_cache(gateway, bool(cache))
            if problem is not None:
                raise SystemExit(f"{gateway.name} answers wrongly: {problem}")
            for item in LOADS:
                script = scripts.for_load(item.varied)
                load.run_wrk(gateway, item.profile, WARM_UP_SECONDS, script)
    except BaseException:
        for gateway in started:
            gateway.stop()
        raise
    return started


def check_cache(gateway: Gateway, cached: bool) -> str | None:
    """None if the plain request is a hit (cached) or has no X-Cache (not), and a request of
    another seed a miss (cached)."""
    plain = gateway.body("plain")
    seeded = json.dumps({"seed": -1, **json.loads(plain)})
    wanted = [(plain, "hit" if cached else None), (seeded, "miss" if cached else None)]
    for body, expected in wanted:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {gateway.key}"}
        request = urllib.request.Request(
            gateway.urls["plain"], data=body.encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            said = response.headers.get("X-Cache")
        if said != expected:
            return f"X-Cache {said!r} where {expected!r} was due"
    return None


def measure(
    gateway: Gateway, profile: load.Profile, seconds: int, script: Path
) -> tuple[float, float] | None:
    """The profile's figure, and the gateway's CPU time per request, in µs (as bench/ab.py)."""
    cpu = cpu_seconds(gateway.processes())
    outcome = load.run_wrk(gateway, profile, seconds, script)
    cpu = cpu_seconds(gateway.processes()) - cpu
    if outcome.failed or outcome.errors or not outcome.requests:
        problem = outcome.failed or outcome.errors or "no request completed"
        print(f"  {gateway.name} {profile.name}: {problem}", flush=True)
        return None
    value = figure(profile.name, outcome)
    return (value, 1e6 * cpu / outcome.requests) if value is not None else None


def report(args: argparse.Namespace, results: Results) -> None:
    print(f"\n{args.rounds} rounds of {args.seconds} s, {args.workers} worker(s); medians")
    for item in LOADS:
        by_side = results[item.name]
        for side, rounds in by_side.items():
            done = [r for r in rounds if r is not None]
            if not done:
                continue
            value = statistics.median(v for v, _ in done)
            cpu = statistics.median(c for _, c in done)
            shown = f"p50 {value:7.3f} ms" if item.profile.connections == 1 else f"{value:7.0f} /s"
            cpu_shown = f"CPU {cpu:6.1f} us" if side != "direct" else ""
            print(f"  {item.name:8} {side:6} {shown}  {cpu_shown}")
        off, cache = by_side["off"], by_side["cache"]
        pairs = [(b, r) for b, r in zip(off, cache, strict=True) if b and r]
        if not pairs:
            print(f"  {item.name:8} no figures to compare")
            continue
        ratios = sorted(r[1] / b[1] for b, r in pairs)
        low, high = (ratios[0], ratios[-1]) if len(ratios) < 4 else quartiles(ratios)
        line = f"  {item.name:8} cache/off CPU {statistics.median(ratios):5.3f}x"
        line += f" ({low:5.3f}-{high:5.3f}, {len(pairs)} rounds)"
        if item.direct:
            base = by_side["direct"]
            over_direct = [r[0] - d[0] for d, r in zip(base, cache, strict=True) if d and r]
            over_off = [r[0] - b[0] for b, r in pairs]
            line += f"; a hit adds p50 {statistics.median(over_direct):+.3f} ms to direct"
            line += f", {statistics.median(over_off):+.3f} ms to off"
        else:
            rate = statistics.median(r[0] / b[0] for b, r in pairs)
            line += f"; rate {rate:5.3f}x"
        print(line)


def quartiles(values: list[float]) -> tuple[float, float]:
    first, _, third = statistics.quantiles(values, n=4)
    return first, third


if __name__ == "__main__":
    sys.exit(main())
