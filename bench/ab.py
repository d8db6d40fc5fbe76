"""A/B: what a change bought, measured against its baseline in the same run (not a test).

    python bench/ab.py BASE [NEW] [--rounds 5] [--seconds 5] [--workers 2]
                       [--profiles plain-64,plain-1,stream-16] [--limits memory|redis]

BASE and NEW are git revisions of this repository (NEW defaults to the working tree as it is,
uncommitted changes included); each is checked out in a temporary worktree and served by its
own ``llm-proxy serve`` (N workers, metrics and access log on, the same configuration), both in
front of one nginx (bench/canned.py). The profiles then run on A and B in turns, the order
flipped every round, so that the noise of a shared machine falls on both alike; the report is
the median of the rounds for each and the ratio B/A, then the median of the rounds' own B/A
(steadier when the machine's speed drifts over the run). For plain-1 the figure is the p50
latency (lower is better); for the others, requests or streams per second. Beside it, the CPU
time the proxy's processes took per request or stream (from /proc, in clock ticks): less noisy
than a rate on a shared machine, it shows a change of a few per cent that a rate hides.

errors-64 (``--profiles errors-64``) is plain-64 against an upstream that refuses every request
with a 403: what failed requests cost.

``--limits``: both sides serve the bench team with every limit on (bench/limits.py's, too high
to refuse anything), counted in the server (``memory``) or in a local redis-server (``redis``,
Debian's package; a database for each side): what a change to the limits' hot path bought.

slow-1000 (``--profiles slow-1000``, alone or with the others) opens 1,000 slow streams at once
on each side in turn, as bench/run.py does; its figure is the time to first token at p99 (lower
is better). Give it ``--seconds 10`` or more: a slow stream lasts 2.65 s.

A full benchmark (bench/run.py) measures where the proxy stands; this measures one change.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import canned
import gateways
import load
from gateways import Gateway
from procs import cpu_seconds
from report import LATENCY, figure

ROOT = Path(__file__).resolve().parent.parent
# By gateway (A, B), by profile: each round's (figure, CPU µs per request or stream), None where
# the round's trial failed.
Results = dict[str, dict[str, list[tuple[float, float] | None]]]


@contextmanager
def checkout(revision: str | None, into: Path) -> Iterator[Path]:
    """The source tree of ``revision`` (None: the working tree itself)."""
    if revision is None:
        yield ROOT
        return
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(into), revision],
        check=True,
    )
    try:
        yield into
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(into)], check=False
        )


def measure(gateway: Gateway, profile: load.Profile, seconds: int) -> tuple[float, float] | None:
    """The profile's figure, and the gateway's CPU time per request (or stream), in µs."""
    cpu = cpu_seconds(gateway.processes())
    outcome = load.run_profile(gateway, profile, seconds)  # as bench/run.py loads them
    cpu = cpu_seconds(gateway.processes()) - cpu
    if outcome.failed or outcome.errors or not outcome.requests:
        problem = outcome.failed or outcome.errors or "no request completed"
        print(f"  {gateway.name} {profile.name}: {problem}", flush=True)
        return None
    value = figure(profile.name, outcome)
    return (value, 1e6 * cpu / outcome.requests) if value is not None else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the baseline's git revision")
    parser.add_argument("new", nargs="?", help="the revision to compare (default: work tree)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5, help="per profile, per round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--profiles", default="plain-64,plain-1,stream-16")
    parser.add_argument("--limits", choices=("memory", "redis"), help="the bench team's limits")
    args = parser.parse_args()
    known = load.PROFILES
    unknown = [name for name in args.profiles.split(",") if name not in known]
    if unknown:
        parser.error(f"unknown profiles {unknown}: choose from {', '.join(known)}")
    profiles = [known[name] for name in args.profiles.split(",")]
    if any(p.name == "soak" for p in profiles):
        parser.error("soak is a whole run of its own: use bench/run.py")

    with tempfile.TemporaryDirectory(prefix="ab-") as tmp_name:
        tmp = Path(tmp_name)
        nginx, nginx_port = canned.start_upstream(tmp)
        redis = None
        started: list[Gateway] = []
        try:
            team_limits, redis_port = "", 0
            if args.limits:
                team_limits = gateways.TEAM_LIMITS
            if args.limits == "redis":
                redis, redis_port = gateways.start_redis(tmp)
            with (
                checkout(args.base, tmp / "a") as source_a,
                checkout(args.new, tmp / "b") as source_b,
            ):
                for db, (name, source) in enumerate(zip("AB", (source_a, source_b), strict=True)):
                    state = f"{{redis: 'redis://127.0.0.1:{redis_port}/{db}'}}" if redis else ""
                    started.append(
                        gateways.start_ours(
                            nginx_port, args.workers, tmp, source, name, team_limits, state
                        )
                    )
                results = run_rounds(started, profiles, args.rounds, args.seconds)
                for gateway in started:
                    gateway.stop()
        finally:
            for gateway in started:
                gateway.stop()
            if redis is not None:
                redis.stop()
            nginx.stop()
    report(args, profiles, results)
    return 0


def run_rounds(
    pair: list[Gateway], profiles: list[load.Profile], rounds: int, seconds: int
) -> Results:
    results: Results = {g.name: {p.name: [] for p in profiles} for g in pair}
    for gateway in pair:
        for kind in {p.kind for p in profiles}:
            problem = load.check_request(gateway, kind)
            if problem is not None:
                raise SystemExit(f"{gateway.name} answers {kind} wrongly: {problem}")
        for profile in profiles:
            if profile.kind != "slow":
                load.run_wrk(gateway, profile, 2)  # warm-up, not counted (as bench/run.py does)
    for round_number in range(rounds):
        order = pair if round_number % 2 == 0 else pair[::-1]
        for profile in profiles:
            for gateway in order:
                results[gateway.name][profile.name].append(measure(gateway, profile, seconds))
        figures = ", ".join(
            f"{p.name} {_last(results['A'][p.name])} -> {_last(results['B'][p.name])}"
            for p in profiles
        )
        print(f"round {round_number + 1}/{rounds}: {figures}", flush=True)
    return results


def _last(values: list[tuple[float, float] | None]) -> str:
    last = values[-1] if values else None
    return f"{last[0]:.4g} ({last[1]:.0f} µs)" if last is not None else "-"


def report(args: argparse.Namespace, profiles: list[load.Profile], results: Results) -> None:
    print(f"\nA = {args.base}, B = {args.new or 'working tree'}; medians of {args.rounds} rounds")
    print("  (CPU: the workers' and supervisor's CPU time per request or stream, user and system;")
    print("  rounds: the median of each round's own B/A, A and B taken in the same minutes)")
    for profile in profiles:
        by_round = list(zip(results["A"][profile.name], results["B"][profile.name], strict=True))
        a = [x for x, _ in by_round if x is not None]
        b = [y for _, y in by_round if y is not None]
        pairs = [(x, y) for x, y in by_round if x is not None and y is not None]
        if not a or not b:
            print(f"  {profile.name:10} no figures")
            continue
        median_a = statistics.median(v for v, _ in a)
        median_b = statistics.median(v for v, _ in b)
        cpu_a = statistics.median(c for _, c in a)
        cpu_b = statistics.median(c for _, c in b)
        latency = LATENCY.get(profile.name)
        unit = f"ms {latency}" if latency else "/s"
        print(
            f"  {profile.name:10} A {median_a:10.3f} {unit:6}  B {median_b:10.3f} {unit:6}"
            f"  B/A {median_b / median_a:5.3f}   CPU A {cpu_a:6.1f} µs  B {cpu_b:6.1f} µs"
            f"  B/A {cpu_b / cpu_a:5.3f}"
        )
        # On a machine whose speed drifts from minute to minute, the ratio within a round is
        # steadier than the ratio of medians taken over different minutes.
        if not pairs:
            continue
        rate = statistics.median(y[0] / x[0] for x, y in pairs)
        cpu = statistics.median(y[1] / x[1] for x, y in pairs)
        counted = f"{len(pairs)} round{'s' if len(pairs) > 1 else ''}"
        print(f"  {'':10} rounds: B/A {rate:5.3f}, CPU B/A {cpu:5.3f} ({counted})")


if __name__ == "__main__":
    sys.exit(main())
