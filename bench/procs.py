"""Processes for the benchmark: free ports, services started and stopped as process groups, and
their memory read from /proc while a profile runs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Service:
    """A process started in its own session, so that stopping it stops all it started too."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: dict[str, str] | None = None,
        stop_signal: int = signal.SIGTERM,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self._stop_signal = stop_signal
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """Signal the whole group, wait up to ``grace`` seconds, then kill what is left."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, self._stop_signal)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                print(f"  {self.name} did not stop within {grace:g} s; killing it", flush=True)
        # Whatever the leader left behind in its group (workers of a dead supervisor) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self._log_file.close()

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def wait_http(url: str, service: Service | None = None, seconds: float = 90.0) -> None:
    """Wait until ``url`` answers anything below 500 over HTTP."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if service is not None and not service.alive():
            raise RuntimeError(f"{service.name} exited while starting:\n{service.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up within {seconds:g} s")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found = [pid]
    i = 0
    while i < len(found):
        try:
            tasks = os.listdir(f"/proc/{found[i]}/task")
        except OSError:
            tasks = []
        for task in tasks:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{found[i]}/task/{task}/children").read_text().split()
                found.extend(int(child) for child in children)
        i += 1
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _status_kb(pid: int, fields: tuple[str, ...]) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in fields:
                values[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return values


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU time of ``pids`` so far (of those still alive)."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Fields 14 and 15 (utime, stime), counted after the parenthesised command name.
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def foreign_cpu_seconds(own_root: int) -> dict[int, float]:
    """CPU time so far of every process outside ``own_root``'s tree: other people's load."""
    own = set(descendants(own_root))
    return {pid: cpu_seconds([pid]) for pid in _all_pids() if pid not in own}


def busy_strangers(seconds: float = 1.0, at_least: float = 5.0) -> list[tuple[float, str]]:
    """Processes outside this run using at least ``at_least`` % of a core now, busiest first."""
    before = foreign_cpu_seconds(os.getpid())
    time.sleep(seconds)
    after = foreign_cpu_seconds(os.getpid())
    busy = [
        (100 * (t - before.get(pid, 0.0)) / seconds, f"{pid} {cmdline(pid)[:80]}")
        for pid, t in after.items()
    ]
    return sorted((b for b in busy if b[0] >= at_least), reverse=True)


def rss_mb(pids: Sequence[int]) -> float:
    return sum(_status_kb(pid, ("VmRSS",)).get("VmRSS", 0) for pid in pids) / 1024


def reset_peak(pids: Sequence[int]) -> None:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+); best effort.
    for pid in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass
class MemoryPeak:
    """Peak memory of a process tree over a time window, in MiB."""

    total_mb: float = 0.0  # the largest sum of RSS over the tree seen at one sample
    worker_mb: float = 0.0  # the largest peak (VmHWM) of any one worker
    last_total_mb: float = 0.0
    cpu_pct: float = 0.0  # CPU time of the tree over the window, in % of one core
    foreign_pct: float = 0.0  # CPU time of processes not started by this run, the same way
    per_pid_hwm_kb: dict[int, int] = field(default_factory=dict)


class MemorySampler:
    """Samples the RSS of a process tree every ``interval`` seconds in a thread."""

    def __init__(
        self,
        root: Callable[[], list[int]],
        workers: Callable[[], list[int]],
        interval: float = 0.05,
    ) -> None:
        self._root = root
        self._workers = workers
        self._interval = interval
        self._stop = threading.Event()
        self.peak = MemoryPeak()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        reset_peak(self._root())
        self._cpu = cpu_seconds(self._root())
        self._foreign = foreign_cpu_seconds(os.getpid())
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(final=True)
        wall = time.monotonic() - self._started
        if wall > 0:
            self.peak.cpu_pct = 100 * (cpu_seconds(self._root()) - self._cpu) / wall
            after = foreign_cpu_seconds(os.getpid())
            used = sum(t - self._foreign.get(pid, 0.0) for pid, t in after.items())
            self.peak.foreign_pct = 100 * max(0.0, used) / wall

    def _sample(self, final: bool = False) -> None:
        total = 0
        for pid in self._root():
            total += _status_kb(pid, ("VmRSS",)).get("VmRSS", 0)
        self.peak.total_mb = max(self.peak.total_mb, total / 1024)
        self.peak.last_total_mb = total / 1024
        if final:
            for pid in self._workers():
                status = _status_kb(pid, ("VmHWM", "VmRSS"))
                hwm = max(status.get("VmHWM", 0), self.peak.per_pid_hwm_kb.get(pid, 0))
                self.peak.per_pid_hwm_kb[pid] = hwm
                self.peak.worker_mb = max(self.peak.worker_mb, hwm / 1024)
        else:
            for pid in self._workers():
                rss = _status_kb(pid, ("VmRSS",)).get("VmRSS", 0)
                self.peak.per_pid_hwm_kb[pid] = max(self.peak.per_pid_hwm_kb.get(pid, 0), rss)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()
