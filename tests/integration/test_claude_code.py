"""Claude Code itself (``claude -p``, the npm package's native binary) through the proxy, offline:
it answers a prompt and runs one of its own tools, once to an OpenAI-compatible model (the
Anthropic face translating both ways) and once to an Anthropic one (passed through).

No recording can answer an agent's tool loop (its second request carries what the tool printed),
so the upstream is scripted (tests/support/agent_upstream.py): the first request is answered with
a call of Claude Code's ``Bash`` tool, the one carrying its result with text quoting it. The team
key goes as ``ANTHROPIC_AUTH_TOKEN`` (Bearer) to one and ``ANTHROPIC_API_KEY`` (x-api-key) to the
other.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_upstream import ANSWER_PREFIX, AgentUpstream
from tests.support.harness import TEAM_KEY, UPSTREAM_SECRET, Servers, free_port, start_site
from tests.support.metrics import read_samples, scrape, total
from tests.support.node import claude_binary

# The shell computes the figure: only a command that really ran can print it.
COMMAND = "echo proxied-$((6*7))"
PRINTED = "proxied-42"
MODELS = {
    "claude-proxied-openai": {"provider": "scripted-openai", "model": "scripted-chat"},
    "claude-proxied-anthropic": {"provider": "scripted-anthropic", "model": "scripted-claude"},
}


@pytest.fixture(scope="module")
def claude() -> str:
    return claude_binary()


@pytest.fixture(scope="module")
def upstream(servers: Servers) -> Iterator[tuple[AgentUpstream, str]]:
    scripted = AgentUpstream(tool="Bash", tool_input={"command": COMMAND, "description": "Echo"})
    port = free_port()
    runner = servers.loop.call(lambda: start_site(scripted.app(), port))
    yield scripted, f"http://127.0.0.1:{port}"
    servers.loop.call(runner.cleanup)


@pytest.fixture(scope="module")
def root(servers: Servers, upstream: tuple[AgentUpstream, str]) -> str:
    """The proxy's root, with its metrics at /metrics."""
    _, upstream_url = upstream
    providers = {
        "scripted-openai": {"base_url": f"{upstream_url}/v1", "api_key": UPSTREAM_SECRET},
        "scripted-anthropic": {
            "base_url": upstream_url,
            "api_key": UPSTREAM_SECRET,
            "api": "anthropic",
        },
    }
    url, _, _ = servers.start_app(MODELS, metrics=True, providers=providers)
    return url.removesuffix("/v1")


def run_claude(claude: str, root: str, model: str, home: Path, key_variable: str) -> str:
    """``claude -p`` with every model name it uses set to ``model``, all its non-essential
    traffic off, a HOME of its own, and Bash allowed without asking; returns what it printed."""
    home.mkdir()
    env: dict[str, Any] = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": root,
        key_variable: TEAM_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
    }
    done = subprocess.run(
        [
            claude,
            "-p",
            f"Run the shell command `{COMMAND}` and tell me what it printed.",
            "--model",
            model,
            "--allowedTools",
            "Bash",
        ],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    return done.stdout


@pytest.mark.parametrize(
    ("model", "key_variable", "path"),
    [
        ("claude-proxied-openai", "ANTHROPIC_AUTH_TOKEN", "/v1/chat/completions"),
        ("claude-proxied-anthropic", "ANTHROPIC_API_KEY", "/v1/messages"),
    ],
)
def test_claude_code_runs_a_tool_through_the_proxy(
    claude: str,
    root: str,
    upstream: tuple[AgentUpstream, str],
    tmp_path: Path,
    model: str,
    key_variable: str,
    path: str,
) -> None:
    scripted, _ = upstream
    before = total(read_samples(scrape(f"{root}/metrics")), "llm_proxy_requests_total", model=model)
    scripted.requests.clear()

    printed = run_claude(claude, root, model, tmp_path / "home", key_variable)

    # The answer quotes what the tool printed: Claude Code ran the command the model asked for,
    # and sent its output back through the proxy.
    assert ANSWER_PREFIX + PRINTED in printed
    assert any(PRINTED in result for result in scripted.results())
    assert {p for p, _ in scripted.requests} <= {path, "/v1/messages/count_tokens"}
    assert all(body["model"] == MODELS[model]["model"] for _, body in scripted.requests)
    samples = read_samples(scrape(f"{root}/metrics"))
    metered = total(samples, "llm_proxy_requests_total", model=model, endpoint="messages")
    assert metered - before >= 2  # the tool call and the answer, at least
    assert total(samples, "llm_proxy_tokens_total", model=model) > 0
