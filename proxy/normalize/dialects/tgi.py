"""Text Generation Inference's native API (``POST {base_url}/generate`` and
``/generate_stream``), for ``/v1/completions``. TGI's Messages API is OpenAI's: ``api: openai``.

docs/providers/tgi.md says what is translated and what is refused.
"""

from __future__ import annotations

from typing import Final

from proxy.normalize.dialects.dialect import Dialect

DIALECT: Final = Dialect(
    "tgi",
    paths={"completions": "/generate"},
    stream_paths={"completions": "/generate_stream"},
    native=True,
)
