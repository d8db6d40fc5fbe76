"""Bearer key -> team, without leaking key material through timing.

Only ``Authorization: Bearer <key>`` is accepted: no ``x-api-key`` header, no query parameter.
It is what every OpenAI SDK sends, and one way in is one way to audit.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from types import MappingProxyType

from proxy.core.config import Team, key_digest
from proxy.core.errors import AuthenticationFailed

MISSING_KEY = "Missing API key: send Authorization: Bearer <key>"
INVALID_KEY = "Invalid API key"


def parse_bearer(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer <credentials>`` value, else None.

    The scheme is case-insensitive (RFC 9110 section 11.1); RFC 6750 section 2.1 defines it.
    """
    if authorization is None:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip() or None


class KeyRing:
    """The teams' keys, held only as sha256 digests."""

    __slots__ = ("_by_digest",)

    def __init__(self, teams: Mapping[str, Team]) -> None:
        by_digest: dict[bytes, tuple[bytes, Team]] = {}
        for team in teams.values():
            for digest in team.key_digests:
                _, other = by_digest.setdefault(digest, (digest, team))
                if other is not team:
                    raise ValueError(f"teams {other.name!r} and {team.name!r} share a key")
        self._by_digest = MappingProxyType(by_digest)

    def identify(self, authorization: str | None) -> Team:
        """The team whose key the ``Authorization`` header value carries."""
        key = parse_bearer(authorization)
        if key is None:
            raise AuthenticationFailed(MISSING_KEY)
        # The dict lookup's time depends on the digest, not on the key: comparing digests tells
        # an attacker how many leading bytes of sha256(guess) match a stored digest, and since
        # sha256 is preimage-resistant that is no help in choosing the next guess. Keys are
        # hashed once, unsalted, because they are long random tokens, not passwords.
        digest = key_digest(key)
        found = self._by_digest.get(digest)
        # Belt and braces: the final equality is constant-time whatever the dict compared.
        if found is None or not hmac.compare_digest(found[0], digest):
            raise AuthenticationFailed(INVALID_KEY, code="invalid_api_key")
        return found[1]
