"""Anthropic's Messages API (``POST {base_url}/v1/messages``), translated both ways.

docs/providers/anthropic.md says what is translated, what is refused and what to set.
"""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects.dialect import Dialect


def _auth(api_key: str) -> dict[str, str]:
    return {"x-api-key": api_key}


DIALECT: Final = Dialect(
    "anthropic",
    paths={"chat": "/v1/messages"},
    auth=_auth,
    # The API version the translation is written against; a configured header replaces it.
    headers={"anthropic-version": "2023-06-01"},
    native=True,
)
