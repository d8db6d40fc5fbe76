"""The configuration of cloud providers (``api: bedrock``, ``api: vertex``): the issue's own
example parses as documented (docs/providers/bedrock.md, docs/providers/vertex.md), and each
misuse is one clear problem at its path."""

from __future__ import annotations

import pytest
import yaml

from proxy.core.cloud_config import AwsAuth, AwsKeys, GoogleAuth
from proxy.core.config import Config, dialect_of, parse_config
from proxy.core.errors import ConfigError

TEAMS = "teams: {t: {keys: [tk-one-1], models: ['*']}}\n"
EXAMPLE = """
providers:
  bedrock:
    api: bedrock
    region: us-east-1
    base_url: null
    aws:
      access_key_id: ${AWS_ACCESS_KEY_ID}
      secret_access_key: ${AWS_SECRET_ACCESS_KEY}
      session_token: null
      role_arn: null
    api_key: null
  vertex:
    api: vertex
    project: my-project
    region: us-east5
    base_url: null
    credentials: /secrets/vertex-sa.json
  vertex-global: {api: vertex, project: "123456789", region: global}
  bedrock-vpc: {api: bedrock, region: eu-west-1, base_url: "http://127.0.0.1:9000/"}
models:
  claude-bedrock: {provider: bedrock, model: "us.anthropic.claude-sonnet-4-20250514-v1:0"}
  llama-bedrock:
    provider: bedrock
    model: "arn:aws:bedrock:us-east-1:123456789012:inference-profile/x"
  gemini-vertex: {provider: vertex, model: gemini-2.5-pro}
  claude-vertex: {provider: vertex, model: "claude-sonnet-4@20250514"}
  mistral-vertex: {provider: vertex-global, model: mistral-large, publisher: anthropic}
"""
ENV = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG"}


def parse(text: str, env: dict[str, str] = ENV) -> Config:
    return parse_config(yaml.safe_load(text + TEAMS), env)


def test_the_documented_example() -> None:
    config = parse(EXAMPLE)
    bedrock, vertex = config.providers["bedrock"], config.providers["vertex"]
    assert bedrock.dialect == "bedrock"
    assert bedrock.base_url == "https://bedrock-runtime.us-east-1.amazonaws.com"
    assert bedrock.cloud == AwsAuth(
        "us-east-1", AwsKeys("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG"), None
    )
    assert vertex.base_url == (
        "https://us-east5-aiplatform.googleapis.com/v1/projects/my-project/locations/us-east5"
    )
    assert vertex.cloud == GoogleAuth("my-project", "us-east5", "/secrets/vertex-sa.json")
    assert config.providers["vertex-global"].base_url == (
        "https://aiplatform.googleapis.com/v1/projects/123456789/locations/global"
    )
    assert config.providers["bedrock-vpc"].base_url == "http://127.0.0.1:9000"
    dialects = {
        name: dialect_of(config.providers[m.deployments[0].provider], m.deployments[0])
        for name, m in config.models.items()
    }
    assert dialects == {
        "claude-bedrock": "bedrock",
        "llama-bedrock": "bedrock",
        "gemini-vertex": "vertex_google",
        "claude-vertex": "vertex_anthropic",
        "mistral-vertex": "vertex_anthropic",  # publisher: given wins over the name
    }
    # The secret key is redacted wherever it could appear; the key id is no secret.
    assert "wJalrXUtnFEMI/K7MDENG" in config.secrets
    assert "wJalrXUtnFEMI" not in repr(config)


def test_without_aws_the_default_chain_and_a_role() -> None:
    config = parse(
        "providers: {b: {api: bedrock, region: us-west-2, aws: "
        "{role_arn: 'arn:aws:iam::123456789012:role/bedrock-caller'}}}\n"
        "models: {m: {provider: b, model: x}}\n"
    )
    assert config.providers["b"].cloud == AwsAuth(
        "us-west-2", None, "arn:aws:iam::123456789012:role/bedrock-caller"
    )


PROBLEMS = [
    (
        "providers: {b: {api: bedrock}}",
        ["providers.b: required key 'region' is missing"],
    ),
    (
        "providers: {b: {api: bedrock, region: us-east-1, aws: {access_key_id: AKID}}}",
        ["providers.b.aws: needs both access_key_id and secret_access_key, or neither"],
    ),
    (
        "providers: {b: {api: bedrock, region: us-east-1, aws: {session_token: tok}}}",
        ["providers.b.aws.session_token: goes with access_key_id"],
    ),
    (
        "providers: {b: {api: bedrock, region: us-east-1, aws: {role_arn: admin}}}",
        ["providers.b.aws.role_arn: must be an IAM role ARN (arn:aws:iam::123456789012:role/name)"],
    ),
    (
        "providers: {b: {api: bedrock, region: us-east-1, api_key: bedrock-api-key-1,"
        " aws: {access_key_id: AKID, secret_access_key: secretsecret}}}",
        ["providers.b.api_key: and aws are two ways to sign: set one"],
    ),
    (
        "providers: {b: {api: bedrock, region: US East, project: p}}",
        [
            "providers.b.project: is only for api: vertex",
            "providers.b.region: must be a region name such as us-east-1",
        ],
    ),
    (
        "providers: {v: {api: vertex, region: us-east5, api_key: some-api-key}}",
        [
            "providers.v.api_key: is not used by api: vertex (see credentials)",
            "providers.v: required key 'project' is missing",
        ],
    ),
    (
        "providers: {v: {api: vertex, project: A_B, region: us-east5, aws: {}}}",
        [
            "providers.v.aws: is only for api: bedrock",
            "providers.v.project: must be a Google Cloud project id or number",
        ],
    ),
    (
        "providers: {b: {api: bedrock, region: us-east-1, aws: {access_key_id: AKID, "
        'secret_access_key: "line\\nbreak", session_token: "tok en"}}}',
        [
            "providers.b.aws.secret_access_key: must be printable ASCII without spaces or line "
            "breaks",
            "providers.b.aws.session_token: must be printable ASCII without spaces or line breaks",
        ],
    ),
    (
        "providers: {b: {api: bedrock, region: us-east-1, headers: {Authorization: Bearer-xyz, "
        "X-Amz-Date: y, Content-Type: z, X-Team: ok}}}",
        [
            "providers.b.headers.Authorization: is set by api: bedrock's signing",
            "providers.b.headers.Content-Type: is set by api: bedrock's signing",
            "providers.b.headers.X-Amz-Date: is set by api: bedrock's signing",
        ],
    ),
    (
        "providers: {v: {api: vertex, project: my-project, region: us-east5, "
        "headers: {authorization: Bearer-xyz}}}",
        ["providers.v.headers.authorization: is set by api: vertex's signing"],
    ),
    (
        "providers: {o: {base_url: 'https://o.example', region: us-east-1, credentials: f}}",
        [
            "providers.o.credentials: is only for api: bedrock or api: vertex",
            "providers.o.region: is only for api: bedrock or api: vertex",
        ],
    ),
]


@pytest.mark.parametrize(("providers", "expected"), PROBLEMS)
def test_problems(providers: str, expected: list[str]) -> None:
    text = providers + "\nmodels: {m: {provider: " + providers.split("{")[1].split(":")[0]
    text += ", model: x}}\n"
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert sorted(info.value.problems) == sorted(expected)


def test_publisher_is_only_for_vertex() -> None:
    with pytest.raises(ConfigError) as info:
        parse(
            "providers: {o: {base_url: 'https://o.example'}}\n"
            "models: {m: {provider: o, model: x, publisher: google}}\n"
        )
    assert info.value.problems == [
        "models.m: publisher is only for api: vertex (provider o is api: openai)"
    ]
    with pytest.raises(ConfigError) as info:
        parse(
            "providers: {v: {api: vertex, project: my-project, region: us-east5}}\n"
            "models: {m: {provider: v, model: x, publisher: meta}}\n"
        )
    assert info.value.problems == [
        "models.m.publisher: unknown publisher 'meta' (known: anthropic, google)"
    ]
