"""The project's Dockerfile built and run with podman (Debian's package, rootful, with runc), on
a machine like CI's: no container registry in reach, only Debian's and PyPI's.

- ``Podman`` runs podman with a containers.conf of its own: this kind of machine cannot raise
  rlimits to podman's defaults (no CAP_SYS_RESOURCE), has no journald for container logs, and
  mixes cgroup v1 and v2 (which crun refuses and runc accepts).
- ``stand_in_base`` makes the Dockerfile's ``python:X.Y-...-SUITE`` bases locally when they are
  not in podman's store: a minimal Debian of this machine's release (mmdebstrap, from the apt
  sources configured here) with this machine's pyenv CPython X.Y under /usr/local and pip, as
  the official slim image has them.
- ``build_image`` builds the Dockerfile unchanged (docker format, else podman drops the
  HEALTHCHECK), pip in its RUN steps reaching its index as this machine's pip does.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
CA_MOUNTED = "/etc/ssl/certs/ca-certificates.crt"  # where Debian's ca-certificates keeps it


@dataclass(frozen=True)
class Podman:
    conf: Path

    @classmethod
    def configured(cls, directory: Path) -> Podman:
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1048576)
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
        conf = directory / "containers.conf"
        conf.write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            'log_driver = "k8s-file"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
        )
        return cls(conf)

    def call(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "CONTAINERS_CONF": str(self.conf)},
        )

    def run(self, *args: str, timeout: float = 120) -> str:
        """``podman ARGS``: its stdout; a failure raises with its stderr."""
        done = self.call(*args, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout.strip()

    def exists(self, image: str) -> bool:
        return self.call("image", "exists", image).returncode == 0


def dockerfile_bases() -> tuple[str, str]:
    """The Dockerfile's default (PYTHON_IMAGE, BUILD_IMAGE)."""
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), flags=re.MULTILINE))
    return args["PYTHON_IMAGE"], args["BUILD_IMAGE"]


def machine_suite() -> str:
    release = Path("/etc/os-release").read_text()
    found = re.search(r"^VERSION_CODENAME=(\w+)$", release, flags=re.MULTILINE)
    return found.group(1) if found else ""


def pyenv_python(version: str) -> Path | None:
    """The newest pyenv CPython ``version``.N on this machine, its prefix."""
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = Path(subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip())
    else:
        root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    root /= "versions"
    found = [
        prefix
        for prefix in root.glob(f"{version}.*")
        if re.fullmatch(r"\d+\.\d+\.\d+", prefix.name)
        and (prefix / "bin" / f"python{version}").exists()
    ]
    return max(found, key=lambda p: [int(n) for n in p.name.split(".")], default=None)


def apt_sources(suite: str) -> Path | None:
    """The apt sources file configured here for ``suite`` (mmdebstrap reads either format)."""
    for path in [
        *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
        Path("/etc/apt/sources.list"),
    ]:
        if path.is_file() and re.search(rf"^[^#]*\b{suite}\b", path.read_text(), re.MULTILINE):
            return path
    return None


def stand_in_base(podman: Podman, prefix: Path, suite: str, sources: Path, work: Path) -> str:
    """A local stand-in for ``python:X.Y-slim-SUITE``, made once: its tag."""
    tag = f"localhost/llm-proxy-base:python{prefix.name}-slim-{suite}"
    if podman.exists(tag):
        return tag
    minor = ".".join(prefix.name.split(".")[:2])
    stdlib = f"./lib/python{minor}"
    # CPython's runtime libraries, as the official slim image installs them (tkinter's aside).
    libraries = (
        "ca-certificates,netbase,tzdata,libbz2-1.0,libexpat1,libffi8,liblzma5,libncursesw6,"
        "libreadline8,libsqlite3-0,libssl3,libtinfo6,libuuid1,zlib1g"
    )
    copy = (
        f"tar -C {prefix} --exclude={stdlib}/test --exclude='*/idle_test' "
        f"--exclude='*/__pycache__' --exclude='libpython*.a' --exclude='{stdlib}/site-packages/*' "
        f"--exclude='./bin/pip*' -cf - . | tar -C \"$1/usr/local\" -xf -"
    )
    hooks = [
        # CPython under /usr/local, without its tests, bytecode, static library, or anything
        # this machine added to its site-packages (the official image deletes the same).
        copy,
        f'grep -rlI --null {prefix} "$1/usr/local/bin" "$1/usr/local/lib/python{minor}" '
        f"| xargs -0 -r sed -i 's|{prefix}|/usr/local|g'",
        'chroot "$1" ldconfig',
        # Its pip afresh from the wheel CPython bundles, without this machine's environment
        # (its PIP_* settings name files of its own); and the official image's pip -> pip3.
        f'chroot "$1" env -i /usr/local/bin/python{minor} -m ensurepip',
        'ln -s pip3 "$1/usr/local/bin/pip"',
        'find "$1/usr/local" -depth -type d -name __pycache__ -exec rm -rf {} +',
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log',
    ]
    tarball = work / "base.tar"
    excluded = ("man", "info", "doc", "locale")
    made = subprocess.run(
        [
            "mmdebstrap",
            "--variant=minbase",
            "--mode=root",
            "--format=tar",
            "--quiet",
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            f"--include={libraries}",
            *[f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in excluded],
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            *[f"--customize-hook={hook}" for hook in hooks],
            suite,
            str(tarball),
            str(sources),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, f"mmdebstrap: {made.stderr[-3000:]}"
    changes = [
        "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        f"ENV PYTHON_VERSION={prefix.name}",
        'CMD ["python3"]',
    ]
    podman.run("import", *[f"--change={c}" for c in changes], str(tarball), tag, timeout=300)
    tarball.unlink()
    return tag


def pip_settings(work: Path) -> list[str]:
    """``podman build`` volumes giving the RUN steps this machine's pip index settings and the
    CA bundle it trusts, less what names this machine's own files (find-links, file://
    indexes, constraints), which a container cannot see. Nothing of them stays in a layer."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    seen: dict[str, str] = {}
    for line in listed.splitlines():  # the environment's entries come first and win, as in pip
        found = re.match(r"^(?::env:|global|install|download)\.([\w-]+)='(.*)'$", line)
        if found and found.group(1) not in seen:
            seen[found.group(1)] = found.group(2)
    bundle = Path(seen.get("cert") or os.environ.get("SSL_CERT_FILE") or CA_MOUNTED)
    settings = {"cert": CA_MOUNTED} if bundle.is_file() else {}
    for key in ("index-url", "extra-index-url", "trusted-host"):
        values = [v for v in seen.get(key, "").split() if not v.startswith(("file:", "/"))]
        if values:
            settings[key] = " ".join(values)
    for key, name in (("default-timeout", "timeout"), ("timeout", "timeout"), ("proxy", "proxy")):
        if key in seen:
            settings[name] = seen[key]
    conf = work / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    volumes = ["-v", f"{conf}:/etc/pip.conf:ro"]
    return volumes + (["-v", f"{bundle}:{CA_MOUNTED}:ro"] if settings.get("cert") else [])


def build_image(podman: Podman, tag: str, bases: list[str], work: Path) -> None:
    """The Dockerfile built as ``tag``; ``bases`` are its build arguments, if any."""
    args = [f"--build-arg={arg}" for arg in bases]
    # Docker's format: podman's default (OCI) has no HEALTHCHECK and drops it with a warning.
    podman.run(
        "build",
        "--pull=never",
        "--format=docker",
        *pip_settings(work),
        *args,
        f"--tag={tag}",
        f"--file={DOCKERFILE}",
        str(ROOT),
        timeout=1200,
    )
    # The build stage stays behind as an untagged image: the next build reuses its layers.
