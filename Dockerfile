# llm-proxy: the gateway as a container image.
#
#   docker build -t llm-proxy .
#   docker run --rm -p 8080:8080 -p 9090:9090 --env-file keys.env llm-proxy
#
# With podman or buildah, build with `--format docker`: their default format (OCI) has no
# HEALTHCHECK, and they drop it with a warning.
#
# The image runs `llm-proxy serve --config /etc/llm-proxy/proxy.yaml` as an unprivileged user.
# The baked config is deploy/kubernetes/proxy.yaml (keys from the environment); mount a directory
# of your own over /etc/llm-proxy to replace it. LLM_PROXY_WORKERS sets the worker processes.
# docs/deployment.md has the details.

# Python 3.13: the newest CPython CI (.ci/run) tests the package on, beside 3.11.
ARG PYTHON_IMAGE=python:3.13-slim-bookworm
# The build stage's: the same Python and Debian (keep the two in step), with the C compiler and
# headers for a dependency that has no wheel for the platform. Nothing of it but the virtualenv
# reaches the final image.
ARG BUILD_IMAGE=python:3.13-bookworm

# --- build: the project and its runtime dependencies, installed into a virtualenv ---------------
FROM ${BUILD_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
# A virtualenv without pip: the base image's pip installs into it, so the virtualenv holds the
# project and what it imports at run time, and no installer (the final stage drops the base's).
RUN python -m venv --without-pip /opt/llm-proxy
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# proxy/demo.yaml is a link to config/demo.yaml: without its target the package would lose it.
COPY config/demo.yaml ./config/demo.yaml
# Not editable, so the virtualenv stands alone; pip compiles the bytecode now, because the
# container's root filesystem is read-only at run time.
# With the otel, aws and gcp extras: a configuration's `telemetry:`, Bedrock and Vertex AI need no
# other image (docs/telemetry.md, docs/providers/bedrock.md, docs/providers/vertex.md).
# "./[otel]", not ".[otel]": hadolint reads the latter as a package from an index to pin.
RUN pip --python /opt/llm-proxy/bin/python install --no-cache-dir --compile "./[otel,aws,gcp]"

# --- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

# A fixed numeric uid, so that Kubernetes' runAsNonRoot can check it and runAsUser can name it.
# The base image's pip (and its pip -> pip3 link) goes: the image runs, it installs nothing. And
# the base deletes its standard library's bytecode, which a read-only root (and an unprivileged
# user) cannot cache: compiled once here, not by every process at each start.
RUN groupadd --system --gid 10001 llm-proxy \
    && useradd --system --uid 10001 --gid llm-proxy --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin llm-proxy \
    && python -m pip uninstall --yes --quiet --root-user-action=ignore pip \
    && rm -f /usr/local/bin/pip \
    && python -m compileall -q -j 0 "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"

COPY --from=build /opt/llm-proxy /opt/llm-proxy
COPY deploy/kubernetes/proxy.yaml /etc/llm-proxy/proxy.yaml

ENV PATH=/opt/llm-proxy/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LLM_PROXY_WORKERS=2

USER 10001:10001
WORKDIR /tmp
# 8080: the API, /healthz and /readyz; 9090: /metrics (metrics.port of the baked config).
EXPOSE 8080 9090
# SIGTERM drains: each worker stops accepting and gives requests in flight up to
# server.drain_seconds. Allow more than that before a kill (docker stop -t, compose
# stop_grace_period, Kubernetes terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# The slim image has no curl: Python asks /healthz (200 while the process is alive).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

# Exec form: llm-proxy is PID 1 and gets SIGTERM itself (no shell in between to swallow it).
ENTRYPOINT ["llm-proxy", "serve"]
CMD ["--config", "/etc/llm-proxy/proxy.yaml"]
