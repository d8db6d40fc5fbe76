"""An OTLP/HTTP receiver that accepts every export and discards it (not a test): the collector
of ``bench/limits.py --telemetry``, in a process of its own so that its CPU is not the proxy's.

    python bench/otlp_sink.py PORT
"""

from __future__ import annotations

import sys

from aiohttp import web


async def accept(request: web.Request) -> web.Response:
    await request.read()
    # An empty ExportTraceServiceResponse (or metrics'): zero bytes of protobuf.
    return web.Response(body=b"", content_type="application/x-protobuf")


def main() -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", accept)
    app.router.add_post("/v1/metrics", accept)
    app.router.add_get("/", lambda _: accept_ready())
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


async def accept_ready() -> web.Response:
    return web.Response(text="ok")


if __name__ == "__main__":
    main()
