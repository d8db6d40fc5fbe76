"""Cloud identities for the tests: a service account of their own for Vertex AI, AWS keys for
Bedrock, and the emulator started to accept them (``cloud_servers``).

The emulator checks real SigV4 signatures and issues real OAuth tokens (proxy/emulator/cloud.py);
these helpers give it, and the proxy, credentials that fit each other:

    port = free_port()
    account = service_account_file(tmp_path, token_uri(port))
    with running_servers(recordings, cloud=cloud_auth(account), emulator_port=port) as servers:
        ...   # a vertex provider with credentials: account.path; bedrock with aws: AWS_KEYS

or all of it at once with ``cloud_servers(tmp_path, recordings)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from proxy.emulator.cloud import CloudAuth, new_service_account
from proxy.emulator.sigv4 import AwsKey
from tests.support.harness import Servers, free_port, running_servers

# AWS's documentation example keys: long-term, and a temporary pair with its session token.
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_TEMP_KEY_ID = "ASIAIOSFODNN7EXAMPLE"
AWS_TEMP_SECRET = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
AWS_SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
AWS_KEYS = MappingProxyType(
    {
        AWS_KEY_ID: AwsKey(AWS_SECRET),
        AWS_TEMP_KEY_ID: AwsKey(AWS_TEMP_SECRET, AWS_SESSION_TOKEN),
    }
)
BEDROCK_API_KEY = "ABSKZW11bGF0b3ItYmVkcm9jay1hcGkta2V5"
PROJECT = "emulated-project"
REGION = "us-east5"


def bedrock_headers(
    url: str,
    body: bytes,
    *,
    key_id: str = AWS_KEY_ID,
    secret: str = AWS_SECRET,
    session_token: str | None = None,
    region: str = "us-east-1",
) -> dict[str, str]:
    """The headers botocore signs a Bedrock POST of ``body`` to ``url`` with (the model id in
    ``url`` already escaped, as botocore's client escapes it); send ``url`` unaltered
    (``yarl.URL(url, encoded=True)``)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(
        method="POST", url=url, data=body, headers={"Content-Type": "application/json"}
    )
    credentials = Credentials(key_id, secret, session_token)
    SigV4Auth(credentials, "bedrock", region).add_auth(request)
    return {name: str(value) for name, value in request.headers.items()}


@dataclass(frozen=True)
class ServiceAccount:
    path: Path
    """The service-account JSON file (what a vertex provider's ``credentials`` names)."""
    public_key: str
    """Its key's public half, PEM: what the emulator verifies the account's JWTs with."""
    email: str


def token_uri(port: int) -> str:
    """The emulator's OAuth token endpoint when it listens on ``port``."""
    return f"http://127.0.0.1:{port}/token"


def service_account_file(
    tmp_path: Path, token_uri: str, name: str = "vertex-sa.json"
) -> ServiceAccount:
    """A new RSA key in a service-account JSON file whose token_uri is ``token_uri``."""
    email = f"proxy@{PROJECT}.iam.gserviceaccount.com"
    path = tmp_path / name
    public_pem = new_service_account(path, token_uri, PROJECT, email)
    return ServiceAccount(path, public_pem, email)


def cloud_auth(
    account: ServiceAccount | None = None,
    *,
    token_lifetime: float = 3600.0,
    token_delay: float = 0.0,
    aws: bool = True,
    bedrock_api_key: bool = False,
) -> CloudAuth:
    """What the emulator accepts: ``AWS_KEYS`` (with ``aws``), ``BEDROCK_API_KEY`` (with
    ``bedrock_api_key``), and tokens for JWTs of ``account`` that live ``token_lifetime``."""
    return CloudAuth(
        aws_keys=AWS_KEYS if aws else MappingProxyType({}),
        bedrock_api_keys=frozenset({BEDROCK_API_KEY} if bedrock_api_key else ()),
        google_public_keys=(account.public_key,) if account is not None else (),
        token_lifetime=token_lifetime,
        token_delay=token_delay,
    )


@dataclass(frozen=True)
class CloudServers:
    servers: Servers
    account: ServiceAccount


@contextmanager
def cloud_servers(
    tmp_path: Path,
    recordings: Path,
    *,
    chunk_delay: float = 0.0,
    token_lifetime: float = 3600.0,
    token_delay: float = 0.0,
    bedrock_api_key: bool = False,
) -> Iterator[CloudServers]:
    """The emulator checking Bedrock signatures by ``AWS_KEYS`` and Vertex tokens it issued
    for a new service account (``account.path``), with the harness's proxy in front."""
    port = free_port()
    account = service_account_file(tmp_path, token_uri(port))
    auth = cloud_auth(
        account,
        token_lifetime=token_lifetime,
        token_delay=token_delay,
        bedrock_api_key=bedrock_api_key,
    )
    with running_servers(recordings, chunk_delay, cloud=auth, emulator_port=port) as servers:
        yield CloudServers(servers, account)
