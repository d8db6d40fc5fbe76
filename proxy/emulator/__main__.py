"""``python -m proxy.emulator``: serve the emulator until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from proxy.emulator.cloud import CloudAuth, public_key_of
from proxy.emulator.server import run_emulator
from proxy.emulator.sigv4 import AwsKey


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
    parser.add_argument(
        "--aws-key",
        action="append",
        default=[],
        metavar="ID:SECRET[:SESSION_TOKEN]",
        help="an AWS key whose SigV4 signatures the Bedrock paths accept (repeatable)",
    )
    parser.add_argument(
        "--bedrock-api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a Bedrock API key the Bedrock paths accept as a bearer token (repeatable)",
    )
    parser.add_argument(
        "--google-service-account",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a service-account JSON file whose signed JWTs /token accepts (repeatable)",
    )
    parser.add_argument(
        "--google-public-key",
        action="append",
        default=[],
        type=Path,
        metavar="PEM",
        help="a PEM public key (or certificate) whose signed JWTs /token accepts (repeatable)",
    )
    parser.add_argument(
        "--token-lifetime", type=float, default=3600.0, help="seconds a /token token lives"
    )
    parser.add_argument(
        "--token-delay", type=float, default=0.0, help="seconds /token waits before answering"
    )
    args = parser.parse_args(argv)
    aws_keys: dict[str, AwsKey] = {}
    for item in args.aws_key:
        key_id, secret, *token = item.split(":", 2)
        if not key_id or not secret:
            parser.error(f"--aws-key {item!r}: expected ID:SECRET[:SESSION_TOKEN]")
        aws_keys[key_id] = AwsKey(secret, token[0] if token else None)
    public_keys = [path.read_text() for path in args.google_public_key]
    public_keys += [public_key_of(path) for path in args.google_service_account]
    try:
        args.cloud = CloudAuth(
            aws_keys=aws_keys,
            bedrock_api_keys=frozenset(args.bedrock_api_key),
            google_public_keys=tuple(public_keys),
            token_lifetime=args.token_lifetime,
            token_delay=args.token_delay,
        )
    except ValueError as exc:
        parser.error(str(exc))
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
        cloud=args.cloud,
        stop_signals=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve)


if __name__ == "__main__":
    main()
