"""The ``llm-proxy`` command line, run as a user runs it: real processes, real ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path

import openai
import pytest

from proxy.core.config import load_config
from proxy.ops.cli import _demo_text
from proxy.ops.demo import DEMO_CONFIG
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "proxy"]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_hash_key() -> None:
    result = run_cli("hash-key", "test")
    assert result.returncode == 0
    assert (
        result.stdout.strip()
        == "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    )


def test_check_config_prints_routes_and_never_keys() -> None:
    env = {
        name: f"secret-{name}"
        for name in (
            "OPENAI_API_KEY",
            "FRIENDLI_TOKEN",
            "MARITACA_API_KEY",
            "GROQ_API_KEY",
            "DEEPSEEK_API_KEY",
            "MISTRAL_API_KEY",
            "AZURE_OPENAI_KEY",
            "RESEARCH_KEY",
            "SUPPORT_KEY",
        )
    }
    result = run_cli("check-config", "config/proxy.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert "llama-3.1-8b -> friendli (meta-llama-3.1-8b-instruct)" in result.stdout
    assert "secret-" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("providers: {}\nmodels: {}\nteams: {}\n", ["providers: must be a non-empty mapping"]),
        ("server: [\n", ["invalid YAML"]),
        (
            "providers: {p: {base_url: 'http://x'}}\nmodels: {m: {provider: q, model: m}}\n"
            "teams: {t: {keys: ['${NOPE_KEY}'], models: ['*']}}\n",
            [
                "models.m.provider: unknown provider 'q'",
                "teams.t.keys[0]: environment variable NOPE_KEY is not set",
            ],
        ),
        (
            # Finite, and every request to the model would end 500 with a cost of inf or NaN.
            "providers: {p: {base_url: 'http://x'}}\nmodels: {m: {provider: p, model: m}}\n"
            "teams: {t: {keys: ['sk-team-key-0001'], models: ['*']}}\n"
            "prices: {m: {input: 1.7e+308, output: 1}}\n",
            ["prices.m.input: must be at most 10000 USD per million tokens"],
        ),
    ],
    ids=["empty sections", "YAML syntax", "two problems at once", "a price past the bound"],
)
def test_check_config_reports_every_problem_without_a_traceback(
    tmp_path: Path, text: str, problems: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = run_cli("check-config", str(path))
    assert result.returncode != 0
    for problem in problems:
        assert problem in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_check_config_on_a_missing_file() -> None:
    result = run_cli("check-config", "/nonexistent/proxy.yaml")
    assert (
        result.returncode != 0
        and "cannot read" in result.stderr
        and "Traceback" not in result.stderr
    )


def test_serve_refuses_a_bad_config_before_listening(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("providers: {}\n")
    result = run_cli("serve", "--config", str(path), "--port", str(free_port()))
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["missing", "a file", "read-only"])
def test_serve_with_workers_and_no_writable_tmpdir_says_what_to_do(
    tmp_path: Path, where: str
) -> None:
    # As `docker run --read-only` without `--tmpfs /tmp`: the workers' run directory (their
    # shared metrics files) cannot be made.
    tmpdir = tmp_path / "tmp"
    if where == "a file":
        tmpdir.write_text("")
    elif where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes in a read-only directory")
        tmpdir.mkdir(mode=0o500)
    path = tmp_path / "proxy.yaml"
    path.write_text(
        "providers: {p: {base_url: 'http://127.0.0.1:9'}}\nmodels: {m: {provider: p, model: m}}\n"
        "teams: {t: {keys: ['sk-team-key-0001'], models: ['*']}}\n"
    )
    result = run_cli(
        "serve", "--config", str(path), "--port", str(free_port()), "--workers", "2",
        env={"TMPDIR": str(tmpdir)},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "writable temporary directory" in result.stderr
    assert str(tmpdir) in result.stderr
    assert "TMPDIR" in result.stderr and "--tmpfs /tmp" in result.stderr


@contextmanager
def process(*args: str, ready: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [*CLI, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line)
            if ready in line:
                break
        else:
            raise AssertionError("not ready: " + "".join(seen))
        assert ready in "".join(seen), "".join(seen)
        # Keep reading, so that a chatty process never blocks on a full pipe.
        drain = threading.Thread(target=proc.stdout.read, daemon=True)
        drain.start()
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_demo_runs_offline_and_answers_the_printed_snippet() -> None:
    port, emulator_port = free_port(), free_port()
    with process(
        "demo", "--port", str(port), "--emulator-port", str(emulator_port), ready="Ctrl-C stops"
    ) as proc:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-demo-key", max_retries=0
        )
        with client:
            text = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(
                    model="llama-3.1-8b", stream=True, messages=[{"role": "user", "content": "Hi"}]
                )
                if chunk.choices
            )
            assert text == "This is"
            for model in ("gpt-4o-mini", "sabia-4", "gpt-5-nano", "llama-3.3-70b", "deepseek-r1"):
                stream = client.chat.completions.create(
                    model=model, stream=True, messages=[{"role": "user", "content": "Hi"}]
                )
                assert any(chunk.choices and chunk.choices[0].finish_reason for chunk in stream), (
                    model
                )
            # gpt-4o-mini's Responses request is translated to chat; gpt-4o-mini-responses's is
            # passed through to the emulator's /v1/responses (its provider has responses: true).
            assert client.responses.create(model="gpt-4o-mini", input="Hi").output_text
            passed = client.responses.create(model="gpt-4o-mini-responses", input="Hi")
            assert (passed.model, passed.output_text) == (
                "gpt-4o-mini-responses",
                "Hello! It's nice to meet you.",
            )
            with client.responses.stream(model="gpt-4o-mini-responses", input="Hi") as events:
                assert events.get_final_response().output_text == passed.output_text
            embedding = client.embeddings.create(model="text-embedding-3-small", input="Hi")
            assert len(embedding.data[0].embedding) == 8
            if clouds_installed():
                # Signed, and with a token: the emulator checks both (docs/providers/).
                for model in ("claude-sonnet-4-bedrock", "gemini-2.5-flash-vertex",
                              "claude-sonnet-4-vertex"):  # fmt: skip
                    answer = client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": "Hi"}]
                    )
                    assert answer.choices[0].message.content, model
                    stream = client.chat.completions.create(
                        model=model, stream=True, messages=[{"role": "user", "content": "Hi"}]
                    )
                    assert any(c.choices and c.choices[0].finish_reason for c in stream), model
            else:
                with pytest.raises(openai.NotFoundError):
                    client.chat.completions.create(
                        model="claude-sonnet-4-bedrock",
                        messages=[{"role": "user", "content": "Hi"}],
                    )
    assert proc.returncode == 0


def clouds_installed() -> bool:
    """Whether the aws and gcp extras are (the lowest-versions pass runs without them)."""
    try:
        return all(find_spec(name) is not None for name in ("botocore", "google.auth"))
    except ModuleNotFoundError:  # "google" itself is missing
        return False


def test_demo_text_shows_every_endpoint_with_the_demo_models() -> None:
    text = _demo_text(8080)
    models = load_config(DEMO_CONFIG, {"EMULATOR_URL": "http://127.0.0.1:9100"}).models
    for example in (
        "/v1/chat/completions",
        "/v1/responses",
        "client.chat.completions.create(",
        'client.responses.create(model="gpt-4o-mini", input=',
        'client.embeddings.create(model="text-embedding-3-small", input=',
    ):
        assert example in text
    named = re.findall(r'model="([^"]+)"|"model": "([^"]+)"', text)
    assert {first or second for first, second in named} <= set(models)
    listed = text.partition("Models:")[2]
    assert all(f"{model} (" in listed for model in models), listed


def test_serve_with_two_workers(tmp_path: Path) -> None:
    emulator_port, port = free_port(), free_port()
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"providers: {{emu: {{base_url: 'http://127.0.0.1:{emulator_port}/v1'}}}}\n"
        "models: {gpt-4o: {provider: emu, model: openai}}\n"
        "teams: {t: {keys: [sk-cli-test], models: ['*']}}\naccess_log: false\n"
    )
    with (
        process("emulate", "--port", str(emulator_port), ready="listening"),
        process(
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            "--workers",
            "2",
            ready="listening",
        ),
    ):
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/readyz", timeout=2
                ) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "the workers never became ready"
            time.sleep(0.1)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-cli-test", max_retries=0
        )
        with client:
            for _ in range(20):
                chat = client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
                )
                assert chat.model == "gpt-4o" and chat.choices[0].message.content


# Makes the cloud extras look uninstalled to a process that has them: its finder, first on
# sys.meta_path, says they are not there (as importlib's own finders would).
_NO_CLOUDS = """
import sys

class _Uninstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("botocore", "google"):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, _Uninstalled())
"""


def test_a_cloud_provider_without_its_extra_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(_NO_CLOUDS)
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "providers:\n"
        "  bedrock: {api: bedrock, region: us-east-1}\n"
        "  vertex: {api: vertex, project: my-project, region: us-east5}\n"
        "models:\n"
        "  a: {provider: bedrock, model: x}\n"
        "  b: {provider: vertex, model: y}\n"
        "teams: {t: {keys: [sk-test-team], models: ['*']}}\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    for command in ("check-config", "serve"):
        result = run_cli(command, *(["--config"] if command == "serve" else []), str(config),
                         env=env)  # fmt: skip
        assert result.returncode == 2, result
        assert (
            "providers.bedrock: api: bedrock needs the aws extra, which is not installed: "
            "pip install 'llm-proxy[aws]'" in result.stderr
        )
        assert "providers.vertex: api: vertex needs the gcp extra" in result.stderr
