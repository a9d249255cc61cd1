#!/usr/bin/env bash
# Side-by-side hop benchmark (bench/wrk.py): the legacy fixture and a fast
# upstream, each direct, behind nginx, behind a bare Starlette + aiohttp hop and
# behind mcp-shim, measured with wrk in one run. Options go to bench/wrk.py:
#   bash bench/wrk.sh [--seconds 8] [--passes 2] [--concurrency 1,8,32] [--only fast]
# Needs wrk and nginx (Debian packages `wrk` and `nginx-light`, installed here
# with apt-get when missing and run as root; otherwise install them yourself),
# the project's venv (.venv, with the dev extras) and the legacy peer
# (bash scripts/setup_peers.sh legacy).
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "bench/wrk.sh needs ${missing[*]}: sudo apt-get install ${missing[*]}" >&2
        exit 2
    fi
    echo "installing ${missing[*]} (apt-get)" >&2
    apt-get update -q >/dev/null
    # The bench starts its own nginx; the package's service must not start.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
export PATH="$PATH:/usr/sbin"
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || { echo "no $PY: python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'" >&2; exit 2; }
cd "$ROOT"
exec "$PY" bench/wrk.py "$@"
