#!/usr/bin/env bash
# The mcp-shim demo, no Docker needed: the bundled legacy MCP server (official
# Python SDK mcp 1.x, Streamable HTTP with sessions) on 127.0.0.1:3001 and the
# gateway on 127.0.0.1:8080 in front of it. Prints a curl command to try, and
# stops both on Ctrl-C.
#
# Usage:
#   bash scripts/demo.sh
#
# What it does first: creates .venv if it is missing and installs mcp-shim
# into it (pip install -e .), then builds the legacy server's environment
# .peers/legacy, and only that one, with `scripts/setup_peers.sh legacy`
# (pinned by tests/peers/legacy-requirements.txt; no npm, none of the other
# test peers).
#
# Environment:
#   PYTHON              interpreter for the virtual environments (default python3, >= 3.11)
#   DEMO_LEGACY_PORT    port of the demo legacy server (default 3001)
#   MCP_SHIM_PORT       port of the gateway (default 8080); every other MCP_SHIM_*
#                       variable is passed to the gateway as well (README.md)
#   DEMO_SKIP_INSTALL=1 use .venv and .peers/legacy as they are: no pip, no setup_peers.sh
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
LEGACY_PORT="${DEMO_LEGACY_PORT:-3001}"
export MCP_SHIM_HOST="${MCP_SHIM_HOST:-127.0.0.1}"
export MCP_SHIM_PORT="${MCP_SHIM_PORT:-8080}"
export MCP_SHIM_LOG_LEVEL="${MCP_SHIM_LOG_LEVEL:-info}"
export MCP_SHIM_UPSTREAM_URL="http://127.0.0.1:${LEGACY_PORT}/mcp"
GATEWAY="http://127.0.0.1:${MCP_SHIM_PORT}"

say() { printf 'demo: %s\n' "$*"; }
die() {
    printf 'demo: ERROR: %s\n' "$*" >&2
    exit 1
}

# ------------------------------------------------------------------- ports
# Both ports are checked before anything is installed, and every busy one is
# named at once: a second demo learns what to change from one try.
busy=""
for spec in "$LEGACY_PORT:DEMO_LEGACY_PORT" "$MCP_SHIM_PORT:MCP_SHIM_PORT"; do
    port="${spec%%:*}"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        busy+="${busy:+; }port $port is in use (set ${spec#*:}=...)"
    fi
done
[[ -z "$busy" ]] || die "$busy"

# ------------------------------------------------------------------ install
# run_quiet WHAT CMD...: the command's output is shown only if it fails (minus
# the harmless "Location 'file:///...' is ignored" lines some pip setups print).
run_quiet() {
    local what="$1" log
    shift
    log="$(mktemp "${TMPDIR:-/tmp}/mcp-shim-demo-install.XXXXXX")"
    if ! "$@" >"$log" 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 >&2 || true
        die "$what failed (full log: $log)"
    fi
    rm -f "$log"
}

if [[ "${DEMO_SKIP_INSTALL:-0}" != 1 ]]; then
    command -v "$PYTHON" >/dev/null || die "no Python interpreter '$PYTHON' (set PYTHON=...)"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$PYTHON is $("$PYTHON" -V 2>&1); mcp-shim needs Python >= 3.11"
    if [[ ! -x .venv/bin/python ]]; then
        say "creating .venv ..."
        run_quiet "creating .venv" "$PYTHON" -m venv .venv
    fi
    say "installing mcp-shim into .venv ..."
    run_quiet "pip install -e ." .venv/bin/python -m pip install --disable-pip-version-check -e .
    PYTHON="$PYTHON" bash scripts/setup_peers.sh legacy
fi
[[ -x .venv/bin/mcp-shim ]] || die ".venv/bin/mcp-shim is missing (run without DEMO_SKIP_INSTALL)"
[[ -x .peers/legacy/bin/python ]] || die ".peers/legacy is missing (run without DEMO_SKIP_INSTALL)"

# -------------------------------------------------------------------- start
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/mcp-shim-demo.XXXXXX")"
LEGACY_PID=""
GATEWAY_PID=""

# stopping_already PID LOG: whether the process has ended or its log says it is
# stopping, within a second. A terminal's Ctrl-C reaches every process of its
# group, the servers too, often before this shell's trap runs; a second signal
# would be the gateway's "force" (logged as workers_forced, open calls cut).
stopping_already() {
    local i
    for ((i = 0; i < 10; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        grep -qE 'workers_stopping|Shutting down' "$2" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# stop [ctrl-c]: each server gets one SIGTERM, unless after a Ctrl-C it is
# already stopping on its own; then both are waited for.
stop() {
    trap - INT TERM EXIT
    local pid log
    for pid in $GATEWAY_PID $LEGACY_PID; do
        log=$([[ $pid == "$LEGACY_PID" ]] && echo "$LOGS/legacy.log" || echo "$LOGS/gateway.log")
        if [[ "${1:-}" == ctrl-c ]] && stopping_already "$pid" "$log"; then
            continue
        fi
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $GATEWAY_PID $LEGACY_PID; do
        wait "$pid" 2>/dev/null || true
    done
    say "logs kept in $LOGS"
}
trap 'echo; say "stopping ..."; stop ctrl-c; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

# wait_up NAME URL PID LOG: until URL answers 200, or the process is gone.
wait_up() {
    local name="$1" url="$2" pid="$3" log="$4" i
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || {
            tail -n 30 "$log" >&2 || true
            die "the $name exited during start-up (log: $log)"
        }
        if .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
            "$url" 2>/dev/null; then
            return
        fi
        sleep 0.1
    done
    die "the $name did not answer $url within 30 s (log: $log)"
}

.peers/legacy/bin/python tests/fixtures/legacy_server.py --host 127.0.0.1 --port "$LEGACY_PORT" \
    >"$LOGS/legacy.log" 2>&1 &
LEGACY_PID=$!
wait_up "legacy server" "http://127.0.0.1:${LEGACY_PORT}/healthz" "$LEGACY_PID" "$LOGS/legacy.log"

.venv/bin/mcp-shim >"$LOGS/gateway.log" 2>&1 &
GATEWAY_PID=$!
wait_up "gateway" "$GATEWAY/healthz" "$GATEWAY_PID" "$LOGS/gateway.log"

cat <<EOF

mcp-shim demo is running:
  gateway        $GATEWAY/mcp   (log: $LOGS/gateway.log)
  legacy server  http://127.0.0.1:${LEGACY_PORT}/mcp   (log: $LOGS/legacy.log)

A 2026-07-28 client's tools/call of the legacy server's echo tool, through the gateway:

curl -sS $GATEWAY/mcp \\
  -H 'Content-Type: application/json' \\
  -H 'Accept: application/json, text/event-stream' \\
  -H 'MCP-Protocol-Version: 2026-07-28' \\
  -H 'Mcp-Method: tools/call' \\
  -H 'Mcp-Name: echo' \\
  -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'

Press Ctrl-C to stop both.
EOF

# Until Ctrl-C, or until either process ends on its own.
set +e
wait -n
status=$?
set -e
# Ctrl-C reaches every process of the terminal's foreground group, so the
# servers may stop on it before this shell's INT trap runs; and a shell started
# with SIGINT ignored (a background job of another script) cannot trap it at
# all, while the servers still stop on it. A server that stops on SIGINT or
# SIGTERM exits 130 or 143, or 0 after a graceful shutdown (uvicorn's, which
# runs only on those signals): the stop the user asked for, not an error.
if [[ $status -eq 0 || $status -eq 130 || $status -eq 143 ]]; then
    echo
    say "stopping ..."
    stop ctrl-c
    exit "$((status == 0 ? 130 : status))"
fi
for pid in $LEGACY_PID $GATEWAY_PID; do
    if ! kill -0 "$pid" 2>/dev/null; then
        name=$([[ $pid == "$LEGACY_PID" ]] && echo "legacy server" || echo "gateway")
        log=$([[ $pid == "$LEGACY_PID" ]] && echo "$LOGS/legacy.log" || echo "$LOGS/gateway.log")
        tail -n 30 "$log" >&2 || true
        die "the $name stopped (exit $status; log: $log)"
    fi
done
