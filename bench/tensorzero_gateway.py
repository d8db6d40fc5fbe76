"""Run TensorZero's gateway, embedded in its PyPI wheel, as a standalone HTTP server.

    <peer venv>/bin/python bench/tensorzero_gateway.py CONFIG.toml

The wheel has no gateway command; ``tensorzero.patch_openai_client`` starts the embedded gateway's
HTTP server (on a port of its choosing, on loopback) through ``_start_http_gateway``. This calls
that directly, prints ``base_url <url>`` and serves until SIGTERM or SIGINT. Run by bench/run.py
with the peers' virtualenv (see bench/setup.sh); never imported by the project.
"""

from __future__ import annotations

import signal
import sys
import threading

import tensorzero


def main() -> None:
    gateway = tensorzero._start_http_gateway(
        config_file=sys.argv[1],
        clickhouse_url=None,
        postgres_url=None,
        valkey_url=None,
        async_setup=False,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(f"base_url {gateway.base_url}", flush=True)
    stop.wait()
    gateway.close()


if __name__ == "__main__":
    main()
