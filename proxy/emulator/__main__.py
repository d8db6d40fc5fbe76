"""``python -m proxy.emulator``: serve the emulator until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from proxy.emulator.server import run_emulator


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(
        prog="python -m proxy.emulator", description="Serve recorded provider responses."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--recordings", type=Path, help="default: the packaged recordings")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between streamed events"
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="ENDPOINT=FAULT",
        help="a fault for every request to an endpoint, e.g. chat=status=503 (repeatable)",
    )
    args = parser.parse_args(argv)
    faults: dict[str, str] = {}
    for item in args.fault:
        endpoint, equals, spec = item.partition("=")
        if not equals:
            parser.error(f"--fault {item!r}: expected ENDPOINT=FAULT")
        faults[endpoint] = spec
    args.fault = faults
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the emulator as the command line asks."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    serve = run_emulator(
        args.host,
        args.port,
        args.recordings,
        args.chunk_delay,
        faults=args.fault,
        stop_signals=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve)


if __name__ == "__main__":
    main()
