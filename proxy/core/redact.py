"""``Redactor``: every configured secret taken out of what an upstream says back (sans-IO).

An upstream's error text may quote the request it got ("Incorrect API key provided: sk-…", a
middlebox echoing the request head, a query string with ``?key=``). Whatever of it reaches a
client or a log passes through one ``Redactor``, made from the configuration's secrets
(``Config.secrets``): each becomes ``***``, as it is and URL-encoded. Texts are whole by then:
an error event is redacted once the SSE decoder has put it together, so a secret split across
two reads of a stream is still found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus

from proxy.core.errors import ProxyError, UpstreamStatusError

__all__ = ["MASK", "Redactor"]

MASK: Final = "***"


class Redactor:
    """Replaces each of ``secrets`` (and its URL-encoded forms) in a text with ``***``."""

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {form for secret in secrets if secret for form in _forms(secret)}
        # Longest first: where one secret holds another, the whole of it goes.
        alternatives = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, alternatives))) if forms else None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def error_object(self, error: object) -> None:
        """An upstream's error object (``message``, ``param``, ``code``: any that is a string)
        redacted in place, as it is relayed; anything else is left as it is."""
        if self._pattern is None or not isinstance(error, dict):
            return
        for key in ("message", "param", "code"):
            value = error.get(key)
            if isinstance(value, str):
                error[key] = self._pattern.sub(MASK, value)

    def error(self, exc: ProxyError) -> ProxyError:
        """``exc`` with its message, param, code and type redacted (in place, as it is passed
        on)."""
        if self._pattern is not None:
            exc.message = self(exc.message)
            exc.args = (exc.message,)
            if exc.param is not None:
                exc.param = self(exc.param)
            if exc.code is not None:
                exc.code = self(exc.code)
            # A provider's own 4xx keeps its ``type`` (error_type): the upstream's words too.
            if isinstance(exc, UpstreamStatusError) and exc.upstream_type is not None:
                exc.upstream_type = self(exc.upstream_type)
        return exc


# What the upstream client (yarl) leaves unquoted in a query value: the request line an
# upstream quotes back carries a query key so (RFC 3986 3.4 allows them; ``+`` is a space).
_QUERY_SAFE: Final = "?/:@!$'()*,"


def _forms(secret: str) -> set[str]:
    # As it is, percent-encoded (a query string, a URL quoted back), form-encoded, and as the
    # query of the request line the proxy sent.
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        quote_plus(secret, safe=_QUERY_SAFE),
    }
