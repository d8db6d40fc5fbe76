"""Steady, mixed traffic for the compose demo, so that the dashboard has live per-team usage.

Each team key asks GET /v1/models for the models it may use, then several threads send chat
requests to them: mostly streams (some abandoned after the first event, as impatient clients
do), some whole answers, now and then one with a wrong key. Only the standard library: it runs
in the proxy's own image.

    python traffic.py --url http://proxy:8080 --keys sk-research,sk-support --rate 4
    python traffic.py --requests 100    # stop after 100 requests; exit 1 if none succeeded
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

PROMPTS = (
    "Summarise the plot of Hamlet in two sentences.",
    "Write a haiku about load balancers.",
    "What is the capital of Australia?",
    "Explain backpressure to a new engineer.",
)


@dataclass
class Tally:
    """What was sent and how it ended, shared by the threads."""

    limit: int | None
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        """Claim the next request; False once ``limit`` requests have been claimed."""
        with self.lock:
            if self.limit is not None and self.sent >= self.limit:
                return False
            self.sent += 1
            return True

    def record(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1


def _request(url: str, key: str, body: object | None = None) -> urllib.request.Request:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return urllib.request.Request(url, data=data, headers=headers)


def discover_models(base: str, keys: list[str], stop: threading.Event) -> dict[str, list[str]]:
    """Each key's models, from GET /v1/models; waits (until ``stop``) for the proxy to answer."""
    while not stop.is_set():
        try:
            found = {}
            for key in keys:
                with urllib.request.urlopen(_request(f"{base}/v1/models", key), timeout=5) as r:
                    found[key] = sorted(model["id"] for model in json.load(r)["data"])
            return found
        except (OSError, ValueError) as exc:
            print(f"traffic: waiting for the proxy ({exc})", file=sys.stderr, flush=True)
            stop.wait(2)
    return {}


def send_one(base: str, key: str, model: str, rng: random.Random) -> str:
    """One chat request; returns how it ended (the status, or "200 abandoned")."""
    stream = rng.random() < 0.7
    abandon = stream and rng.random() < 0.1
    if rng.random() < 0.03:
        key = "sk-not-a-team-key"
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    request = _request(f"{base}/v1/chat/completions", key, body)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            if abandon:
                response.readline()  # the first event, then hang up mid-stream
                return "200 abandoned"
            response.read()
            return str(response.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        exc.close()
        return str(exc.code)
    except OSError as exc:
        return f"failed ({type(exc).__name__})"


def run_thread(
    base: str,
    models: dict[str, list[str]],
    interval: float,
    tally: Tally,
    stop: threading.Event,
    seed: int,
) -> None:
    rng = random.Random(seed)
    usable = [(key, names) for key, names in models.items() if names]
    while not stop.is_set() and tally.take():
        started = time.monotonic()
        key, names = rng.choice(usable)
        tally.record(send_one(base, key, rng.choice(names), rng))
        stop.wait(max(0.0, interval - (time.monotonic() - started)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("PROXY_URL", "http://proxy:8080"))
    parser.add_argument(
        "--keys",
        default=os.environ.get("TRAFFIC_KEYS", "sk-research,sk-support,sk-marketing"),
        help="comma-separated team keys",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=float(os.environ.get("TRAFFIC_RATE", "4")),
        help="requests per second, at most",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, help="stop after this many (default: never)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    stop = threading.Event()
    # As PID 1 of a container, SIGTERM without a handler would be ignored.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    base = args.url.rstrip("/")
    models = discover_models(base, [k for k in args.keys.split(",") if k], stop)
    if not any(models.values()):
        print("traffic: no key may use any model", file=sys.stderr)
        return 1
    print(f"traffic: {args.rate:g} requests/s to {base}: {models}", flush=True)
    tally = Tally(args.requests)
    interval = args.concurrency / args.rate
    threads = [
        threading.Thread(
            target=run_thread,
            args=(base, models, interval, tally, stop, args.seed + i),
            daemon=True,
        )
        for i in range(args.concurrency)
    ]
    for thread in threads:
        thread.start()
    reported = time.monotonic()
    # The threads are daemons: on SIGTERM, return at once rather than wait out their streams.
    while any(thread.is_alive() for thread in threads) and not stop.wait(0.2):
        if time.monotonic() - reported >= 30:
            reported = time.monotonic()
            print(f"traffic: {dict(sorted(tally.outcomes.items()))}", flush=True)
    print(f"traffic: {dict(sorted(tally.outcomes.items()))}", flush=True)
    succeeded = sum(n for outcome, n in tally.outcomes.items() if outcome.startswith("200"))
    return 0 if succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
