"""What the emulator received (``GET /_emulator/requests``): each request as a test reads it,
its body parsed when it is JSON."""

from __future__ import annotations

from typing import Final, TypedDict

import orjson
from aiohttp import web

REQUEST_LOG_SIZE: Final = 1000
NOT_JSON: Final = object()


class RecordedRequest(TypedDict):
    method: str
    path: str
    raw_path: str
    """The path as the request line had it, percent-escapes and all (``path`` is decoded)."""
    query_string: str
    query: dict[str, str]
    """The first value of each parameter; ``query_string`` has them all."""
    headers: dict[str, str]
    """Names in lower case; repeated fields joined with ", " (RFC 9110, 5.3)."""
    json: object
    """The parsed body; None when there is none or it is not JSON."""


def parse_json(body: bytes) -> object:
    """The body parsed, or ``NOT_JSON``."""
    try:
        parsed: object = orjson.loads(body)
    except orjson.JSONDecodeError:
        return NOT_JSON
    return parsed


def record(request: web.Request, payload: object) -> RecordedRequest:
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return {
        "method": request.method,
        "path": request.path,
        "raw_path": request.raw_path.partition("?")[0],
        "query_string": request.query_string,
        "query": {name: request.query.getone(name) for name in request.query},
        "headers": headers,
        "json": None if payload is NOT_JSON else payload,
    }
