"""The one mapping of upstream failures to a client's status and type (docs/canonical-output.md
section 4)."""

from __future__ import annotations

import pytest

from proxy.core.errors import UpstreamStatusError, to_openai_error


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (400, "invalid_request_error", (400, "invalid_request_error")),
        (404, None, (404, "invalid_request_error")),
        (403, None, (403, "permission_error")),
        (429, "rate_limit_error", (429, "rate_limit_error")),
        # The proxy's own credentials refused: never told as the client's key being wrong.
        (401, "authentication_error", (502, "upstream_error")),
        (500, "api_error", (502, "upstream_error")),
        (503, None, (502, "upstream_error")),
        # Anthropic's 529, and its stream's overloaded_error event (sent with a 200).
        (529, "overloaded_error", (503, "service_unavailable")),
        (529, None, (503, "service_unavailable")),
        (502, "overloaded_error", (503, "service_unavailable")),
    ],
)
def test_upstream_status_maps_to_the_clients(
    status: int, kind: str | None, expected: tuple[int, str]
) -> None:
    error = UpstreamStatusError("Overloaded", upstream_status=status, upstream_type=kind)
    got_status, body = to_openai_error(error)
    assert (got_status, body["error"]["type"]) == expected
    assert body["error"]["message"] == "Overloaded"
