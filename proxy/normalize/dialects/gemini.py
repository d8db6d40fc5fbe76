"""Google's Gemini API (``{base_url}/v1beta/models/{model}:generateContent``), translated both
ways.

docs/providers/gemini.md says what is translated, what is refused and what to set.
"""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects.dialect import Dialect


def _auth(api_key: str) -> dict[str, str]:
    return {"x-goog-api-key": api_key}


DIALECT: Final = Dialect(
    "gemini",
    paths={"chat": "/v1beta/models/{model}:generateContent"},
    # alt=sse: events, not the JSON array Gemini streams otherwise (which is read all the same).
    stream_paths={"chat": "/v1beta/models/{model}:streamGenerateContent?alt=sse"},
    auth=_auth,
    json_array_stream=True,
    native=True,
)
