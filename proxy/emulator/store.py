"""A directory of recordings, each read and split once and then served from memory."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from proxy.emulator.recording import Recording, is_recording_name, parse_recording

RECORDINGS_DIR: Final = Path(__file__).resolve().with_name("recordings")


class RecordingStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: dict[str, Recording] = {}

    def get(self, name: str) -> Recording | None:
        """The recording called ``name``, or None when there is none."""
        recording = self._cache.get(name)
        if recording is not None:
            return recording
        if not is_recording_name(name):
            return None
        # Misses are not cached, so a test may add a file to the directory after the app is
        # built. The read blocks the loop, but only once per recording and they are small.
        try:
            data = (self.directory / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        recording = self._cache[name] = parse_recording(name, data)
        return recording

    def find(self, names: tuple[str, ...]) -> Recording | None:
        """The first of ``names`` that is a recording."""
        for name in names:
            recording = self.get(name)
            if recording is not None:
                return recording
        return None

    def names(self) -> list[str]:
        """Every recording's file name, sorted."""
        return sorted(
            path.name
            for path in self.directory.iterdir()
            if is_recording_name(path.name) and path.is_file()
        )
