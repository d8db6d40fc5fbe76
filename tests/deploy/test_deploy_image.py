"""The image, built for real from the Dockerfile with podman and run as the deployment files run
it: read-only root with a tmpfs at /tmp, the image's unprivileged user, no capabilities, no
privilege escalation.

- the image keeps its HEALTHCHECK and user, carries no installer, and has its standard
  library's bytecode;
- the baked configuration (deploy/kubernetes/proxy.yaml) answers the probes and the
  HEALTHCHECK, and exits 0 on SIGTERM;
- compose's proxy in front of the emulator, both from the image on a network of their own,
  answers a chat completion and a stream, and SIGTERM lets a stream in flight finish before the
  proxy exits 0, its drain logged.

Root only (rootful podman); outside CI a machine without podman skips, in CI (.ci/run installs
it) the test fails instead. Where the Dockerfile's python bases are not in podman's store, and
no registry is in reach, tests/support/image.py makes stand-ins of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_deploy_runtime import COMPOSE_CONFIG, compose_emulator_options, http_get
from tests.support.image import (
    ROOT,
    Podman,
    apt_sources,
    build_image,
    dockerfile_bases,
    machine_suite,
    pyenv_python,
    stand_in_base,
)
from tests.support.tools import required_program

TAG = "localhost/llm-proxy:test"
BAKED_CONFIG = ROOT / "deploy" / "kubernetes" / "proxy.yaml"
PUBLISHED = ("--publish=127.0.0.1::8080", "--publish=127.0.0.1::9090")  # API, /metrics
# Run in the image: every pip it has, as a list.
FIND_PIP = """
import os, subprocess, sys
names = ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}")
found = [
    os.path.join(directory, name)
    for directory in os.environ["PATH"].split(os.pathsep)
    for name in names
    if os.path.lexists(os.path.join(directory, name))
]
base = os.path.join(sys.base_prefix, "bin", "python3")
if subprocess.run([base, "-m", "pip", "--version"], capture_output=True).returncode == 0:
    found.append(f"{base} -m pip")
print(found)
"""
# Run in the image: the first few modules of the standard library without bytecode.
FIND_UNCOMPILED = """
import importlib.util, os, pathlib, sysconfig
modules = pathlib.Path(sysconfig.get_path("stdlib")).rglob("*.py")
print([str(m) for m in modules if not os.path.exists(importlib.util.cache_from_source(str(m)))][:5])
"""


@dataclass(frozen=True)
class Image:
    podman: Podman
    tag: str
    user: str


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must build the image (.ci/run installs podman)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    if os.geteuid() != 0:
        pytest.skip("the image tests run podman as root (CI does)")
    required_program("podman", "podman")
    work = tmp_path_factory.mktemp("image")
    podman = Podman.configured(work)
    info = podman.call("info")
    if info.returncode != 0:
        unavailable(f"podman does not run here: {info.stderr.strip()[-500:]}")
    runtime_base, build_base = dockerfile_bases()
    # One build at a time on the machine (pytest-xdist's workers each get this fixture).
    with open(os.path.join(tempfile.gettempdir(), "llm-proxy-image.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bases: list[str] = []
        if not (podman.exists(runtime_base) and podman.exists(build_base)):
            base = make_stand_in(podman, runtime_base, work)
            bases = [f"PYTHON_IMAGE={base}", f"BUILD_IMAGE={base}"]
        build_image(podman, TAG, bases, work)
    user = podman.run("image", "inspect", "--format={{.Config.User}}", TAG)
    return Image(podman, TAG, user)


def make_stand_in(podman: Podman, runtime_base: str, work: Path) -> str:
    """A stand-in for the Dockerfile's bases, which are not in podman's store (``podman pull``
    them where a registry is in reach). The build stage gets the slim one too: it needs pip,
    and would need the real build image's C compiler only for a dependency without a wheel."""
    wanted = re.fullmatch(r"python:(\d+\.\d+)-slim-(\w+)", runtime_base)
    assert wanted, runtime_base
    version, suite = wanted.groups()
    required_program("mmdebstrap", "mmdebstrap")
    prefix = pyenv_python(version)
    if prefix is None:
        unavailable(f"no {runtime_base} in podman's store, and no pyenv CPython {version} here")
    if machine_suite() != suite:
        unavailable(f"the pyenv CPython here is built for Debian {machine_suite()}, not {suite}")
    sources = apt_sources(suite)
    if sources is None:
        unavailable(f"no apt source for Debian {suite} in /etc/apt")
    return stand_in_base(podman, prefix, suite, sources, work)


# --- containers --------------------------------------------------------------------------------


def hardened(image: Image) -> list[str]:
    """As deploy/kubernetes and compose run the proxy. podman's --read-only would leave /tmp,
    /var/tmp and /run writable: as Docker and Kubernetes do, only the /tmp asked for is."""
    return [
        "--read-only",
        "--read-only-tmpfs=false",
        "--tmpfs=/tmp",
        f"--user={image.user}",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
    ]


@contextmanager
def container(image: Image, role: str, *args: str) -> Iterator[str]:
    """A container of the image, detached, removed after: its name."""
    name = f"llm-proxy-test-{os.getpid()}-{role}"
    image.podman.run("run", "--detach", f"--name={name}", *args)
    try:
        yield name
    finally:
        image.podman.call("rm", "--force", "--time=0", name)


def address(image: Image, name: str, port: int) -> str:
    published = image.podman.run("port", name, f"{port}/tcp").splitlines()[0]
    return "http://" + published.replace("0.0.0.0", "127.0.0.1")


def logs(image: Image, name: str) -> str:
    done = image.podman.call("logs", name)
    return (done.stdout + done.stderr)[-4000:]


def wait_until_answers(image: Image, name: str, url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        running = image.podman.run("inspect", "--format={{.State.Running}}", name)
        assert running == "true", f"{name} stopped:\n{logs(image, name)}"
        with contextlib.suppress(OSError):
            if http_get(url)[0] == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer 200 within {seconds:g} s\n{logs(image, name)}")


def stop(image: Image, name: str) -> int:
    """SIGTERM, as docker stop and Kubernetes send it: the exit code."""
    image.podman.run("kill", "--signal=TERM", name)
    return int(image.podman.run("wait", name, timeout=60))


@contextmanager
def compose_stack(image: Image) -> Iterator[tuple[str, str, str]]:
    """compose's emulator and proxy from the image, the emulator as "emulator" on a network of
    their own: the proxy's name, its API and its metrics addresses."""
    network = f"llm-proxy-test-{os.getpid()}"
    image.podman.run("network", "create", network)
    try:
        with container(
            image,
            "emulator",
            f"--network={network}",
            "--network-alias=emulator",
            # It has no SIGTERM handler of its own (compose gives it an init too).
            "--init",
            "--read-only",
            "--read-only-tmpfs=false",
            "--publish=127.0.0.1::9100",  # to see when it answers
            "--entrypoint=llm-proxy",
            image.tag,
            "emulate",
            *compose_emulator_options(),
            "--host=0.0.0.0",
            "--port=9100",
        ) as emulator:
            wait_until_answers(image, emulator, address(image, emulator, 9100) + "/v1/models")
            with container(
                image,
                "proxy",
                *hardened(image),
                *PUBLISHED,
                f"--network={network}",
                "--env=LLM_PROXY_WORKERS=2",
                "--env=EMULATOR_URL=http://emulator:9100",
                f"--volume={COMPOSE_CONFIG}:/etc/llm-proxy/proxy.yaml:ro",
                image.tag,
            ) as proxy:
                api, metrics = address(image, proxy, 8080), address(image, proxy, 9090)
                wait_until_answers(image, proxy, api + "/readyz")
                yield proxy, api, metrics
    finally:
        image.podman.call("network", "rm", "--force", network)


def chat(api: str, model: str, *, stream: bool) -> tuple[int, str]:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]}
    request = urllib.request.Request(
        f"{api}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer sk-research", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def requests_in_flight(metrics: str) -> float:
    status, body = http_get(metrics + "/metrics")
    assert status == 200, body
    return sum(
        sample.value
        for family in text_string_to_metric_families(body.decode())
        if family.name == "llm_proxy_requests_in_flight"
        for sample in family.samples
    )


# --- tests -------------------------------------------------------------------------------------


def test_the_image_keeps_its_healthcheck_and_carries_no_installer(image: Image) -> None:
    (info,) = json.loads(image.podman.run("image", "inspect", image.tag))
    # podman's OCI format has no HEALTHCHECK: the image must be built with --format docker.
    assert info["Healthcheck"]["Test"], info
    assert info["Config"]["User"] == "10001:10001"
    assert info["Config"]["Entrypoint"] == ["llm-proxy", "serve"]
    # No pip on the PATH (not even a dangling link), nor in the interpreter behind the virtualenv.
    found = image.podman.run(
        "run", "--rm", *hardened(image), "--entrypoint=python", image.tag, "-c", FIND_PIP
    )
    assert found == "[]", found


def test_the_standard_library_is_compiled(image: Image) -> None:
    # The base image deletes its bytecode, and a read-only root cannot cache it: without the
    # Dockerfile's compileall, every process (the supervisor, each worker) would compile what it
    # imports anew at each start.
    missing = image.podman.run(
        "run", "--rm", *hardened(image), "--entrypoint=python", image.tag, "-c", FIND_UNCOMPILED
    )
    assert missing == "[]", missing


def test_the_baked_config_serves_read_only_and_unprivileged(image: Image) -> None:
    # Each ${VAR} without a default, as the Kubernetes Secret would give it.
    names = sorted(set(re.findall(r"\$\{([A-Za-z_]\w*)\}", BAKED_CONFIG.read_text())))
    env = [f"--env={name}=dummy-{name.lower()}" for name in names]
    with container(image, "baked", *hardened(image), *PUBLISHED, *env, image.tag) as proxy:
        api = address(image, proxy, 8080)
        wait_until_answers(image, proxy, api + "/healthz")
        wait_until_answers(image, proxy, api + "/readyz")
        assert image.podman.call("healthcheck", "run", proxy).returncode == 0, logs(image, proxy)
        ids = image.podman.run("exec", proxy, "python", "-c", "import os; print(os.getuid())")
        assert ids == image.user.partition(":")[0]
        assert stop(image, proxy) == 0, logs(image, proxy)


def test_chat_and_stream_in_front_of_the_emulator(image: Image) -> None:
    with compose_stack(image) as (_, api, _):
        status, body = chat(api, "gpt-4o-mini", stream=False)
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"], body
        status, body = chat(api, "llama-3.1-8b", stream=True)
        assert status == 200 and body.rstrip().endswith("data: [DONE]"), body


def test_sigterm_drains_a_stream_in_flight(image: Image) -> None:
    with compose_stack(image) as (proxy, api, metrics):
        answers: list[tuple[int, str]] = []
        # slow-llama's upstream waits 2 s before its first byte: SIGTERM arrives meanwhile.
        client = threading.Thread(
            target=lambda: answers.append(chat(api, "slow-llama", stream=True))
        )
        client.start()
        deadline = time.monotonic() + 30
        while requests_in_flight(metrics) < 1:
            assert time.monotonic() < deadline, "the stream never showed in flight"
            time.sleep(0.05)
        code = stop(image, proxy)
        client.join(60)
        assert answers and answers[0][0] == 200, answers
        assert answers[0][1].rstrip().endswith("data: [DONE]"), answers
        assert code == 0, logs(image, proxy)
        assert re.search(r"worker \d+ draining", logs(image, proxy)), logs(image, proxy)
