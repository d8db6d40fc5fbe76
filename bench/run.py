"""The gateway benchmark suite (issue 6; not a test, never part of CI's verdict).

    python bench/run.py [--peers] [--duration 10] [--profiles plain-1,plain-64,...] [--workers 2]
                        [--no-floor | --lean-floor] [--profile-py-spy] [--peer-venv PATH]
                        [--trials 5]

Starts nginx as a canned upstream (bench/canned.py), then, one after the other: measures each
profile straight against nginx ("direct"), against our proxy (``llm-proxy serve``, N workers,
metrics and access log on), against the framework's floor ("floor", bench/floor.py: aiohttp
server and client on uvloop, N workers, passing requests through and nothing else; not with
--no-floor; with --lean-floor, aiohttp used as the proxy uses it) and, with --peers, against
LiteLLM's proxy and TensorZero's gateway installed in a separate virtualenv by bench/setup.sh.
Load comes from wrk (bench/post.lua) and, for the concurrent slow streams, from
bench/streams.py in its own process. errors-64, measured only when asked for (--profiles), is
plain-64 against an upstream that refuses every request. plain-64 and slow-1000 are measured
several times (--trials; the median trial counts), and where a target compares ours with other
gateways, their trials are taken in turn while they are up (PAIRED): slow-1000's direct and
ours, and with --peers plain-64's TensorZero, LiteLLM and ours (the peers are started for that
within ours' block, and again for their own). Memory is read from /proc while each profile
runs. Prints one table per profile, ours/floor and ours/peer ratios and each target of the issue
as PASS or MISS (with, for information, what the floor achieves against it); writes the report
to bench/out/latest.txt and latest.json.

Everything listens on 127.0.0.1 on free ports; every process started is stopped at the end,
also on Ctrl-C; every load is bounded in time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import canned
import gateways
import hotspots
import load
import report
from gateways import Gateway
from procs import (
    MemorySampler,
    Service,
    busy_strangers,
    cpu_seconds,
    free_port,
    rss_mb,
    wait_http,
)

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DEFAULT_PEER_VENV = ROOT / ".bench-venv"
DISTURBED_PCT = 15  # CPU % of one core used by processes outside the run
# A gateway is idle, after a trial, below this CPU % of one core; it is waited for so long.
SETTLED_PCT = 5
SETTLE_MAX = 30
APT = "apt-get update && apt-get install -y nginx-light wrk libnginx-mod-http-echo"
# The profiles whose targets stand or fall by a margin within a single trial's noise here, and
# the gateways each is measured on several times (--trials): plain-64's ratios to the peers,
# slow-1000's TTFT p99 against direct's. One trial's p99 rests on its slowest 40 streams, and
# direct's own moved between 58 and 81 ms from one run to the next (2026-11-30).
TRIED = {
    "plain-64": {"direct", "ours", "floor", "tensorzero", "litellm"},
    "slow-1000": {"direct", "ours", "floor"},
}
# The profiles whose targets compare ours with other gateways, and those gateways: their trials
# are taken in turn, each round in the other order from the last (the partners then ours, ours
# then the partners, ...), while they are all up (idle but for their own trials); the targets
# are judged by the median of the rounds' ratios (bench/report.py). Measured in blocks, like the
# rest, one's trials ran minutes before the other's, on whatever the machine was doing then:
# direct's own TTFT p99 went from 56 to 72 ms over the trials of 2026-11-30's morning, and in
# one full run that evening ours' and TensorZero's plain-64 rose by a third and more within
# their blocks (ours' from 5,631 to 7,651 req/s, TensorZero's from 4,015 to 5,910), and the
# floor, measured after ours, beat it by 1.27x where it had trailed by 1.10x an hour before.
PAIRED = {"slow-1000": ("direct",), "plain-64": ("tensorzero", "litellm")}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", action="store_true", help="also measure LiteLLM and TensorZero")
    parser.add_argument("--duration", type=int, default=10, help="seconds per profile")
    parser.add_argument(
        "--profiles",
        default=",".join(load.DEFAULT),
        help=f"comma-separated, from: {', '.join(load.PROFILES)} (default: all but errors-64)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="workers of ours, the floor and LiteLLM"
    )
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="do not measure the framework's floor (bench/floor.py, a bare aiohttp pass-through)",
    )
    parser.add_argument(
        "--lean-floor",
        action="store_true",
        help="the floor as the proxy uses aiohttp (low-level server, no ClientSession)",
    )
    parser.add_argument("--peer-venv", type=Path, default=DEFAULT_PEER_VENV)
    parser.add_argument(
        "--profile-py-spy",
        action="store_true",
        help="run py-spy on our workers during an extra plain-64 pass; writes bench/out/pyspy-*",
    )
    parser.add_argument("--soak-requests", type=int, default=200_000)
    parser.add_argument("--soak-max-seconds", type=int, default=300)
    parser.add_argument(
        "--stream-timeout", type=float, default=60.0, help="seconds one slow stream may take"
    )
    parser.add_argument(
        "--wait-quiet",
        type=int,
        default=60,
        help="before each profile, wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help=f"measure a profile again when other processes took over {DISTURBED_PCT}%% CPU",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=5,
        help="measure plain-64 (every gateway) and slow-1000 (direct, ours, the floor) this many"
        " times; the median trial counts (slow-1000's direct and ours in turn)",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "out")
    parser.add_argument("--keep", action="store_true", help="keep configs and logs (printed path)")
    return parser


def _missing_tools(args: argparse.Namespace) -> list[str]:
    problems = []
    if shutil.which("nginx") is None or shutil.which("wrk") is None:
        problems.append(f"nginx and wrk are needed: {APT}  (or: bash bench/setup.sh)")
    elif not canned.ECHO_MODULE.exists():
        problems.append(f"nginx's echo module is needed for slow streams: {APT}")
    if args.peers:
        for tool in ("litellm", "python"):
            if not (args.peer_venv / "bin" / tool).exists():
                problems.append(
                    f"the peers' virtualenv {args.peer_venv} lacks {tool}:"
                    f" bash bench/setup.sh --venv {args.peer_venv}"
                )
                break
    if args.profile_py_spy and hotspots.find_py_spy(args.peer_venv) is None:
        problems.append("py-spy is needed for --profile-py-spy: bash bench/setup.sh")
    return problems


def _machine() -> str:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs ({model}), {mem:.0f} GiB, {platform.system()} {platform.release()}"
    )


def _interpreter(python: Path) -> str:
    """``python``'s version and the executable it resolves to (a virtualenv's is a link)."""
    version = _version([str(python), "-c", "import platform; print(platform.python_version())"])
    return f"{version} ({os.path.realpath(python)})"


def _version(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0] if text else "?"


class Run:
    """One run of the suite: its options, its output, what it started and what it measured."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
        self.results: report.Results = {p: {} for p in self.profiles}
        self.lines: list[str] = []
        self.notes: list[str] = []
        self.services: list[Service] = []
        self.direct: Gateway | None = None  # nginx itself, once it runs
        self.names: list[str] = []  # the gateways measured, in order
        self.nginx_port = 0

    def say(self, text: str = "", keep: bool = True) -> None:
        print(text, flush=True)
        if keep:
            self.lines.append(text)

    def measure(self, gateway: Gateway) -> None:
        kinds = {load.PROFILES[p].kind for p in self.profiles}
        broken: dict[str, str] = {}
        events: dict[str, int] = {}
        for kind in sorted(kinds):
            problem = load.check_request(gateway, kind)
            if problem is not None:
                broken[kind] = f"a {kind} request failed: {problem}"
                self.say(f"  {gateway.name}: {broken[kind]}")
            elif kind in ("stream", "slow"):
                events[kind] = load.stream_events(gateway, kind)
        if events:
            counts = ", ".join(f"{n} events per {k} stream" for k, n in sorted(events.items()))
            counts = counts.replace("stream stream", "fast stream")
            self.notes[-1] += f"; {counts}"
        if gateways.ERROR in kinds - broken.keys():
            self.notes[-1] += f"; the upstream's refusal answered with {load.refusal(gateway)}"
        for name in self.profiles:
            profile = load.PROFILES[name]
            partners = PAIRED.get(name, ())
            if gateway.name in partners and (
                gateway.name == "direct" or gateway.name in self.results[name]
            ):
                continue  # in turn with ours' trials (_paired): direct's once ours is up
            if profile.kind in broken:
                if name != "soak" or gateway.name == "ours":
                    failed = load.Outcome(failed=broken[profile.kind])
                    self.results[name][gateway.name] = report.Row(gateway.name, failed)
                if gateway.name == "ours" and "direct" in partners:
                    self._paired(name, [self._direct()], None)
                continue
            if gateway.name == "ours" and partners:
                self._with_partners(name, gateway)
            elif name == "soak":
                if gateway.name == "ours":
                    self._wait_quiet()
                    self._soak(gateway)
                continue
            else:
                trials = self.args.trials if gateway.name in TRIED.get(name, ()) else 1
                rows = [self._quiet_trial(gateway, profile) for _ in range(max(1, trials))]
                self.results[name][gateway.name] = report.median_trial(name, rows)
            if name == "plain-64" and gateway.name == "ours" and self.args.profile_py_spy:
                self._py_spy(gateway, profile)

    def _direct(self) -> Gateway:
        assert self.direct is not None
        return self.direct

    def _with_partners(self, name: str, ours: Gateway) -> None:
        """``name``'s trials of ours in turn with its partners (PAIRED) that this run measures:
        direct, which is always up, and peers started for the while (and again for their own
        block, which then skips ``name``), so that they are idle through no other profile of
        ours. A peer that cannot start or answer is left to its own block."""
        kind = load.PROFILES[name].kind
        partners: list[Gateway] = []
        for partner in PAIRED[name]:
            if partner == "direct":
                partners.append(self._direct())
            elif partner in self.names:
                try:
                    gateway = self.start(partner, self.nginx_port)
                except RuntimeError:
                    continue
                if load.check_request(gateway, kind) is None:
                    partners.append(gateway)
                else:
                    gateway.stop()
        try:
            self._paired(name, partners, ours)
        finally:
            for gateway in partners:
                if gateway is not self.direct:
                    gateway.stop()

    def _paired(self, name: str, partners: list[Gateway], ours: Gateway | None) -> None:
        """``name``'s trials of ``partners`` and ours in turn (the partners' alone if ours
        cannot be measured), each round in the other order from the last; the median trial of
        each counts."""
        profile = load.PROFILES[name]
        turn = partners if ours is None else [*partners, ours]
        rows: dict[str, list[report.Row]] = {gateway.name: [] for gateway in turn}
        for trial in range(max(1, self.args.trials)):
            for gateway in turn if trial % 2 == 0 else turn[::-1]:
                rows[gateway.name].append(self._quiet_trial(gateway, profile))
                self._settle(gateway)
        paired = ours is not None and len(turn) > 1
        for gateway_name, tried in rows.items():
            row = report.median_trial(name, tried)
            self.results[name][gateway_name] = dataclasses.replace(row, paired=paired)

    def _settle(self, gateway: Gateway) -> None:
        """Wait, up to SETTLE_MAX seconds, until ``gateway`` is idle: the load generator stops
        at its time, but a gateway slower than its load still works through what was sent (a
        second and more for LiteLLM, whose p99 is over a second), on the CPU the next gateway's
        trial would be measured on."""
        deadline = time.monotonic() + SETTLE_MAX
        while time.monotonic() < deadline:
            pids = gateway.processes()
            before = cpu_seconds(pids)
            time.sleep(0.5)
            if 100 * (cpu_seconds(pids) - before) / 0.5 < SETTLED_PCT:
                return

    def _quiet_trial(self, gateway: Gateway, profile: load.Profile) -> report.Row:
        """One trial; one disturbed by other processes is measured again, and the quietest
        attempt counts."""
        best: report.Row | None = None
        for attempt in range(1 + self.args.retries):
            row = self._profile(gateway, profile)
            if best is None or (row.foreign_pct or 0) < (best.foreign_pct or 0):
                best = row
            if (row.foreign_pct or 0) <= DISTURBED_PCT or attempt == self.args.retries:
                break
            self.say(f"  disturbed ({row.foreign_pct:.0f}% other CPU): again", keep=False)
        assert best is not None
        return best

    def _profile(self, gateway: Gateway, profile: load.Profile) -> report.Row:
        self._wait_quiet()
        if profile.kind != "slow":
            load.run_wrk(gateway, profile, 2)  # warm-up, not counted
        with MemorySampler(gateway.processes, gateway.workers) as memory:
            outcome = load.run_profile(
                gateway, profile, self.args.duration, self.args.stream_timeout
            )
        peak = memory.peak
        per_worker = peak.worker_mb if len(gateway.workers()) > 1 else None
        self.say(
            f"  {gateway.name:<10} {profile.name:<10} rate {report._num(outcome.rate)}"
            f"  p50 {report._num(outcome.p50_ms, 2)} ms  p99 {report._num(outcome.p99_ms, 2)}"
            f" ms  RSS {peak.total_mb:.0f} MB  other CPU {peak.foreign_pct:.0f}%"
            f"  errors: {report._errors(outcome)}",
            keep=False,
        )
        return report.Row(
            gateway.name, outcome, peak.total_mb, per_worker, peak.cpu_pct, peak.foreign_pct
        )

    def _wait_quiet(self) -> None:
        deadline = time.monotonic() + self.args.wait_quiet
        strangers = busy_strangers(0.5, 10)
        if not strangers or not self.args.wait_quiet:
            return
        self.say(f"  waiting for other processes to go idle: {strangers[0][1]}", keep=False)
        while strangers and time.monotonic() < deadline:
            strangers = busy_strangers(2, 10)

    def _soak(self, gateway: Gateway) -> None:
        profile = load.PROFILES["soak"]
        target, started = self.args.soak_requests, time.monotonic()
        total, errors, first_mb, last_mb = 0, Counter[str](), None, 0.0
        samples = []
        while total < target and time.monotonic() - started < self.args.soak_max_seconds:
            outcome = load.run_wrk(gateway, profile, 5)
            if outcome.failed:
                self.results["soak"]["ours"] = report.Row("ours", outcome)
                return
            total += outcome.requests
            errors.update(outcome.errors)
            last_mb = rss_mb(gateway.workers())  # the workers' resident memory now
            first_mb = first_mb if first_mb is not None else last_mb
            samples.append((total, round(last_mb, 1)))
        first_mb = first_mb or 0.0
        growth = 100 * (last_mb - first_mb) / first_mb if first_mb else 0.0
        seconds = time.monotonic() - started
        outcome = load.Outcome(
            rate=total / seconds,
            requests=total,
            errors=dict(errors),
            extra={
                "requests_total": total,
                "rss_start_mb": round(first_mb, 1),
                "rss_end_mb": round(last_mb, 1),
                "growth_pct": round(growth, 2),
                "samples": samples,
            },
        )
        self.results["soak"]["ours"] = report.Row("ours", outcome, last_mb)
        self.say(
            f"  ours       soak       {total:,} requests in {seconds:.0f} s; RSS of the"
            f" workers after the first segment {first_mb:.1f} MB, at the end {last_mb:.1f} MB"
            f" ({growth:+.1f}%)",
            keep=False,
        )

    def _py_spy(self, gateway: Gateway, profile: load.Profile) -> None:
        py_spy = hotspots.find_py_spy(self.args.peer_venv)
        assert py_spy is not None
        workers = gateway.workers()
        out = self.args.out
        seconds = self.args.duration
        raw, svg = out / "pyspy-plain-64.txt", out / "pyspy-plain-64.svg"
        recorders = [hotspots.start_recording(py_spy, workers[0], seconds, raw, "raw")]
        if len(workers) > 1:
            recorders.append(
                hotspots.start_recording(py_spy, workers[1], seconds, svg, "flamegraph")
            )
        outcome = load.run_wrk(gateway, profile, seconds)
        for recorder in recorders:
            try:
                _, stderr = recorder.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                recorder.kill()
                stderr = b"timed out"
            if recorder.returncode != 0:
                self.say(f"  py-spy failed: {stderr.decode(errors='replace')[-500:]}")
        if not raw.exists():
            return
        summary = [
            f"py-spy on one of our workers during plain-64 (an extra pass, {outcome.rate or 0:,.0f}"
            f" req/s under py-spy; not in the tables): {raw}"
            + (f", flamegraph {svg}" if svg.exists() else ""),
            *hotspots.summarize(raw),
        ]
        (out / "pyspy-plain-64-top.txt").write_text("\n".join(summary) + "\n")
        self.notes.append("\n".join(summary))

    def scan_our_log(self, log: Path) -> None:
        statuses: Counter[int] = Counter()
        other = []
        known = re.compile(r"^worker \d+ (listening|draining|serving metrics)")
        status = re.compile(rb'"status":(\d+)')
        with log.open("rb") as lines:
            for line in lines:
                if line.startswith(b'{"ts"'):
                    match = status.search(line)
                    statuses[int(match[1]) if match else 0] += 1
                elif line.strip() and not known.match(line.decode(errors="replace")):
                    other.append(line.decode(errors="replace").rstrip())
        shown = ", ".join(f"{k}: {v:,}" for k, v in sorted(statuses.items()))
        self.notes.append(f"ours' access log: {sum(statuses.values()):,} requests, status {shown}")
        if other:
            problems = self.args.out / "ours-problems.log"
            problems.write_text("\n".join(other) + "\n")
            self.notes.append(
                f"ours logged {len(other)} other lines (all in {problems}); the first ones:\n    "
                + "\n    ".join(other[:15])
            )

    def scan_floor_log(self, log: Path) -> None:
        # floor.py prints one line when it starts; anything else (aiohttp's tracebacks) is news.
        lines = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if line.strip() and not line.startswith("floor: ")
        ]
        problems = self.args.out / "floor-problems.log"
        problems.unlink(missing_ok=True)  # an earlier run's
        if lines:
            problems.write_text("\n".join(lines) + "\n")
            self.notes.append(
                f"floor logged {len(lines)} other lines (all in {problems}); the first ones:\n    "
                + "\n    ".join(lines[:15])
            )

    def start(self, name: str, nginx_port: int) -> Gateway:
        if name == "ours":
            gateway = gateways.start_ours(nginx_port, self.args.workers, self.tmp)
        elif name == "floor":
            gateway = gateways.start_floor(
                nginx_port, self.args.workers, self.tmp, lean=self.args.lean_floor
            )
        elif name == "litellm":
            gateway = gateways.start_litellm(
                nginx_port, self.args.workers, self.tmp, self.args.peer_venv
            )
        else:
            gateway = gateways.start_tensorzero(nginx_port, self.tmp, self.args.peer_venv)
        assert gateway.service is not None
        self.services.append(gateway.service)
        return gateway

    def execute(self) -> None:
        args = self.args
        self.say(f"llm-proxy benchmark, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
        self.say(f"machine: {_machine()}")
        self.say(f"command: python bench/run.py {shlex.join(sys.argv[1:])}")
        self.say(f"proxy: {_version(['git', '-C', str(ROOT), 'describe', '--always', '--dirty'])}")
        self.say(f"tools: {_version(['nginx', '-v'])}; {_version(['wrk', '-v'])}")
        # The interpreter's build matters: one built with PGO and LTO (the
        # Docker image's, Debian's python3) served 3-12 % more here than one built without (pyenv's
        # default). Ours and the floor run on this one; LiteLLM on its virtualenv's.
        ours = _interpreter(Path(sys.executable))
        self.say(f"python: {ours} for ours and the floor")
        if args.peers:
            peer_python = _interpreter(args.peer_venv / "bin" / "python")
            self.say(f"python: {peer_python} for LiteLLM ({args.peer_venv})")
            if peer_python != ours:
                self.say(
                    "WARNING: LiteLLM runs on another interpreter than ours: make its"
                    f" virtualenv with this one (bash bench/setup.sh --python {sys.executable})"
                )
        self.say(
            "upstream: nginx serving recorded OpenAI answers (bench/canned.py); slow streams"
            " paced by nginx's echo module (echo_sleep 0.05), not by the emulator"
        )
        strangers = busy_strangers()
        if strangers:
            self.say(
                "WARNING: other processes are busy on this machine (each profile waits up to"
                f" {self.args.wait_quiet} s for them to go idle; see 'other %'):"
            )
            for pct, what in strangers[:5]:
                self.say(f"  {pct:4.0f}% CPU  {what}")
        nginx_port = free_port()
        conf = canned.write_upstream(self.tmp / "nginx", nginx_port, 0.05)
        nginx = Service(
            "nginx", ["nginx", "-c", str(conf), "-p", str(conf.parent)], self.tmp / "nginx.log"
        )
        self.services.append(nginx)
        wait_http(f"http://127.0.0.1:{nginx_port}/healthz", nginx, 10)
        names = ["direct", "ours"] + ([] if args.no_floor else ["floor"])
        names += ["tensorzero", "litellm"] if args.peers else []
        self.names, self.nginx_port = names, nginx_port
        self.direct = gateways.direct(nginx, nginx_port)
        for name in names:
            self.say(f"{name}:", keep=False)
            gateway = self.direct
            if name != "direct":
                try:
                    gateway = self.start(name, nginx_port)
                except RuntimeError as exc:
                    self.say(f"  {name} could not be started: {exc}")
                    if name == "ours":
                        for profile in self.profiles:
                            if "direct" in PAIRED.get(profile, ()):
                                self._paired(profile, [self.direct], None)
                    continue
            self.notes.append(f"{name}: {gateway.note}")
            try:
                self.measure(gateway)
            finally:
                gateway.stop()
            if name == "ours":
                self.scan_our_log(self.tmp / "ours.log")
            elif name == "floor":
                self.scan_floor_log(self.tmp / "floor.log")
        self.say()
        for name in self.profiles:
            if self.results[name] and name != "soak":
                for line in report.profile_table(name, self.results[name]):
                    self.say(line)
                self.say()
        peers = [n for n in names if n not in ("direct", "ours", "floor")]
        for block in (report.floor_lines(self.results), report.ratio_lines(self.results, peers)):
            for line in block:
                self.say(line)
            if block:
                self.say()
        others = [
            (row.foreign_pct, f"{name}/{gw}")
            for name, rows in self.results.items()
            for gw, row in rows.items()
            if row.foreign_pct is not None
        ]
        if others and max(others)[0] > DISTURBED_PCT:
            pct, where = max(others)
            self.say(
                f"WARNING: processes outside this run used up to {pct:.0f}% of a core ({where});"
                " rerun on a quiet machine for figures to compare."
            )
            self.say()
        for line in report.target_lines(self.results):
            self.say(line)
        self.say()
        for note in self.notes:
            self.say("- " + note)

    def write(self) -> None:
        out = self.args.out
        (out / "latest.txt").write_text("\n".join(self.lines) + "\n")
        data = {
            profile: {g: dataclasses.asdict(row) for g, row in rows.items()}
            for profile, rows in self.results.items()
        }
        (out / "latest.json").write_text(json.dumps(data, indent=2, default=str) + "\n")


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    args = _parser().parse_args()
    unknown = [p for p in args.profiles.split(",") if p.strip() and p.strip() not in load.PROFILES]
    if unknown:
        print(f"unknown profiles: {', '.join(unknown)}", file=sys.stderr)
        return 2
    problems = _missing_tools(args)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    # 1,000 streams through a gateway take 2,000 sockets in it and 1,000 in the client.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # Started in the background by a shell, SIGINT comes ignored; Ctrl-C must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="llm-proxy-bench-"))
    tmp.chmod(0o711)  # nginx's workers (nobody) must reach the files they serve below it
    run = Run(args, tmp)
    try:
        run.execute()
        run.write()
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        for service in reversed(run.services):
            service.stop()
        if args.keep:
            print(f"configs and logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
