"""Bedrock's errors, by their AWS type, as the proxy's: before the answer (an error status with
the ``x-amzn-ErrorType`` header) and in a ConverseStream (an exception message).

Bedrock's error body is ``{"message": "..."}`` (``{"Message": ...}`` from some of AWS's front
doors); its type comes in ``x-amzn-ErrorType`` (``ThrottlingException:http://internal.amazon.
com/coral/com.amazon.bedrock/``), and mid-stream as the exception's name in lower camel case
(``throttlingException``). Statuses and meanings are those of the Bedrock Runtime API reference
(Converse, "Errors"; the AWS common errors for the signature's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from proxy.core.errors import UpstreamStatusError

# Type -> the status the client gets, where Bedrock's would mislead it (docs/canonical-output.md
# section 4). Any other keeps its status's meaning: ThrottlingException 429 (retried with the
# proxy's own backoff: it carries no delay), InternalServerException 500 (retried, then a 502),
# ValidationException and ResourceNotFoundException (the upstream's 4xx, passed on).
_CLIENT_STATUS: Final[Mapping[str, int]] = {
    # Busy, not broken: retried (a 429, a 503), then a 503.
    "ModelNotReadyException": 503,
    "ServiceUnavailableException": 503,
    # A 424: the model failed, which is the upstream's failure, not the client's.
    "ModelErrorException": 502,
    "ModelStreamErrorException": 502,
    # A 408 (retried): the model took too long, which a client's 408 would not say.
    "ModelTimeoutException": 504,
    # A 400 for the account's quota: a rate limit.
    "ServiceQuotaExceededException": 429,
}
# The proxy's own credentials or IAM permissions refused: the operator's problem, a 502 that
# names it (a client told 403 would think its own key wrong).
_CREDENTIALS: Final = frozenset({
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "IncompleteSignatureException",
    "ExpiredTokenException",
    "MissingAuthenticationTokenException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
})  # fmt: skip
# Mid-stream exceptions (ConverseStreamOutput) -> the status the API reference gives them.
STREAM_EXCEPTIONS: Final[Mapping[str, int]] = {
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "internalServerException": 500,
    "modelStreamErrorException": 424,
    "validationException": 400,
}


def error_name(header: str) -> str:
    """The type's name in ``x-amzn-ErrorType`` (or a body's ``__type``), without its namespace."""
    name = header.split(":", 1)[0]
    return name.rpartition("#")[2].strip()


def aws_error(status: int, name: str, message: object) -> UpstreamStatusError:
    """The error for Bedrock's answer ``status`` of AWS type ``name``."""
    text = message if isinstance(message, str) and message else f"Bedrock answered {name}"
    client_status = _CLIENT_STATUS.get(name)
    if name in _CREDENTIALS:
        text = f"Bedrock refused the proxy's AWS credentials ({name}): {text}"
        client_status = 502
    return UpstreamStatusError(
        text, upstream_status=status, code=name or None, client_status=client_status
    )


def stream_error(name: str, payload: object) -> UpstreamStatusError:
    """The error for a ConverseStream exception (an ``error`` the normalizer takes as it is)."""
    message = payload.get("message") if isinstance(payload, dict) else None
    upper = name[:1].upper() + name[1:]
    return aws_error(STREAM_EXCEPTIONS.get(name, 500), upper, message)
