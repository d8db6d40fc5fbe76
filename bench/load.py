"""The load of each profile: wrk for request rates and latencies, bench/streams.py for the
concurrent slow streams, and one checked request before either."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from canned import REFUSAL
from gateways import ERROR, Gateway

BENCH = Path(__file__).resolve().parent
WRK_SCRIPT = BENCH / "post.lua"
STREAM_CLIENT = BENCH / "streams.py"
_REFUSED = REFUSAL["error"]["message"]  # what the upstream says when it refuses (canned.py)


@dataclass(frozen=True)
class Profile:
    name: str
    kind: str  # plain, stream or slow: which canned answer (bench/canned.py)
    connections: int
    title: str


PROFILES = {
    p.name: p
    for p in (
        Profile("plain-1", "plain", 1, "non-streamed, 1 connection"),
        Profile("plain-64", "plain", 64, "non-streamed, 64 connections"),
        Profile("stream-16", "stream", 16, "53-event streams, 16 connections"),
        Profile(
            "slow-1000",
            "slow",
            1000,
            "1,000 concurrent slow streams (53 events, one every 50 ms)",
        ),
        Profile("soak", "plain", 64, "RSS growth over 200,000 non-streamed requests (ours only)"),
        # An upstream refusing every request (a 403 for each, which ours neither retries nor
        # holds against its circuit): what failed requests cost. Every answer is an error.
        Profile(
            "errors-64",
            "error",
            64,
            "non-streamed, the upstream's 403 for every request, 64 connections",
        ),
    )
}
# What bench/run.py measures unless told: the profiles of issue 6's targets.
DEFAULT = [name for name in PROFILES if name != "errors-64"]


@dataclass
class Outcome:
    """What one profile measured on one gateway; latencies in ms (TTFT for slow streams)."""

    rate: float | None = None  # requests or streams per second
    p50_ms: float | None = None
    p99_ms: float | None = None
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)
    failed: str | None = None  # why nothing could be measured


def _request(gateway: Gateway, kind: str) -> urllib.request.Request:
    """One request of ``kind`` to ``gateway``, with its key if it has one."""
    headers = {"Content-Type": "application/json"}
    if gateway.key:
        headers["Authorization"] = f"Bearer {gateway.key}"
    return urllib.request.Request(
        gateway.urls[kind], data=gateway.body(kind).encode(), headers=headers, method="POST"
    )


def check_request(gateway: Gateway, kind: str, timeout: float = 30.0) -> str | None:
    """Send one request of ``kind``; None if its answer is right, else what is wrong."""
    request = _request(gateway, kind)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        refused = exc.read()
        # The upstream's refusal, passed on as the gateway tells errors (refusal() says how),
        # with its message: not an error of the gateway's own (a key, a model it lacks).
        if kind == ERROR and _REFUSED.encode() in refused:
            return None
        return f"status {exc.code}: {refused[:300]!r}"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    if status != 200 or kind == ERROR:
        return f"status {status}"
    if kind == "plain":
        try:
            if not json.loads(body)["choices"][0]["message"]["content"]:
                return "no content"
        except (ValueError, KeyError, IndexError, TypeError):
            return f"not a chat completion: {body[:300]!r}"
        return None
    if not body.rstrip().endswith(b"data: [DONE]"):
        return f"stream without [DONE]: ...{body[-300:]!r}"
    return None


def refusal(gateway: Gateway) -> str:
    """What the gateway answers when the upstream refuses (``ERROR``): its status, the shape of
    its error, and whether the upstream's message is in it."""
    try:
        with urllib.request.urlopen(_request(gateway, ERROR), timeout=30) as response:
            return f"status {response.status}"
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"status {status}, no JSON error: {body[:100]!r}"
    if isinstance(error, dict) and {"message", "type", "param", "code"} <= error.keys():
        shape = "OpenAI's error envelope"
    elif isinstance(error, dict):
        shape = f"an error object ({', '.join(sorted(error))})"
    else:
        shape = "an error string"
    # Wherever the message is in it: a gateway may quote the upstream's whole answer.
    passed = "the upstream's message" if _REFUSED in json.dumps(error) else "another message"
    return f"status {status}, {shape} with {passed}"


def stream_events(gateway: Gateway, kind: str) -> int:
    """How many ``data:`` events the gateway sends for one stream of ``kind``."""
    request = _request(gateway, kind)
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
    return body.count(b"data:")


def _run_client(argv: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a load generator; returns it and the CPU it used, in % of one core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return done, 100 * cpu / max(1e-9, time.monotonic() - started)


def run_wrk(gateway: Gateway, profile: Profile, seconds: int, script: Path = WRK_SCRIPT) -> Outcome:
    """``script``: a wrk script taking post.lua's arguments and printing its summary."""
    argv = [
        "wrk",
        "-t1",
        f"-c{profile.connections}",
        f"-d{seconds}s",
        "--timeout",
        "30s",
        "-s",
        str(script),
        gateway.urls[profile.kind],
        "--",
        gateway.body(profile.kind),
        gateway.key,
    ]
    try:
        done, client_cpu = _run_client(argv, seconds + 60)
    except subprocess.TimeoutExpired:
        return Outcome(failed="wrk did not finish in time")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        return Outcome(failed=f"wrk failed: {done.stdout[-300:]} {done.stderr[-300:]}")
    summary = json.loads(line[len("BENCH ") :])
    errors = {
        name: summary[name] for name in ("connect", "read", "write", "timeout") if summary[name]
    }
    if profile.kind == ERROR:
        # Every answer should be an error (the upstream's refusal passed on): those that are
        # not are the errors here.
        if summary["requests"] - summary["status"]:
            errors["2xx/3xx"] = summary["requests"] - summary["status"]
    elif summary["status"]:
        errors["non-2xx/3xx"] = summary["status"]
    seconds_run = summary["duration_us"] / 1e6
    return Outcome(
        rate=summary["requests"] / seconds_run if seconds_run else None,
        p50_ms=summary["p50_us"] / 1e3,
        p99_ms=summary["p99_us"] / 1e3,
        requests=summary["requests"],
        errors=errors,
        extra={
            "p90_ms": summary["p90_us"] / 1e3,
            "max_ms": summary["max_us"] / 1e3,
            "client_cpu_pct": round(client_cpu),
        },
    )


def run_profile(
    gateway: Gateway, profile: Profile, seconds: int, stream_timeout: float = 60.0
) -> Outcome:
    """One run of ``profile``: wrk, or the slow-stream client for slow streams (each of which
    may take up to ``stream_timeout`` seconds)."""
    if profile.kind == "slow":
        return run_streams(gateway, profile, seconds, stream_timeout)
    return run_wrk(gateway, profile, seconds)


def run_streams(gateway: Gateway, profile: Profile, seconds: int, timeout: float) -> Outcome:
    argv = [
        sys.executable,
        str(STREAM_CLIENT),
        gateway.urls[profile.kind],
        gateway.body(profile.kind),
        "--key",
        gateway.key,
        "--concurrency",
        str(profile.connections),
        "--duration",
        str(seconds),
        "--timeout",
        str(timeout),
    ]
    try:
        done, client_cpu = _run_client(argv, seconds + timeout + 60)
    except subprocess.TimeoutExpired:
        return Outcome(failed="the stream client did not finish in time")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        return Outcome(failed=f"the stream client failed: {done.stderr[-500:]}")
    result = json.loads(line[len("BENCH ") :])
    result["client_cpu_pct"] = round(client_cpu)
    errors = dict(result["failures"])
    if result["cut_off"]:
        errors["cut off at the time limit"] = result["cut_off"]
    return Outcome(
        rate=result["streams_per_s"],
        p50_ms=result["ttft_p50_ms"],
        p99_ms=result["ttft_p99_ms"],
        requests=result["streams"],
        errors=errors,
        extra=result,
    )
