"""Signing Bedrock requests with AWS Signature Version 4, through botocore (the ``aws`` extra).

botocore computes the signature (``SigV4Auth``) and resolves the identity: keys configured
under ``aws:`` as they are (never completed from the environment), else its default chain
(environment, shared files, web identity, container and instance roles), and a role assumed
with STS on top of either, refreshed by botocore ahead of its expiry. Resolving may read files
or call the network, so it runs in a thread (``Refreshing``); signing itself is a few HMACs.
"""

from __future__ import annotations

import re
import time
from typing import Any, Final

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials, RefreshableCredentials
from botocore.session import Session
from yarl import URL

from proxy.core.cloud_config import AwsAuth
from proxy.http.cloud.refresh import Refreshing, read_identity

SERVICE: Final = "bedrock"
# botocore refreshes expiring credentials itself, within get_frozen_credentials: from 15 minutes
# before their expiry, and it never hands out any with less than 10 minutes left (it raises
# instead). So what it hands out is good for 10 minutes, and is asked for again well before.
GOOD_FOR: Final = 600.0
_SIGNED: Final = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")
# The role session's name in CloudTrail: who assumed the role.
SESSION_NAME: Final = "llm-proxy"
_PRINTABLE: Final = re.compile(r"[\x21-\x7e]+")


class AwsSigner:
    """Adds a SigV4 signature to each request of one Bedrock provider."""

    def __init__(self, name: str, auth: AwsAuth, timeout: float) -> None:
        self._region = auth.region
        self._auth = auth
        self._credentials: Credentials | None = None
        self._what = f"AWS credentials of provider '{name}'"
        self._frozen = Refreshing(self._fetch, self._what, timeout)

    async def warm(self) -> None:
        await read_identity(self._resolve, self._what)

    def _resolve(self) -> Credentials:
        credentials = self._credentials
        if credentials is None:
            credentials = self._credentials = resolve(self._auth)
        return credentials

    async def sign(self, url: URL, body: bytes) -> bytes:
        frozen = await self._frozen.get()
        # Only Content-Type and Host are signed of the request's own headers: the others
        # (Accept, User-Agent) are the connection's to set, as AWS allows.
        request = AWSRequest(
            method="POST", url=str(url), data=body, headers={"Content-Type": "application/json"}
        )
        SigV4Auth(frozen, SERVICE, self._region).add_auth(request)
        lines = [
            f"{name}: {request.headers[name]}\r\n" for name in _SIGNED if name in request.headers
        ]
        return "".join(lines).encode("ascii")

    def _fetch(self) -> tuple[ReadOnlyCredentials, float | None]:
        credentials = self._resolve()
        frozen = credentials.get_frozen_credentials()
        for value in frozen:
            # They go into header lines: a line break (a variable read from a file) would add
            # one, and anything but ASCII cannot be sent.
            if value is not None and not _PRINTABLE.fullmatch(value):
                raise ValueError("the AWS credentials hold characters a header cannot carry")
        if isinstance(credentials, RefreshableCredentials):
            return frozen, time.time() + GOOD_FOR
        return frozen, None


def resolve(auth: AwsAuth) -> Credentials:
    """The identity ``auth`` names (blocking: files, instance metadata, STS)."""
    session = Session()
    keys = auth.keys
    if auth.role_arn is not None:
        return _assumed(session, auth)
    if keys is not None:
        return Credentials(keys.access_key_id, keys.secret_access_key, keys.session_token)
    found = session.get_credentials()
    if found is None:
        raise LookupError(
            "no AWS credentials found: set aws: in the provider, or give the process an identity "
            "(AWS_ACCESS_KEY_ID, a profile, a web identity, a container or instance role)"
        )
    return found


def _assumed(session: Session, auth: AwsAuth) -> RefreshableCredentials:
    """The role's credentials, assumed with the configured keys or else the session's own
    (refreshable) chain, and assumed again by botocore before they expire."""
    keys = auth.keys
    if keys is None:
        sts = session.create_client("sts", region_name=auth.region)
    else:
        sts = session.create_client(
            "sts",
            region_name=auth.region,
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key,
            aws_session_token=keys.session_token,
        )

    def assume() -> dict[str, Any]:
        # A botocore client's operations are made from the service's model at runtime.
        answer: Any = sts.assume_role(  # type: ignore[attr-defined]
            RoleArn=auth.role_arn, RoleSessionName=SESSION_NAME
        )
        given = answer["Credentials"]
        return {
            "access_key": given["AccessKeyId"],
            "secret_key": given["SecretAccessKey"],
            "token": given["SessionToken"],
            "expiry_time": given["Expiration"].isoformat(),
        }

    return RefreshableCredentials.create_from_metadata(assume(), assume, "assume-role")
