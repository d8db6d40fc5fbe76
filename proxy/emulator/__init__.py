"""An offline upstream: replays recorded provider responses over HTTP, and injects faults.

It lets the proxy be tried, tested and benchmarked with no keys and no network:

    app = build_emulator_app()                 # the recordings shipped in RECORDINGS_DIR
    await run_emulator("127.0.0.1", 8900)      # or serve it, until cancelled

It answers OpenAI's API and the providers' native ones (Anthropic, Gemini, Cohere, Ollama,
TGI). The requested model (the body's, or the path's for Gemini and TGI) picks the recording
(``endpoint``), ``<model>@<fault>`` a fault (``fault``), and ``GET /_emulator/requests`` shows
what the emulator was sent (``server``).
"""

from __future__ import annotations

from proxy.emulator.server import build_emulator_app, run_emulator
from proxy.emulator.store import RECORDINGS_DIR

__all__ = ["RECORDINGS_DIR", "build_emulator_app", "run_emulator"]
