"""The clouds' identities: the headers that sign each request to a Bedrock or Vertex AI
provider, from the clouds' own libraries (botocore, google-auth), which are optional extras
(``pip install 'llm-proxy[aws]'``, ``'llm-proxy[gcp]'``).

Nothing here imports them at module level: a configuration without such a provider never
loads them, and one with it is refused at start (``cloud_problems``) when they are missing.
One provider's broken credentials fail its own requests (a 502 naming the problem), never the
proxy's start or the other providers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from importlib import import_module
from importlib.util import find_spec
from typing import Final, Protocol

from yarl import URL

from proxy.core.cloud_config import AwsAuth, GoogleAuth
from proxy.core.config import Config, Provider
from proxy.core.errors import UpstreamCredentialsError

# The most a request waits for credentials being fetched (a token endpoint, STS, instance
# metadata) before it fails with a 502 naming them.
FETCH_TIMEOUT: Final = 10.0
# A Bedrock API key given to the process, as the AWS SDKs read it.
BEDROCK_TOKEN_ENV: Final = "AWS_BEARER_TOKEN_BEDROCK"
_TOKEN: Final = re.compile(r"[\x21-\x7e]{1,8192}")
_EXTRAS: Final = {
    "bedrock": ("aws", ("botocore",)),
    "vertex": ("gcp", ("google.auth", "requests", "cryptography")),
}


class Signer(Protocol):
    async def sign(self, url: URL, body: bytes) -> bytes:
        """Header lines, each ending in CRLF, that authenticate this request to ``url``;
        ``UpstreamCredentialsError`` if the credentials cannot be had."""
        ...

    async def warm(self) -> None:
        """Read the identity now, in a thread; a failure is left for the requests to tell."""
        ...


async def warm(signers: Iterable[Signer | None]) -> None:
    """Read every cloud identity before the first request, together, within FETCH_TIMEOUT.

    Parsing a service account's RSA key holds the GIL for tens of milliseconds: done at a
    request's time, it would stall every request of the worker's loop meanwhile.
    """
    warming = [signer.warm() for signer in signers if signer is not None]
    if warming:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FETCH_TIMEOUT):
                await asyncio.gather(*warming)


class _Bearer:
    """A Bedrock API key from the environment, sent as a bearer token."""

    def __init__(self, token: str) -> None:
        self._line = None
        if _TOKEN.fullmatch(token):  # else no header line of it: a clear error each request
            self._line = f"Authorization: Bearer {token}\r\n".encode("ascii")

    async def sign(self, url: URL, body: bytes) -> bytes:
        if self._line is None:
            raise UpstreamCredentialsError(
                f"{BEDROCK_TOKEN_ENV} holds characters a header cannot carry (a line break?)"
            )
        return self._line

    async def warm(self) -> None:
        return None


def signer_for(provider: Provider, env: Mapping[str, str] | None = None) -> Signer | None:
    """The signer of a cloud provider's requests; None for one authenticated by configured
    headers alone (every other API, and Bedrock with an ``api_key``)."""
    cloud = provider.cloud
    if isinstance(cloud, GoogleAuth):
        from proxy.http.cloud.google import GoogleSigner  # the gcp extra, only when used

        return GoogleSigner(provider.name, cloud, FETCH_TIMEOUT)
    if not isinstance(cloud, AwsAuth) or provider.api_key:
        return None
    token = (os.environ if env is None else env).get(BEDROCK_TOKEN_ENV)
    if cloud.keys is None and cloud.role_arn is None and token:
        # As the AWS SDKs do: the API key in the environment goes before their chain.
        return _Bearer(token)
    from proxy.http.cloud.aws import AwsSigner  # the aws extra, only when used

    return AwsSigner(provider.name, cloud, FETCH_TIMEOUT)


def cloud_problems(config: Config) -> list[str]:
    """A line for each provider whose cloud library is not installed, naming the extra."""
    problems = []
    for provider in config.providers.values():
        extra = _EXTRAS.get(provider.api)
        if extra is not None and not all(_installed(module) for module in extra[1]):
            problems.append(
                f"providers.{provider.name}: api: {provider.api} needs the {extra[0]} extra, "
                f"which is not installed: pip install 'llm-proxy[{extra[0]}]'"
            )
    return problems


def _installed(module: str) -> bool:
    """Whether ``module`` imports: a broken install (a missing dependency of its own) is as
    good as none, and better told here than as a traceback at the first request."""
    try:
        if find_spec(module) is None:
            return False
        import_module(module)
    except ImportError:  # a parent package is missing, or the module cannot load
        return False
    return True
