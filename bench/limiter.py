"""Instructions the limiter costs a request, alone, counted by valgrind (not a test).

    python bench/limiter.py [--modes off,memory,redis] [--turns 100] [--source CHECKOUT]

``proxy.http.limits.limiter.Limiter`` without a server around it: each turn of the loop admits 64
requests of the bench team (bench/limits.py's limits: every one on, far too high to refuse
anything), then merges each one's x-ratelimit headers into a response's (aiohttp's writing
of them, about 155 ns a header, is left out), and finishes it with a usage. ``off`` finishes
them unlimited (the ledger is still kept, in the process), ``memory`` counts the limits in the
process, ``redis`` in a local redis-server (Debian's package), with its reservations made
ahead, fills and settlements.

Each mode runs twice under callgrind, for 20 turns and for 20 + ``--turns``: the difference of
their totals over ``--turns`` times 64 is a request's, start-up and warm-up left out. It
repeats to a few per cent (fills and batches fall differently into turns), where a server's
CPU per request swings by ten; bench/instructions.py counts the whole server.
``--source``: a checkout (``git worktree add``) whose ``proxy`` package to run instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gateways

BATCH = 64  # requests admitted in one turn of the loop
WARM = 20  # turns before the measured ones (and the short run's only turns)
_COLLECTED = re.compile(rb"Collected : (\d+)")


async def serve(mode: str, redis_url: str | None, turns: int) -> None:
    """``turns`` turns of ``BATCH`` requests through a limiter of ``mode``."""
    from multidict import CIMultiDict

    from proxy.core.config import Team
    from proxy.core.exchange import Exchange
    from proxy.core.limits.admission import Budget, Limits
    from proxy.core.limits.config import State
    from proxy.core.usage import Usage
    from proxy.http.limits.limiter import Limiter, store_for

    class Events:
        def state_changed(self, up: bool) -> None:
            pass

        def state_failed(self, operation: str) -> None:
            raise SystemExit(f"the store failed on {operation}")

        def settlements_dropped(self, count: int) -> None:
            raise SystemExit(f"{count} settlements dropped")

        def limits_seen(self, shown: object) -> None:
            pass

    state = State(redis=redis_url) if redis_url else State()
    limiter = Limiter(store_for(state, None), state, Events())
    limits = Limits(
        requests_per_minute=10**9,
        tokens_per_minute=10**12,
        concurrency=100_000,
        budget=Budget("tokens", 10**15, "month"),
    )
    team = Team("bench", (), ("*",), limits if mode != "off" else Limits())
    limiter.start(lambda: [team])
    base = CIMultiDict({"Content-Type": "application/json", "X-Request-Id": "0" * 16})
    usage = Usage(12, 20, 32)
    try:
        for _ in range(turns):
            admitted = []
            for _ in range(BATCH):
                exchange = Exchange("r", "chat", 0.0)
                exchange.team, exchange.model = "bench", "bench-openai"
                reservation = None
                if team.limits.checked:
                    reservation = await limiter.admit(team, exchange, prompt_tokens=12,
                                                      max_tokens=100, price=None,
                                                      lease_seconds=600)  # fmt: skip
                admitted.append((exchange, reservation))
            await asyncio.sleep(0)
            for exchange, reservation in admitted:
                exchange.usage = usage
                headers = base.copy()
                if exchange.headers:
                    headers.update(exchange.headers)
                limiter.finish(exchange, reservation)
            await asyncio.sleep(0)
    finally:
        await limiter.close()


def counted(mode: str, redis_url: str | None, turns: int, source: Path | None) -> int:
    env = {**os.environ, **({"PYTHONPATH": str(source)} if source is not None else {})}
    argv = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
        __file__, "--serve", mode, "--turns", str(turns), "--redis", redis_url or "",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, env=env, cwd=source, check=False)
    match = _COLLECTED.search(done.stderr)
    if done.returncode or match is None:
        raise SystemExit(f"{mode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return int(match[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="off,memory,redis")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--redis", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.redis or None, args.turns))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian package valgrind)")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="limiter-") as tmp:
        redis, port = gateways.start_redis(Path(tmp))
        try:
            for mode in args.modes.split(","):
                url = f"redis://127.0.0.1:{port}/0" if mode == "redis" else None
                start = time.monotonic()
                short = counted(mode, url, WARM, args.source)
                long = counted(mode, url, WARM + args.turns, args.source)
                results[mode] = (long - short) / (args.turns * BATCH)
                print(f"{mode}: done in {time.monotonic() - start:.0f} s", flush=True)
        finally:
            redis.stop()
    print(f"\nlimiter instructions per request ({args.turns} turns of {BATCH}):")
    base = results.get("off")
    for mode, figure in results.items():
        ratio = f"  {figure / base:.3f}x off" if base and mode != "off" else ""
        print(f"  {mode:8} {figure / 1000:8.1f}k{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
