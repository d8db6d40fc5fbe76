#!/usr/bin/env bash
# What bench/run.py needs, installed on demand (never by CI, never a project dependency):
#   - nginx with its echo module, and wrk, from Debian's packages (needs root);
#   - mypy, types-PyYAML and setuptools, to compile ours as the Docker image does, beside the
#     interpreter given as --python (when it is a virtualenv's);
#   - a separate virtualenv (default .bench-venv, or the path given as --venv PATH) with py-spy
#     and the peers measured by `bench/run.py --peers`: LiteLLM's proxy and TensorZero. It is
#     made with `python3`, or with the interpreter given as --python PATH: give the one that
#     runs bench/run.py, so that LiteLLM runs on the same Python as ours (docs/performance.md).
# Usage: bash bench/setup.sh [--tools-only] [--venv PATH] [--python PATH]
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.bench-venv
python=python3
tools_only=no
while [ $# -gt 0 ]; do
    case "$1" in
        --tools-only) tools_only=yes ;;
        --venv) venv="$2"; shift ;;
        --python) python="$2"; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

# The peers' versions: those of issue 6's figures. Override to measure others.
LITELLM=${LITELLM:-litellm[proxy]==1.108.7}
TENSORZERO=${TENSORZERO:-tensorzero==2026.6.0}
PY_SPY=${PY_SPY:-py-spy==0.4.3}
# The compiler's, as the Dockerfile pins them.
MYPY=${MYPY:-mypy==2.4.1}
TYPES_PYYAML=${TYPES_PYYAML:-types-PyYAML==6.0.12.20261122}

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null \
    || [ ! -e /usr/lib/nginx/modules/ngx_http_echo_module.so ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        nginx-light libnginx-mod-http-echo wrk >/dev/null
fi
echo "nginx: $(nginx -v 2>&1); wrk: $(wrk -v 2>&1 | head -1)"

# What compiling ours takes (bench/compiled.py: mypyc, as the Docker image builds it), in the
# environment of the interpreter that runs bench/run.py, if it is a virtualenv.
if [ "$tools_only" = no ]; then
    if "$python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
        "$python" -m pip install -q "$MYPY" "$TYPES_PYYAML" "setuptools>=77"
    else
        echo "$python is no virtualenv's: to compile ours, install $MYPY $TYPES_PYYAML setuptools>=77 where bench/run.py runs (or run it with --pure)"
    fi
    [ -x "$venv/bin/pip" ] || "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "$PY_SPY" "$LITELLM" "$TENSORZERO"
    echo "peers in $venv: $("$venv/bin/pip" list 2>/dev/null | grep -E '^(litellm|tensorzero|py-spy) ' | tr -s ' ' | paste -sd ';')"
fi
