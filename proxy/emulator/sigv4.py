"""The emulator's check of AWS Signature Version 4, recomputed from the published algorithm.

It is a test oracle written from AWS's specification ("Create a signed AWS API request", IAM
User Guide) with hashlib and hmac, not with botocore, so that it checks the proxy's use of
botocore independently:

    canonical request   method \\n canonical URI \\n canonical query \\n canonical headers \\n
                        signed headers \\n hex(sha256(body))
    string to sign      AWS4-HMAC-SHA256 \\n x-amz-date \\n scope \\n hex(sha256(canonical request))
    scope               <yyyymmdd>/<region>/<service>/aws4_request
    signing key         HMAC("AWS4" + secret, date) -> region -> service -> "aws4_request"

The canonical URI is the path as it was sent, with dot segments removed, URI-encoded once more
(every service but S3 encodes twice: a model id's ``%3A`` is signed as ``%253A``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import quote, unquote

ALGORITHM: Final = "AWS4-HMAC-SHA256"
# AWS refuses a request signed more than five minutes from its own clock, either way.
MAX_SKEW: Final = timedelta(minutes=5)
_AMZ_DATE: Final = "%Y%m%dT%H%M%SZ"
_SPACES: Final = re.compile(r"\s+")
_AUTHORIZATION: Final = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+)\s*,\s*"
    r"SignedHeaders=(?P<signed>[^,\s]+)\s*,\s*Signature=(?P<signature>[0-9a-f]{64})\s*$"
)


@dataclass(frozen=True)
class AwsKey:
    """A secret the emulator accepts for an access key id, and the session token that must
    come with it (None: long-term keys, sent with no token)."""

    secret_access_key: str
    session_token: str | None = None


@dataclass(frozen=True)
class SignedRequest:
    method: str
    raw_path: str
    """The path exactly as the request line had it, percent-escapes and all, without the query."""
    query_string: str
    headers: Sequence[tuple[str, str]]
    """Every header field as received, repeated names included."""
    body: bytes


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: AWS's exception type (the ``x-amzn-ErrorType``) and message."""

    error_type: str
    message: str


def verify_sigv4(
    request: SignedRequest, keys: Mapping[str, AwsKey], now: datetime, service: str = "bedrock"
) -> Refusal | None:
    """None when ``request`` carries a valid SigV4 signature by one of ``keys`` for
    ``service``, made within ``MAX_SKEW`` of ``now`` (aware, UTC); else why not."""
    authorization = _header(request.headers, "authorization")
    if authorization is None:
        return Refusal("MissingAuthenticationTokenException", "Missing Authentication Token")
    parsed = _AUTHORIZATION.match(authorization)
    if parsed is None:
        return Refusal(
            "IncompleteSignatureException",
            f"Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' "
            f"of {ALGORITHM}: {authorization[:80]}",
        )
    key_id, _, scope = parsed["credential"].partition("/")
    scope_parts = scope.split("/")
    key = keys.get(key_id)
    if key is None:
        return Refusal(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    if len(scope_parts) != 4 or scope_parts[2] != service or scope_parts[3] != "aws4_request":
        return Refusal("InvalidSignatureException", f"Credential should be scoped to {service}.")
    token = _header(request.headers, "x-amz-security-token")
    if token != key.session_token:
        # A key with no session token is a long-term key: a token sent with it is as wrong as
        # a missing or outdated one with temporary credentials.
        if key.session_token is None:
            return Refusal(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        return Refusal(
            "ExpiredTokenException", "The security token included in the request is expired"
        )
    signed_names = parsed["signed"].split(";")
    amz_date = _header(request.headers, "x-amz-date")
    if amz_date is None or "host" not in signed_names or "x-amz-date" not in signed_names:
        return Refusal(
            "IncompleteSignatureException",
            "Host and X-Amz-Date must be present and signed.",
        )
    stale = _stale(amz_date, scope_parts[0], now)
    if stale is not None:
        return stale
    canonical = canonical_request(request, signed_names)
    string_to_sign = "\n".join([ALGORITHM, amz_date, scope, _sha256(canonical.encode())])
    signing_key = derive_signing_key(key.secret_access_key, *scope_parts[:3])
    expected = hmac.new(signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, parsed["signature"]):
        return Refusal(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.",
        )
    return None


def canonical_request(request: SignedRequest, signed_names: Sequence[str]) -> str:
    """The canonical request of ``request`` with the headers ``signed_names`` (lower case)."""
    lines = [
        request.method.upper(),
        _canonical_uri(request.raw_path),
        _canonical_query(request.query_string),
    ]
    for name in signed_names:
        values = [value for key, value in request.headers if key.lower() == name]
        lines.append(f"{name}:{','.join(_SPACES.sub(' ', value.strip()) for value in values)}")
    lines += ["", ";".join(signed_names), _sha256(request.body)]
    return "\n".join(lines)


def derive_signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The key chain: each step an HMAC-SHA256 keyed with the one before."""
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _stale(amz_date: str, scope_date: str, now: datetime) -> Refusal | None:
    try:
        signed_at = datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        return Refusal("IncompleteSignatureException", f"Invalid X-Amz-Date: {amz_date}")
    if scope_date != amz_date[:8]:
        return Refusal(
            "InvalidSignatureException",
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            f"from HTTP: '{scope_date}' != '{amz_date[:8]}'",
        )
    stamp = now.strftime(_AMZ_DATE)
    if signed_at < now - MAX_SKEW:
        earliest = (now - MAX_SKEW).strftime(_AMZ_DATE)
        return Refusal(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than {earliest} ({stamp} - 5 min.)",
        )
    if signed_at > now + MAX_SKEW:
        latest = (now + MAX_SKEW).strftime(_AMZ_DATE)
        return Refusal(
            "InvalidSignatureException",
            f"Signature not yet current: {amz_date} is still later than {latest} "
            f"({stamp} + 5 min.)",
        )
    return None


def _canonical_uri(raw_path: str) -> str:
    # Each segment keeps only the unreserved characters (RFC 3986, 2.3): quote's always-safe set.
    return quote(_remove_dot_segments(raw_path or "/"), safe="/")


def _remove_dot_segments(path: str) -> str:
    # RFC 3986, 5.2.4, for an absolute path.
    output: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    trailing = "/" if path.endswith(("/.", "/..")) else ""
    return "/" + "/".join(output) + trailing


def _canonical_query(query_string: str) -> str:
    pairs = []
    for item in query_string.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        pairs.append((_encode(unquote(name)), _encode(unquote(value))))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _encode(text: str) -> str:
    return quote(text, safe="")


def _header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    values = [value for key, value in headers if key.lower() == name]
    return ",".join(values) if values else None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
