"""Where a worker's time goes under load: py-spy attached while wrk runs (bench/run.py
--profile-py-spy). One worker is sampled into a flamegraph (SVG), the other into collapsed
stacks, summarised here as the top functions by own and by total time."""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")


def find_py_spy(venv: Path) -> str | None:
    candidate = venv / "bin" / "py-spy"
    if candidate.exists():
        return str(candidate)
    return shutil.which("py-spy")


def start_recording(
    py_spy: str, pid: int, seconds: int, output: Path, fmt: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            py_spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--rate",
            "200",
            "--format",
            fmt,
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _short(path: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _function(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{match['func']} ({_short(match['file'])})"


def summarize(collapsed: Path, top: int = 20) -> list[str]:
    """The ``top`` functions by own time and by total time, from py-spy's raw format."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # The first frame names the process or thread, not a function.
        frames = [_function(f) for f in stack.split(";")[1:]] or ["(unknown)"]
        samples += count
        own[frames[-1]] += count
        for function in set(frames):
            total[function] += count
    if not samples:
        return ["  no samples (was the worker busy? is ptrace allowed?)"]
    lines = [f"  {samples} samples of the busy worker; own % (the function itself), total %"]
    lines.append(f"  {'own %':>6} {'total %':>8}  function (file)")
    for function, count in own.most_common(top):
        lines.append(
            f"  {100 * count / samples:6.1f} {100 * total[function] / samples:8.1f}  {function}"
        )
    # Frames in (nearly) every sample are the process's entry points: no news.
    inner = [(f, c) for f, c in total.most_common() if c < 0.995 * samples]
    lines.append(f"  top {top} by total time (below the entry points):")
    for function, count in inner[:top]:
        lines.append(
            f"  {100 * own[function] / samples:6.1f} {100 * count / samples:8.1f}  {function}"
        )
    return lines
