"""AWS STS's AssumeRole in the emulator (``POST /sts``): a role assumed with a signed request
by a key it accepts, answered with temporary credentials that its Bedrock paths then take.

A client reaches it as botocore reaches any STS endpoint given to it
(``AWS_ENDPOINT_URL_STS=http://127.0.0.1:<port>/sts``): the Query protocol, a form body
(``Action=AssumeRole&Version=2011-06-15&RoleArn=...&RoleSessionName=...``) signed with SigV4
for service ``sts``, answered in XML (the STS API reference, AssumeRole).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from aiohttp import web

from proxy.emulator.sigv4 import AwsKey, SignedRequest, verify_sigv4

_NS: Final = "https://sts.amazonaws.com/doc/2011-06-15/"


async def answer_assume_role(
    request: web.Request, keys: dict[str, AwsKey], issued: dict[str, AwsKey], lifetime: float
) -> web.Response:
    """Temporary credentials for a request signed by one of ``keys`` (or of the credentials
    issued before, as a role chain would be), kept in ``issued``; else STS's error."""
    body = await request.read()
    raw_path, _, query = request.raw_path.partition("?")
    signed = SignedRequest(request.method, raw_path, query, list(request.headers.items()), body)
    refusal = verify_sigv4(signed, {**keys, **issued}, datetime.now(UTC), service="sts")
    if refusal is not None:
        return _error(403, refusal.error_type, refusal.message)
    form = dict(parse_qsl(body.decode("utf-8", "replace")))
    if form.get("Action") != "AssumeRole":
        return _error(400, "InvalidAction", f"Could not find operation {form.get('Action')}")
    role_arn, session = form.get("RoleArn", ""), form.get("RoleSessionName", "")
    if not role_arn.startswith("arn:aws:iam::") or ":role/" not in role_arn or not session:
        return _error(400, "ValidationError", "RoleArn and RoleSessionName are required")
    key_id = "ASIA" + secrets.token_hex(8).upper()
    key = AwsKey(secrets.token_urlsafe(30), secrets.token_urlsafe(60))
    issued[key_id] = key
    expiration = datetime.now(UTC) + timedelta(seconds=lifetime)
    account, role = role_arn.split(":")[4], role_arn.rpartition(":role/")[2]
    xml = (
        f'<AssumeRoleResponse xmlns="{_NS}"><AssumeRoleResult>'
        f"<Credentials><AccessKeyId>{key_id}</AccessKeyId>"
        f"<SecretAccessKey>{escape(key.secret_access_key)}</SecretAccessKey>"
        f"<SessionToken>{escape(key.session_token or '')}</SessionToken>"
        f"<Expiration>{expiration.strftime('%Y-%m-%dT%H:%M:%SZ')}</Expiration></Credentials>"
        f"<AssumedRoleUser><Arn>arn:aws:sts::{escape(account)}:assumed-role/"
        f"{escape(role)}/{escape(session)}</Arn>"
        f"<AssumedRoleId>AROA{secrets.token_hex(8).upper()}:{escape(session)}</AssumedRoleId>"
        f"</AssumedRoleUser></AssumeRoleResult>"
        f"<ResponseMetadata><RequestId>{secrets.token_hex(16)}</RequestId></ResponseMetadata>"
        f"</AssumeRoleResponse>"
    )
    return web.Response(body=xml.encode(), content_type="text/xml")


def _error(status: int, code: str, message: str) -> web.Response:
    xml = (
        f'<ErrorResponse xmlns="{_NS}"><Error><Type>Sender</Type><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error>"
        f"<RequestId>{secrets.token_hex(16)}</RequestId></ErrorResponse>"
    )
    return web.Response(status=status, body=xml.encode(), content_type="text/xml")
