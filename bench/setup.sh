#!/usr/bin/env bash
# What bench/run.py needs, installed on demand (never by CI, never a project dependency):
#   - nginx with its echo module, and wrk, from Debian's packages (needs root);
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

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null \
    || ! command -v redis-server >/dev/null \
    || [ ! -e /usr/lib/nginx/modules/ngx_http_echo_module.so ]; then
    apt-get update -qq
    # redis-server: bench/limits.py's shared store.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        nginx-light libnginx-mod-http-echo wrk redis-server >/dev/null
fi
echo "nginx: $(nginx -v 2>&1); wrk: $(wrk -v 2>&1 | head -1)"

# py-spy and the peers, in a virtualenv of their own.
if [ "$tools_only" = no ]; then
    [ -x "$venv/bin/pip" ] || "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "$PY_SPY" "$LITELLM" "$TENSORZERO"
    echo "peers in $venv: $("$venv/bin/pip" list 2>/dev/null | grep -E '^(litellm|tensorzero|py-spy) ' | tr -s ' ' | paste -sd ';')"
fi
