"""The emulator's SigV4 verifier, held against requests signed by botocore itself (its public
``SigV4Auth``): model ids with ``:`` and ``/`` pass, and any change to what was signed fails."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlsplit

import pytest

# The aws extra's (pyproject.toml): the lowest-versions pass runs without it.
pytest.importorskip("botocore")

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from proxy.emulator.sigv4 import AwsKey, Refusal, SignedRequest, verify_sigv4
from tests.support.cloud import (
    AWS_KEY_ID,
    AWS_KEYS,
    AWS_SECRET,
    AWS_SESSION_TOKEN,
    AWS_TEMP_KEY_ID,
    AWS_TEMP_SECRET,
)

HOST = "bedrock-runtime.us-east-1.amazonaws.com"
BODY = b'{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}'
MODELS = [
    "bedrock",
    "us.anthropic.claude-sonnet-4-20250514-v1:0",
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/x",
    "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a b+c~d",
]


def botocore_signed(
    model: str,
    *,
    key_id: str = AWS_KEY_ID,
    secret: str = AWS_SECRET,
    token: str | None = None,
    body: bytes = BODY,
    operation: str = "converse",
    query: str = "",
) -> tuple[SignedRequest, datetime]:
    """A request signed by botocore as its Bedrock client signs one (the model id escaped
    whole in the path), and when it was signed."""
    path = f"/model/{quote(model, safe='')}/{operation}"
    url = f"https://{HOST}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(
        method="POST", url=url, data=body, headers={"Content-Type": "application/json"}
    )
    before = datetime.now(UTC)
    SigV4Auth(Credentials(key_id, secret, token), "bedrock", "us-east-1").add_auth(request)
    headers = [("Host", HOST), *((k, str(v)) for k, v in request.headers.items())]
    split = urlsplit(request.url)
    return SignedRequest("POST", str(split.path), str(split.query), headers, body), before


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("operation", ["converse", "converse-stream", "invoke"])
def test_botocore_signatures_verify(model: str, operation: str) -> None:
    signed, now = botocore_signed(model, operation=operation)
    assert "%3A" in signed.raw_path or ":" not in model
    assert verify_sigv4(signed, AWS_KEYS, now) is None


def test_query_and_session_token_are_signed_as_botocore_does() -> None:
    signed, now = botocore_signed(
        MODELS[1],
        key_id=AWS_TEMP_KEY_ID,
        secret=AWS_TEMP_SECRET,
        token=AWS_SESSION_TOKEN,
        query="b=2&a=x%20y&a=1",
    )
    assert verify_sigv4(signed, AWS_KEYS, now) is None


def _with_header(signed: SignedRequest, name: str, value: str) -> SignedRequest:
    headers = [(k, v) for k, v in signed.headers if k.lower() != name.lower()]
    return replace(signed, headers=[*headers, (name, value)])


SIGNATURE_MISMATCH = "InvalidSignatureException"


@pytest.mark.parametrize(
    ("change", "error_type"),
    [
        (lambda s: replace(s, body=s.body + b" "), SIGNATURE_MISMATCH),
        (
            lambda s: replace(s, raw_path=s.raw_path.replace("converse", "invoke")),
            SIGNATURE_MISMATCH,
        ),
        # The escape is what was signed: an unescaped ":" is another path.
        (lambda s: replace(s, raw_path=s.raw_path.replace("%3A", ":")), SIGNATURE_MISMATCH),
        (lambda s: replace(s, method="PUT"), SIGNATURE_MISMATCH),
        (lambda s: replace(s, query_string="a=1"), SIGNATURE_MISMATCH),
        (lambda s: _with_header(s, "Content-Type", "text/plain"), SIGNATURE_MISMATCH),
        (lambda s: _with_header(s, "Host", "evil.example"), SIGNATURE_MISMATCH),
        (
            lambda s: _with_header(
                s,
                "Authorization",
                dict(s.headers)["Authorization"].replace(AWS_KEY_ID, "AKIDNOTKNOWN"),
            ),
            "UnrecognizedClientException",
        ),
        (
            lambda s: replace(s, headers=[h for h in s.headers if h[0] != "Authorization"]),
            "MissingAuthenticationTokenException",
        ),
        (
            lambda s: _with_header(s, "Authorization", "AWS4-HMAC-SHA256 nonsense"),
            "IncompleteSignatureException",
        ),
        # Long-term keys with a session token (one left in the environment, say).
        (lambda s: _with_header(s, "X-Amz-Security-Token", "stray"), "UnrecognizedClientException"),
    ],
    ids=[
        "changed-body",
        "changed-path",
        "unescaped-path",
        "changed-method",
        "changed-query",
        "changed-header",
        "changed-host",
        "unknown-key-id",
        "no-authorization",
        "malformed-authorization",
        "token-with-long-term-key",
    ],
)
def test_changed_requests_are_refused(change: object, error_type: str) -> None:
    signed, now = botocore_signed(MODELS[1])
    assert callable(change)
    refusal = verify_sigv4(change(signed), AWS_KEYS, now)
    assert isinstance(refusal, Refusal)
    assert refusal.error_type == error_type


def test_wrong_secret_is_refused() -> None:
    signed, now = botocore_signed(MODELS[2], secret="not-the-secret")
    refusal = verify_sigv4(signed, AWS_KEYS, now)
    assert refusal is not None
    assert refusal.error_type == SIGNATURE_MISMATCH
    assert "signature we calculated does not match" in refusal.message


@pytest.mark.parametrize(
    ("token", "error_type"), [(None, "ExpiredTokenException"), ("old", "ExpiredTokenException")]
)
def test_temporary_keys_need_their_session_token(token: str | None, error_type: str) -> None:
    signed, now = botocore_signed(
        MODELS[0], key_id=AWS_TEMP_KEY_ID, secret=AWS_TEMP_SECRET, token=token
    )
    refusal = verify_sigv4(signed, AWS_KEYS, now)
    assert refusal is not None
    assert refusal.error_type == error_type


@pytest.mark.parametrize("shift", [timedelta(minutes=6), -timedelta(minutes=6)])
def test_a_signature_more_than_five_minutes_off_is_refused(shift: timedelta) -> None:
    signed, now = botocore_signed(MODELS[1])
    refusal = verify_sigv4(signed, AWS_KEYS, now + shift)
    assert refusal is not None
    assert refusal.error_type == SIGNATURE_MISMATCH
    assert refusal.message.startswith("Signature ")
    assert verify_sigv4(signed, AWS_KEYS, now + shift / 2) is None


def test_a_signature_for_another_service_is_refused() -> None:
    signed, now = botocore_signed(MODELS[0])
    assert verify_sigv4(signed, AWS_KEYS, now, service="sagemaker") is not None


def test_a_key_is_checked_with_its_own_secret() -> None:
    signed, now = botocore_signed(MODELS[0])
    keys = {AWS_KEY_ID: AwsKey(AWS_TEMP_SECRET)}
    refusal = verify_sigv4(signed, keys, now)
    assert refusal is not None
    assert refusal.error_type == SIGNATURE_MISMATCH
