"""A cloud provider's settings (``api: bedrock``, ``api: vertex``): where it is and whose
identity calls it, parsed from its ``providers`` entry (docs/providers/bedrock.md,
docs/providers/vertex.md).

Pure: credentials are only named here. Reading them (botocore's chain, google-auth's files) is
``proxy.http.cloud``'s, at startup and off the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from proxy.core.yaml_readers import Checker, Invalid, join_path, member, optional_text, text

# The provider keys a cloud API adds to a provider's entry.
CLOUD_KEYS: Final = frozenset({"region", "aws", "project", "credentials"})
_AWS_KEYS: Final = frozenset({"access_key_id", "secret_access_key", "session_token", "role_arn"})
# AWS and Google region names: lowercase words and digits joined by dashes (us-east-1, us-east5).
_REGION: Final = re.compile(r"[a-z][a-z0-9-]{1,40}")
# A Google Cloud project id (6 to 30 characters), or a project number.
_PROJECT: Final = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20}")
_ROLE_ARN: Final = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}")
PUBLISHERS: Final = frozenset({"google", "anthropic"})
_PRINTABLE: Final = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class AwsKeys:
    """Long-term (or temporary) keys given in the configuration: used as they are, never
    completed from the environment."""

    access_key_id: str = field(repr=False)
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class AwsAuth:
    """How a Bedrock provider signs: with ``keys``, or botocore's default chain when None;
    ``role_arn`` assumed on top of either."""

    region: str
    keys: AwsKeys | None = None
    role_arn: str | None = None


@dataclass(frozen=True, slots=True)
class GoogleAuth:
    """Whose token a Vertex provider sends: the account in ``credentials`` (a service-account
    or external-account JSON file), or Application Default Credentials when None."""

    project: str
    region: str
    credentials: str | None = None


CloudAuth = AwsAuth | GoogleAuth


def default_base_url(auth: CloudAuth) -> str:
    """The public endpoint of a cloud provider whose ``base_url`` is not set."""
    if isinstance(auth, AwsAuth):
        return f"https://bedrock-runtime.{auth.region}.amazonaws.com"
    if auth.region == "global":  # the global endpoint has no region in its host
        return "https://aiplatform.googleapis.com"
    return f"https://{auth.region}-aiplatform.googleapis.com"


def vertex_prefix(auth: GoogleAuth) -> str:
    """What every Vertex path starts with after the host: the project's location."""
    return f"/v1/projects/{auth.project}/locations/{auth.region}"


def parse_cloud(ck: Checker, api: str, node: Mapping[str, object], path: str) -> CloudAuth | None:
    """The cloud settings of a provider entry, and a problem for each that its API has no use
    for (region, aws, project, credentials are the clouds' only)."""
    if api == "bedrock":
        for key in ("project", "credentials"):
            _not_for(ck, node, key, path, "api: vertex")
        region = ck.require(node, "region", path, _region, "")
        keys, role_arn = _parse_aws(ck, node.get("aws"), join_path(path, "aws"))
        if node.get("aws") is not None and node.get("api_key") is not None:
            ck.fail(join_path(path, "api_key"), "and aws are two ways to sign: set one")
        return AwsAuth(region, keys, role_arn)
    if api == "vertex":
        _not_for(ck, node, "aws", path, "api: bedrock")
        if node.get("api_key") is not None:
            ck.fail(join_path(path, "api_key"), "is not used by api: vertex (see credentials)")
        return GoogleAuth(
            ck.require(node, "project", path, _project, ""),
            ck.require(node, "region", path, _region, ""),
            ck.optional(node, "credentials", path, optional_text, None),
        )
    for key in sorted(CLOUD_KEYS):
        _not_for(ck, node, key, path, "api: bedrock or api: vertex")
    return None


def parse_publisher(ck: Checker, node: Mapping[str, object], path: str) -> str | None:
    return ck.optional(node, "publisher", path, member(PUBLISHERS, "publisher", listed=True), None)


def publisher_of(model: str, publisher: str | None) -> str:
    """A Vertex model's publisher: as configured, else Anthropic's for a Claude model."""
    if publisher is not None:
        return publisher
    return "anthropic" if model.startswith("claude") else "google"


def _not_for(ck: Checker, node: Mapping[str, object], key: str, path: str, which: str) -> None:
    if node.get(key) is not None:
        ck.fail(join_path(path, key), f"is only for {which}")


def _parse_aws(ck: Checker, raw: object, path: str) -> tuple[AwsKeys | None, str | None]:
    node = ck.mapping(raw, path, _AWS_KEYS) if raw is not None else None
    if node is None:
        return None, None
    problems = len(ck.problems)
    key_id = ck.optional(node, "access_key_id", path, _key_part, None)
    secret = ck.optional(node, "secret_access_key", path, _key_part, None)
    token = ck.optional(node, "session_token", path, _key_part, None)
    role_arn = ck.optional(node, "role_arn", path, _role_arn, None)
    if len(ck.problems) > problems:
        return None, role_arn  # told at their paths
    if (key_id is None) != (secret is None):
        ck.fail(path, "needs both access_key_id and secret_access_key, or neither")
        return None, role_arn
    if key_id is None or secret is None:
        if token is not None:
            ck.fail(join_path(path, "session_token"), "goes with access_key_id")
        return None, role_arn
    return AwsKeys(key_id, secret, token), role_arn


def _key_part(value: object) -> str | None:
    # What a signature's headers carry: printable ASCII, as AWS issues them. A line break (a
    # variable read from a file) is named here rather than sent.
    part = optional_text(value)
    if part is not None and not _PRINTABLE.fullmatch(part):
        raise Invalid("must be printable ASCII without spaces or line breaks")
    return part


def _region(value: object) -> str:
    region = text(value)
    if not _REGION.fullmatch(region):
        raise Invalid("must be a region name such as us-east-1")
    return region


def _project(value: object) -> str:
    project = text(value)
    if not _PROJECT.fullmatch(project):
        raise Invalid("must be a Google Cloud project id or number")
    return project


def _role_arn(value: object) -> str | None:
    arn = optional_text(value)
    if arn is not None and not _ROLE_ARN.fullmatch(arn):
        raise Invalid("must be an IAM role ARN (arn:aws:iam::123456789012:role/name)")
    return arn
