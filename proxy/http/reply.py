"""``JsonReply``: a whole JSON response, as every answer the proxy gives whole is (a
completion, an error, the model list): aiohttp's ``Response``, with the body and type set."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

__all__ = ["JsonReply"]


class JsonReply(web.Response):
    """A whole ``application/json`` response; ``headers`` are the extra ones (more may be
    added through ``headers`` until it is prepared)."""

    def __init__(
        self, body: bytes, *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(body=body, status=status, headers=headers, content_type="application/json")
        self.raw = body  # as given: Response.body is typed for every kind of payload
