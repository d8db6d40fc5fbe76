"""The supervisor of ``serve --workers N``: a worker that dies young is started again after a
growing delay, not five times a second; one that ran a while, at once."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.ops.server import RESTART_DELAY_MAX, RESTART_DELAY_MIN, STABLE_SECONDS, Restarts
from tests.support.harness import free_port
from tests.support.metrics import (
    ROOT,
    Stage,
    http_status,
    serve,
    stage,
    wait_for,
    worker_pids,
    write_config,
)

YOUNG = STABLE_SECONDS / 10
OLD = STABLE_SECONDS


@pytest.mark.parametrize(
    ("lives", "delays"),
    [
        ([OLD], [0.0]),
        ([YOUNG], [RESTART_DELAY_MIN]),
        ([YOUNG, YOUNG, YOUNG], [RESTART_DELAY_MIN, 2 * RESTART_DELAY_MIN, 4 * RESTART_DELAY_MIN]),
        ([YOUNG] * 12, [min(RESTART_DELAY_MIN * 2**n, RESTART_DELAY_MAX) for n in range(12)]),
        # A run of STABLE_SECONDS or more starts the count again.
        ([YOUNG, YOUNG, OLD, YOUNG], [RESTART_DELAY_MIN, 2 * RESTART_DELAY_MIN, 0.0, 0.5]),
        ([0.0, STABLE_SECONDS - 0.01], [RESTART_DELAY_MIN, 2 * RESTART_DELAY_MIN]),
    ],
    ids=["old", "young", "three young", "capped", "reset by a long run", "bounds"],
)
def test_restart_delays(lives: list[float], delays: list[float]) -> None:
    restarts = Restarts()
    assert [restarts.after(lived) for lived in lives] == delays


@pytest.fixture(scope="module")
def running() -> Iterator[Stage]:
    with stage() as built:
        yield built


def test_a_worker_that_cannot_start_is_retried_ever_later_while_the_other_serves(
    running: Stage, tmp_path: Path
) -> None:
    models = {"llama": {"provider": "emu", "model": "friendli"}}
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, models)
    good = config.read_text()
    with serve(config, 2, tmp_path / "run") as served:
        wait_for(lambda: http_status(served.root + "/readyz")[0] == 200, "the proxy to be ready")
        (dead, alive) = worker_pids(served)
        # Broken after both workers read it: a new worker cannot start.
        config.write_text("providers: [not, a, mapping]\n")
        os.kill(dead, signal.SIGKILL)

        def failed() -> list[str]:
            return [line for line in served.lines if "cannot start" in line]

        # Three failed starts, however long a start takes on a loaded machine (seconds, when
        # the interpreter compiles every module afresh): the waits between them say the rest.
        wait_for(
            lambda: len(failed()) >= 3, "three failed starts", 60, lambda: "".join(served.lines)
        )
        said = "".join(served.lines)
        failures = failed()
        assert all(str(config) in line for line in failures), failures
        assert "Traceback" not in said, said
        delays = [
            float(match)
            for match in re.findall(r"exited with 2; starting a new one in (\S+) s", said)
        ]
        # Each failed start's exit is told after its "cannot start": the last one's may not be
        # yet, on a loaded machine. Started again at once (0.2 s), it would be tried over and
        # over; each wait is twice the last (0.5, 1, 2 ... s).
        assert len(failures) - 1 <= len(delays) <= len(failures), said
        assert len(delays) >= 2, said
        assert all(later == 2 * earlier for earlier, later in itertools.pairwise(delays)), delays
        # The worker that was not killed serves throughout (beside it, at most a new one in
        # the middle of its failing start, on a loaded machine).
        assert alive in worker_pids(served) and len(worker_pids(served)) <= 2
        assert http_status(served.root + "/readyz")[0] == 200
        # Mended: the next start (at most 8 s after the last failure) succeeds.
        config.write_text(good)
        wait_for(
            lambda: sum(" listening on " in line for line in served.lines) >= 3,
            "a new worker to listen",
        )
        assert len(worker_pids(served)) == 2
        assert http_status(served.root + "/readyz")[0] == 200


# The supervisor (proxy.ops.server._run_workers) with a multiprocessing context whose third start,
# a dead worker's successor, is followed at once by the supervisor's own SIGTERM: the signal comes
# while the slot still holds the dead worker, as it can when a stop and a restart meet.
_STOPPED_WHILE_STARTING = """
import multiprocessing.context, os, signal, sys, threading, time
from pathlib import Path
from proxy.ops.server import Listen, _run_workers

started = []

class Process(multiprocessing.context.SpawnProcess):
    def start(self):
        super().start()
        started.append(self.pid)
        if len(started) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

class Context(multiprocessing.context.SpawnContext):
    Process = Process

def kill_one():
    time.sleep(3)  # up by then, usually; if not, its successor is still the third start
    os.kill(started[0], signal.SIGKILL)

if __name__ == "__main__":
    config, port, metrics = sys.argv[1:]
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics
    threading.Thread(target=kill_one, daemon=True).start()
    status = _run_workers(Listen(Path(config), "127.0.0.1", int(port), 2), Context(), metrics)
    print("started", len(started), "status", status, flush=True)
    sys.exit(status)
"""


def test_a_worker_started_as_the_supervisor_is_stopped_is_stopped_too(
    running: Stage, tmp_path: Path
) -> None:
    models = {"llama": {"provider": "emu", "model": "friendli"}}
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, models)
    script = tmp_path / "supervisor.py"
    script.write_text(_STOPPED_WHILE_STARTING)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(script), str(config), str(free_port()), str(metrics)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # Before the fix the supervisor waited for the unstopped worker for good.
        out, _ = process.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail(f"the supervisor did not stop: {out.decode(errors='replace')}")
    said = out.decode(errors="replace")
    assert "started 3 status 0" in said, said
    assert process.returncode == 0, said
