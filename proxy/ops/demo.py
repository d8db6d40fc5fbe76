"""The built-in demo's configuration (``llm-proxy demo``): config/demo.yaml, and the cloud
identities its Bedrock and Vertex AI providers sign with, made fresh at each start.

The emulator checks them as the clouds do (a SigV4 signature; a token issued for a JWT signed
by the service account's key), so the demo's cloud models show real signing offline. Without
the aws and gcp extras those two providers and their models are left out, and the demo serves
the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from proxy.core.cloud_config import AwsAuth, GoogleAuth
from proxy.core.config import Config
from proxy.emulator.cloud import CloudAuth, new_service_account
from proxy.emulator.sigv4 import AwsKey
from proxy.http.cloud import cloud_problems

# Shipped in the package (a link to config/demo.yaml in the repository).
DEMO_CONFIG: Final = Path(__file__).resolve().parent.parent / "demo.yaml"
CREDENTIALS_ENV: Final = "DEMO_VERTEX_CREDENTIALS"
CLOUD_APIS: Final = frozenset({"bedrock", "vertex"})
MISSING: Final = (
    "The demo's Bedrock and Vertex AI models need the aws and gcp extras: "
    "pip install 'llm-proxy[aws,gcp]'"
)


@dataclass(frozen=True)
class Demo:
    config: Path  # the configuration to serve
    env: dict[str, str]  # what its ${...} references need besides EMULATOR_URL
    cloud: CloudAuth | None  # what the emulator accepts; None: no cloud providers
    note: str | None = None  # what the demo leaves out, and why


def prepare(folder: Path, emulator_url: str, shipped: Config) -> Demo:
    """The demo's configuration, with a new service account in ``folder`` when the cloud
    extras are installed, else without its cloud providers (written to ``folder``)."""
    if cloud_problems(shipped):
        return Demo(_without_clouds(folder), {}, None, MISSING)
    account = folder / "vertex-demo-sa.json"
    keys: dict[str, AwsKey] = {}
    public: list[str] = []
    for provider in shipped.providers.values():
        identity = provider.cloud
        if isinstance(identity, AwsAuth) and identity.keys is not None:
            given = identity.keys
            keys[given.access_key_id] = AwsKey(given.secret_access_key, given.session_token)
        elif isinstance(identity, GoogleAuth) and not public:
            email = f"demo@{identity.project}.iam.gserviceaccount.com"
            token_uri = f"{emulator_url}/token"
            public.append(new_service_account(account, token_uri, identity.project, email))
    accepted = CloudAuth(aws_keys=keys, google_public_keys=tuple(public))
    return Demo(DEMO_CONFIG, {CREDENTIALS_ENV: str(account)}, accepted)


def _without_clouds(folder: Path) -> Path:
    raw: Any = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    clouds = {n for n, p in raw["providers"].items() if p.get("api") in CLOUD_APIS}
    raw["providers"] = {n: p for n, p in raw["providers"].items() if n not in clouds}
    raw["models"] = {n: m for n, m in raw["models"].items() if m.get("provider") not in clouds}
    path = folder / "demo.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path
