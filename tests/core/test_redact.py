"""``Redactor``: every configured secret out of a text, in each form it may be quoted."""

from __future__ import annotations

import pytest

from proxy.core.errors import UpstreamStatusError
from proxy.core.redact import Redactor

REDACT = Redactor(["sk-secret-value", "a/b+c=d&e", "sk-secret-value-longer"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Incorrect API key provided: sk-secret-value.", "Incorrect API key provided: ***."),
        ("Bearer sk-secret-valuesk-secret-value", "Bearer ******"),
        ("sk-secret-value-longer", "***"),  # the longer secret whole, not its prefix
        ("GET /v1?key=a%2Fb%2Bc%3Dd%26e HTTP/1.1", "GET /v1?key=*** HTTP/1.1"),
        ("key=a%2Fb%2Bc%3Dd%26e", "key=***"),
        ("form: a%2Fb%2Bc%3Dd%26e", "form: ***"),
        # As the proxy's own request line carries a query value ("/" left as it is).
        ("POST /v1?key=a/b%2Bc%3Dd%26e HTTP/1.1", "POST /v1?key=*** HTTP/1.1"),
        ("a/b+c=d&e", "***"),
        ("nothing to hide", "nothing to hide"),
        ("sk-secret-valu", "sk-secret-valu"),  # a part of one is not it
        ("", ""),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert REDACT(text) == expected


def test_no_secrets_leave_texts_alone() -> None:
    assert Redactor([])("sk-secret-value") == "sk-secret-value"
    assert Redactor(["", ""])("x") == "x"


def test_an_error_is_redacted_in_place() -> None:
    exc = UpstreamStatusError(
        "bad key sk-secret-value",
        upstream_status=400,
        upstream_type="key sk-secret-value refused",  # a provider's 4xx keeps its type
        param="sk-secret-value",
        code="a/b+c=d&e",
    )
    assert REDACT.error(exc) is exc
    assert (exc.message, exc.param, exc.code, exc.error_type, str(exc)) == (
        "bad key ***",
        "***",
        "***",
        "key *** refused",
        "bad key ***",
    )
