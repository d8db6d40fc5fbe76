"""The proxy's exception tree in Anthropic's error envelope (faces/anthropic/errors.py)."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.errors import (
    AuthenticationFailed,
    BodyTooLarge,
    ExpectationFailed,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PermissionDenied,
    ProxyError,
    RateLimited,
    ServiceUnavailable,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from proxy.core.sse import SSEDecoder
from proxy.normalize.faces.anthropic.errors import (
    anthropic_status,
    body_event,
    error_event,
    error_reply,
)


def upstream(status: int, kind: str | None = None) -> UpstreamStatusError:
    return UpstreamStatusError("said the upstream", upstream_status=status, upstream_type=kind)


TABLE = [
    (InvalidRequest("bad", param="messages"), 400, "invalid_request_error"),
    (BodyTooLarge("too big"), 413, "request_too_large"),
    (NotFound("no such path"), 404, "not_found_error"),
    (ModelNotFound("claude-9"), 404, "not_found_error"),
    (MethodNotAllowed(("POST",)), 405, "invalid_request_error"),
    (ExpectationFailed("200-ok"), 417, "invalid_request_error"),
    (AuthenticationFailed("no key"), 401, "authentication_error"),
    (PermissionDenied("not this model"), 403, "permission_error"),
    (RateLimited("slow down", retry_after=3), 429, "rate_limit_error"),
    (ServiceUnavailable("every deployment is down"), 529, "overloaded_error"),
    (ProxyError("a bug of ours"), 500, "api_error"),
    (UpstreamError("the upstream failed"), 502, "api_error"),
    (UpstreamConnectError("refused"), 502, "api_error"),
    (UpstreamProtocolError("not JSON"), 502, "api_error"),
    (UpstreamTimeout("too slow"), 504, "timeout_error"),
    (upstream(400, "invalid_request_error"), 400, "invalid_request_error"),
    (upstream(400), 400, "invalid_request_error"),
    (upstream(402, "billing_error"), 402, "billing_error"),
    (upstream(404, "not_found_error"), 404, "not_found_error"),
    (upstream(413, "request_too_large"), 413, "request_too_large"),
    (upstream(422), 422, "invalid_request_error"),
    (upstream(429, "rate_limit_error"), 429, "rate_limit_error"),
    # The upstream refusing the proxy's own key is no fault of the client's key.
    (upstream(401, "authentication_error"), 502, "api_error"),
    (upstream(500, "api_error"), 502, "api_error"),
    (upstream(503), 529, "overloaded_error"),
    (upstream(529, "overloaded_error"), 529, "overloaded_error"),
    (upstream(502, "overloaded_error"), 529, "overloaded_error"),  # a stream's error event
]


@pytest.mark.parametrize(("exc", "status", "kind"), TABLE, ids=lambda v: getattr(v, "message", v))
def test_status_and_type(exc: ProxyError, status: int, kind: str) -> None:
    assert anthropic_status(exc) == (status, kind)
    got_status, body = error_reply(exc)
    assert got_status == status
    assert orjson.loads(body) == {"type": "error", "error": {"type": kind, "message": exc.message}}


@pytest.mark.parametrize(("exc", "status", "kind"), TABLE, ids=lambda v: getattr(v, "message", v))
def test_error_event(exc: ProxyError, status: int, kind: str) -> None:
    frame = error_event(exc)
    [event] = SSEDecoder().feed(frame)
    assert event.event == "error"
    assert orjson.loads(event.data) == {
        "type": "error",
        "error": {"type": kind, "message": exc.message},
    }
    assert frame.startswith(b"event: error\ndata: {") and frame.endswith(b"}\n\n")


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        ({"error": {"type": "service_unavailable", "message": "busy"}}, "overloaded_error", "busy"),
        ({"error": {"type": "rate_limit_error", "message": "slow"}}, "rate_limit_error", "slow"),
        ({"type": "timeout_error", "message": "late"}, "timeout_error", "late"),
        ({"error": {"type": "upstream_error", "message": "x"}}, "api_error", "x"),
        ({"error": {"type": "upstream_error"}}, "api_error", "The upstream failed"),
        ("garbage", "api_error", "The upstream failed"),
    ],
)
def test_body_event(body: object, kind: str, message: str) -> None:
    [event] = SSEDecoder().feed(body_event(body))
    assert orjson.loads(event.data) == {
        "type": "error",
        "error": {"type": kind, "message": message},
    }
