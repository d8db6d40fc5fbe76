"""The proxy's one exception tree, and its one mapping to OpenAI error bodies.

    ProxyError                      status  type
    ├── InvalidRequest              400     invalid_request_error
    │   ├── BodyTooLarge            413     invalid_request_error
    │   ├── NotFound                404     invalid_request_error
    │   ├── MethodNotAllowed        405     invalid_request_error (code method_not_allowed)
    │   ├── ExpectationFailed       417     invalid_request_error (code expectation_failed)
    │   └── ModelNotFound           404     invalid_request_error (code model_not_found)
    ├── AuthenticationFailed        401     authentication_error
    ├── PermissionDenied            403     permission_error
    ├── RateLimited                 429     rate_limit_error
    ├── ServiceUnavailable          503     service_unavailable
    └── UpstreamError               502     upstream_error
        ├── UpstreamConnectError    502     upstream_error   (kind "connect")
        ├── UpstreamTimeout         504     timeout_error    (kind "timeout")
        ├── UpstreamProtocolError   502     upstream_error   (kind "protocol")
        └── UpstreamStatusError     the upstream's 4xx, 429 as rate_limit_error, else 502
                                                             (kind "status")

    ConfigError                     not an HTTP error: a configuration file's problems, all at once

Foreign exceptions (aiohttp, asyncio timeouts, orjson) are translated where they enter, in
``upstream.py`` and ``relay.py``; ``to_openai_error`` is the only place that turns an exception
into a status and an ``ErrorResponse`` body (docs/canonical-output.md section 4).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

E = TypeVar("E", bound=BaseException)


class ProxyError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    @property
    def http_status(self) -> int:
        return self.status

    @property
    def error_type(self) -> str:
        return self.type


def handled(exc: E) -> E:
    """``exc``, caught for good: without its traceback, nor those of the exceptions it was
    raised from or during (``__cause__``, ``__context__``).

    Nobody reads the traceback of a ProxyError, or of a transport's failure that becomes one:
    they are answers, not bugs (unexpected exceptions are logged with theirs, and are not
    given here). Kept, a traceback holds every frame the exception passed through, with their
    locals: the request, its exchange, the upstream response, and the exception itself again
    (the exchange's ``failure``, the attempt loop's ``last_error``, the body reader's
    exception). That is a cycle, which only the cycle collector frees: with an upstream
    refusing every request, dozens of objects per request, and long full collections
    (docs/performance.md).
    """
    current: BaseException | None = exc
    for _ in range(_CHAIN_LIMIT):
        if current is None:
            break
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
    return exc


# How far down a chain of causes ``handled`` goes: ours are two or three long; a chain that
# loops (an exception raised during its own handling) must not hold the loop.
_CHAIN_LIMIT = 8


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class BodyTooLarge(InvalidRequest):
    status = 413


class NotFound(InvalidRequest):
    status = 404


class MethodNotAllowed(InvalidRequest):
    status = 405

    def __init__(self, allowed: tuple[str, ...]) -> None:
        super().__init__("Method not allowed for this URL", code="method_not_allowed")
        self.allowed = allowed  # for the Allow header


class ExpectationFailed(InvalidRequest):
    status = 417

    def __init__(self, expect: str) -> None:
        super().__init__(
            f"Unsupported Expect header: {expect!r} (only 100-continue is)",
            code="expectation_failed",
        )


class ModelNotFound(NotFound):
    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model '{model}' does not exist or you do not have access to it",
            param="model",
            code="model_not_found",
        )


class AuthenticationFailed(ProxyError):
    status = 401
    type = "authentication_error"


class PermissionDenied(ProxyError):
    status = 403
    type = "permission_error"


class RateLimited(ProxyError):
    """A team's limit or budget (``code`` says which); ``retry_after`` seconds go out as
    Retry-After."""

    status = 429
    type = "rate_limit_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.retry_after = retry_after


class ServiceUnavailable(ProxyError):
    status = 503
    type = "service_unavailable"


class UpstreamError(ProxyError):
    """Anything that went wrong on the way to, or coming back from, a provider."""

    status = 502
    type = "upstream_error"
    kind: ClassVar[str] = "protocol"
    # Raised once the upstream had begun answering with text that never reached the client:
    # another attempt would generate it all over again, so none is made (``balancer``).
    midway: bool = False
    # False for what says nothing of the deployment's health: what the request itself can
    # cause (a generation longer than a timeout allows), a provider's connections all in use.
    # Its circuit does not count those, or one team could take it away from all.
    blames_deployment: bool = True


class UpstreamConnectError(UpstreamError):
    kind = "connect"


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"
    kind = "timeout"


class UpstreamProtocolError(UpstreamError):
    """The upstream sent what cannot be made canonical (bad framing, bad JSON, oversize)."""

    kind = "protocol"


class UpstreamCredentialsError(UpstreamError):
    """The proxy could not get its own credentials for a cloud provider (an AWS identity, a
    Google token): the operator's problem, told to the client as a 502 that names it."""

    kind = "credentials"


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an error status, or an error object in a stream.

    The upstream's own 4xx keeps its status and message (docs/canonical-output.md section 4); a 429
    is the client's rate limit error; anything else is a 502, and so is the upstream's refusal of
    the proxy's own credentials (401, 407): an SDK told 401 reports the client's key as wrong.
    """

    kind = "status"

    def __init__(
        self,
        message: str,
        *,
        upstream_status: int,
        upstream_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        client_status: int | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.upstream_status = upstream_status
        self.upstream_type = upstream_type
        self.retry_after = retry_after
        # The status the client gets where the upstream's own would mislead it: an error type
        # that tells more than its status (Bedrock's ModelNotReadyException is a 429, busy).
        self.client_status = client_status

    @property
    def http_status(self) -> int:
        if self.client_status is not None:
            return self.client_status
        status = self.upstream_status
        if 400 <= status < 500 and status not in _CREDENTIALS_REFUSED:
            return status
        if status == _OVERLOADED or self.upstream_type == "overloaded_error":
            # Anthropic's 529 (and its stream's overloaded_error event): busy, not broken.
            return 503
        return 502

    @property
    def error_type(self) -> str:
        status = self.http_status
        if status == 429:
            return "rate_limit_error"
        if status == 502:
            return "upstream_error"
        if status == 503:
            return "service_unavailable"
        # A provider's own 4xx keeps the provider's type when it gave a plain string one.
        return self.upstream_type or _TYPE_BY_STATUS.get(status, "invalid_request_error")


_CREDENTIALS_REFUSED = frozenset({401, 407})
_OVERLOADED = 529  # not an IANA status: Anthropic's "overloaded_error"
_TYPE_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    504: "timeout_error",
}


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` holds every ``path: what`` line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def error_body(exc: ProxyError) -> dict[str, Any]:
    """The ``ErrorResponse`` object for ``exc`` (also the payload of a mid-stream error event)."""
    return {
        "error": {
            "message": exc.message,
            "type": exc.error_type,
            "param": exc.param,
            "code": exc.code,
        }
    }


def to_openai_error(exc: ProxyError) -> tuple[int, dict[str, Any]]:
    """The one mapping from an exception of this tree to an HTTP status and body."""
    return exc.http_status, error_body(exc)
