"""Instructions a request costs the server, counted by valgrind (not a test).

    python bench/instructions.py [--requests 1000] [--connections 1] [--modes off,memory,redis]
                                 [--source CHECKOUT]

The same three servers as bench/limits.py (no limits, limits in the process, limits in a local
redis-server), one worker each, in front of nginx (bench/canned.py), but each run under
valgrind's callgrind. After a warm-up, callgrind's counters are zeroed, ``--requests`` plain
requests are sent over ``--connections`` connections, and the counters dumped: the server's
instructions (Ir) per request, twice, to show the figure repeats. One connection by default:
its figure repeats to 0.3 %; over 64, how requests fall into loop turns, batches and fills
changes from run to run, and so does the figure, by up to 10 %. ``--source``: a checkout
(``git worktree add``) whose ``proxy`` package to run instead of the installed one, to measure
a change against its base one after the other.

Instructions are not seconds: they ignore cache misses and the kernel, and a CPython under
valgrind runs some 50 times slower (its timers fire more often per request). But they repeat
to a fraction of a per cent whatever else the machine does, where bench/limits.py's CPU ratios
swing by several per cent from round to round: a change of 1 % shows here, and is worth
confirming there.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import canned
import gateways

WARM_UP = 1000
_SUMMARY = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


async def send(url: str, body: str, key: str, requests: int, connections: int) -> int:
    """``requests`` POSTs of ``body`` over ``connections`` kept-alive connections; how many
    answered 200."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    left, ok = requests, 0
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def one_connection() -> None:
            nonlocal left, ok
            while left > 0:
                left -= 1
                async with session.post(url, data=body) as response:
                    await response.read()
                    ok += response.status == 200

        await asyncio.gather(*(one_connection() for _ in range(connections)))
    return ok


def counted(pid: int, out: Path) -> int:
    """Dump callgrind's counters of ``pid`` and give their total since the last zeroing."""
    before = set(out.parent.glob(f"{out.name}*"))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    (dumped,) = set(out.parent.glob(f"{out.name}*")) - before
    match = _SUMMARY.search(dumped.read_bytes())
    if match is None:
        raise SystemExit(f"no total in {dumped}")
    return int(match[1])


def measure(
    mode: str, args: argparse.Namespace, tmp: Path, nginx_port: int, redis_port: int
) -> list[float]:
    limits = gateways.TEAM_LIMITS if mode != "off" else ""
    state = f"{{redis: 'redis://127.0.0.1:{redis_port}/0'}}" if mode == "redis" else ""
    out = tmp / f"callgrind.{mode}"
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"]
    gateway = gateways.start_ours(
        nginx_port, 1, tmp, args.source, mode, limits, state, prefix=prefix, start_seconds=600
    )
    url, key = gateway.urls["plain"], gateway.key
    body = gateway.body("plain")
    try:
        asyncio.run(send(url, body, key, WARM_UP, args.connections))
        subprocess.run(["callgrind_control", "--zero", str(gateway.root_pid)], check=True,
                       capture_output=True)  # fmt: skip
        figures = []
        for _ in range(2):
            ok = asyncio.run(send(url, body, key, args.requests, args.connections))
            if ok != args.requests:
                raise SystemExit(f"{mode}: {args.requests - ok} requests failed")
            figures.append(counted(gateway.root_pid, out) / args.requests)
        return figures
    finally:
        gateway.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--modes", default="off,memory,redis")
    parser.add_argument("--source", type=Path, default=None)
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (Debian package valgrind)")
    modes = args.modes.split(",")
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp_name:
        tmp = Path(tmp_name)
        nginx, nginx_port = canned.start_upstream(tmp)
        redis, redis_port = gateways.start_redis(tmp)
        try:
            for mode in modes:
                results[mode] = measure(mode, args, tmp, nginx_port, redis_port)
                print(f"{mode}: done", flush=True)
        finally:
            redis.stop()
            nginx.stop()
    print(f"\nserver instructions per request, {args.requests} requests over "
          f"{args.connections} connections, twice:")  # fmt: skip
    base = results.get("off")
    for mode, (first, second) in results.items():
        ratio = f"  {(first + second) / sum(base):.3f}x off" if base and mode != "off" else ""
        print(f"  {mode:8} {first / 1000:9.1f}k {second / 1000:9.1f}k{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
