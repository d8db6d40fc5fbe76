"""``llm-proxy``: serve, check-config, hash-key, emulate, demo."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from proxy.core.config import hash_key, load_config
from proxy.core.errors import ConfigError
from proxy.core.routing import describe_routes
from proxy.http.cloud import cloud_problems
from proxy.ops.server import Listen, run, serve, serve_worker
from proxy.ops.telemetry import telemetry_problems


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-proxy", description="An OpenAI-compatible LLM gateway."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve_cmd = commands.add_parser("serve", help="run the proxy")
    serve_cmd.add_argument("--config", required=True, type=Path, help="the YAML configuration file")
    serve_cmd.add_argument("--host", help="listen address (default: server.host)")
    serve_cmd.add_argument("--port", type=int, help="listen port (default: server.port)")
    serve_cmd.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    serve_cmd.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="reload the configuration when the file changes (checked every 2 s, or SECONDS)",
    )

    check = commands.add_parser(
        "check-config", help="validate a configuration and print its routes"
    )
    check.add_argument("config", type=Path)

    hash_cmd = commands.add_parser(
        "hash-key", help="print sha256:<hex> of a team key, for the config"
    )
    hash_cmd.add_argument("key")

    emulate = commands.add_parser(
        "emulate", help="serve recorded provider answers (no keys, no network)"
    )
    emulate.add_argument("--host", default="127.0.0.1")
    emulate.add_argument("--port", type=int, default=9100)
    emulate.add_argument(
        "--recordings", type=Path, help="a directory of recordings (default: built in)"
    )
    emulate.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between stream events"
    )

    demo = commands.add_parser("demo", help="run the emulator and the proxy on config/demo.yaml")
    demo.add_argument("--port", type=int, default=8080, help="the proxy's port")
    demo.add_argument("--emulator-port", type=int, default=9100)
    return parser


def _print_problems(path: Path, error: ConfigError) -> None:
    print(f"{path}: invalid configuration", file=sys.stderr)
    for problem in error.problems:
        print(f"  {problem}", file=sys.stderr)


def _check_config(path: Path) -> int:
    try:
        config = load_config(path)
    except ConfigError as error:
        _print_problems(path, error)
        return 2
    if problems := telemetry_problems(config) + cloud_problems(config):
        _print_problems(path, ConfigError(problems))
        return 2
    print(f"{path}: OK")
    for line in describe_routes(config):
        print(f"  {line}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as error:
        _print_problems(args.config, error)
        return 2
    if problems := telemetry_problems(config) + cloud_problems(config):
        # Refused before any worker starts: never a process that serves and traces nothing,
        # nor one whose cloud providers cannot sign a request.
        _print_problems(args.config, ConfigError(problems))
        return 2
    workers = args.workers if args.workers is not None else config.server.workers
    if workers < 1:
        print("--workers must be at least 1", file=sys.stderr)
        return 2
    listen = Listen(
        args.config,
        args.host or config.server.host,
        args.port if args.port is not None else config.server.port,
        workers,
        args.watch,
    )
    return serve(listen)


def _emulate(args: argparse.Namespace) -> int:
    from proxy.emulator import run_emulator

    print(f"emulator listening on http://{args.host}:{args.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        run(
            lambda: run_emulator(
                args.host, args.port, args.recordings, args.chunk_delay, stop_signals=True
            )
        )
    return 0


def _demo_text(port: int) -> str:
    base = f"http://127.0.0.1:{port}/v1"
    return f"""
The proxy is running on {base} in front of the offline emulator (config/demo.yaml).

  curl {base}/chat/completions \\
    -H "Authorization: Bearer sk-demo-key" -H "Content-Type: application/json" \\
    -d '{{"model": "gpt-4o-mini", "stream": true,
         "messages": [{{"role": "user", "content": "Hi"}}]}}'

  curl {base}/responses \\
    -H "Authorization: Bearer sk-demo-key" -H "Content-Type: application/json" \\
    -d '{{"model": "gpt-4o-mini-responses", "input": "Hi"}}'

  from openai import OpenAI
  client = OpenAI(base_url="{base}", api_key="sk-demo-key")
  for chunk in client.chat.completions.create(
      model="llama-3.1-8b", stream=True, messages=[{{"role": "user", "content": "Hi"}}]
  ):
      print(chunk.choices[0].delta.content or "" if chunk.choices else "", end="")
  print(client.responses.create(model="gpt-4o-mini", input="Hi").output_text)
  print(client.embeddings.create(model="text-embedding-3-small", input="Hi").data[0].embedding)

/v1/responses is translated to chat for every model but gpt-4o-mini-responses, whose
provider serves the Responses API itself: it is passed through.

Anthropic's SDKs and Claude Code call /v1/messages (docs/anthropic-face.md):

  from anthropic import Anthropic
  client = Anthropic(base_url="{base.removesuffix("/v1")}", api_key="sk-demo-key")
  print(client.messages.create(model="claude-llama-3.1-8b", max_tokens=256,
        messages=[{{"role": "user", "content": "Hi"}}]).content[0].text)

  ANTHROPIC_BASE_URL={base.removesuffix("/v1")} ANTHROPIC_AUTH_TOKEN=sk-demo-key \
    claude -p "Hi" --model claude-sonnet-4

Models: gpt-4o-mini (OpenAI), llama-3.1-8b (FriendliAI), sabia-4 (Maritaca),
gpt-5-nano (Azure), llama-3.3-70b (Groq), deepseek-r1 (DeepSeek),
claude-sonnet-4 (Anthropic), claude-llama-3.1-8b (FriendliAI), gemini-2.5-flash (Gemini),
gpt-4o-mini-responses (OpenAI's Responses API), text-embedding-3-small (embeddings),
claude-sonnet-4-bedrock (AWS Bedrock, signed), gemini-2.5-flash-vertex (Vertex AI),
claude-sonnet-4-vertex (Vertex AI; both with an OAuth token).
Ctrl-C stops.
"""


def _demo(args: argparse.Namespace) -> int:
    from proxy.emulator import run_emulator
    from proxy.ops.demo import DEMO_CONFIG, prepare

    emulator_url = f"http://127.0.0.1:{args.emulator_port}"
    try:
        shipped = load_config(DEMO_CONFIG, {"EMULATOR_URL": emulator_url})
    except ConfigError as error:
        _print_problems(DEMO_CONFIG, error)
        return 2
    for port in (args.port, args.emulator_port):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                print(
                    f"port {port} is already in use; pick another with --port/--emulator-port",
                    file=sys.stderr,
                )
                return 2
    with tempfile.TemporaryDirectory(prefix="llm-proxy-demo-") as folder:
        demo = prepare(Path(folder), emulator_url, shipped)
        os.environ.update({"EMULATOR_URL": emulator_url, **demo.env})
        listen = Listen(demo.config, "127.0.0.1", args.port, 1)

        def ready() -> None:
            print(_demo_text(args.port), flush=True)
            if demo.note:
                print(demo.note, flush=True)

        async def both() -> None:
            emulator = asyncio.create_task(
                run_emulator("127.0.0.1", args.emulator_port, cloud=demo.cloud)
            )
            try:
                await serve_worker(listen, reuse_port=False, ready=ready)
            finally:
                emulator.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await emulator

        with contextlib.suppress(KeyboardInterrupt):
            run(both)
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = _parser().parse_args(argv)
    if args.command == "check-config":
        sys.exit(_check_config(args.config))
    if args.command == "hash-key":
        print(hash_key(args.key))
        sys.exit(0)
    if args.command == "serve":
        sys.exit(_serve(args))
    if args.command == "emulate":
        sys.exit(_emulate(args))
    sys.exit(_demo(args))
