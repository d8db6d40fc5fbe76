from __future__ import annotations

from types import MappingProxyType

import pytest

from proxy.core.auth import INVALID_KEY, MISSING_KEY, KeyRing, parse_bearer
from proxy.core.config import Team, key_digest
from proxy.core.errors import AuthenticationFailed

RESEARCH = Team("research", (key_digest("rk-123"), key_digest("rk-456")), ("*",))
SUPPORT = Team("support", (key_digest("sk-789"),), ("llama-*",))
TEAMS = MappingProxyType({"research": RESEARCH, "support": SUPPORT})


@pytest.mark.parametrize(
    ("authorization", "team"),
    [
        ("Bearer rk-123", RESEARCH),
        ("Bearer rk-456", RESEARCH),
        ("Bearer sk-789", SUPPORT),
        ("bearer sk-789", SUPPORT),  # the scheme is case-insensitive (RFC 9110 section 11.1)
        ("BEARER sk-789", SUPPORT),
        ("Bearer   sk-789  ", SUPPORT),
        (" Bearer sk-789", SUPPORT),
    ],
)
def test_known_keys_identify_their_team(authorization: str, team: Team) -> None:
    assert KeyRing(TEAMS).identify(authorization) is team


@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (None, MISSING_KEY),
        ("", MISSING_KEY),
        ("Bearer", MISSING_KEY),
        ("Bearer ", MISSING_KEY),
        ("Bearer    ", MISSING_KEY),
        ("rk-123", MISSING_KEY),  # a bare key is not a Bearer credential
        ("Basic cms6MTIz", MISSING_KEY),
        ("Token rk-123", MISSING_KEY),
        ("Bearer\trk-123", MISSING_KEY),
        ("Bearerrk-123", MISSING_KEY),
        ("Bearer rk-12", INVALID_KEY),
        ("Bearer RK-123", INVALID_KEY),  # keys are case-sensitive
        ("Bearer rk-123 rk-456", INVALID_KEY),
        ("Bearer sha256:" + key_digest("rk-123").hex(), INVALID_KEY),  # a digest is not a key
        ("Bearer r\u00e9-123", INVALID_KEY),
        ("Bearer rk-\udcff", INVALID_KEY),  # aiohttp decodes headers with surrogateescape
        ("Bearer rk-\ud800", INVALID_KEY),
    ],
)
def test_missing_and_invalid_keys_fail(authorization: str | None, message: str) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        KeyRing(TEAMS).identify(authorization)
    assert info.value.message == message
    assert info.value.http_status == 401
    assert info.value.code == ("invalid_api_key" if message == INVALID_KEY else None)


def test_messages() -> None:
    assert MISSING_KEY == "Missing API key: send Authorization: Bearer <key>"
    assert INVALID_KEY == "Invalid API key"


def test_empty_key_ring_knows_no_one() -> None:
    with pytest.raises(AuthenticationFailed):
        KeyRing({}).identify("Bearer rk-123")


def test_a_key_shared_by_two_teams_is_refused() -> None:
    thief = Team("thief", (key_digest("rk-456"),), ("*",))
    with pytest.raises(ValueError, match="'research' and 'thief' share a key"):
        KeyRing({"research": RESEARCH, "thief": thief})


@pytest.mark.parametrize(
    ("authorization", "credentials"),
    [
        (None, None),
        ("", None),
        ("Bearer abc", "abc"),
        ("bEaReR abc", "abc"),
        ("Bearer  abc ", "abc"),
        ("Bearer", None),
        ("Basic abc", None),
        ("Bearer a b", "a b"),
    ],
)
def test_parse_bearer(authorization: str | None, credentials: str | None) -> None:
    assert parse_bearer(authorization) == credentials
